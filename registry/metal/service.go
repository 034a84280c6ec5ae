package metal

import (
	"log/slog"

	"github.com/better-compute/better-compute/clock"
	"github.com/better-compute/better-compute/proto"
	"github.com/better-compute/better-compute/registry/store"
	"github.com/better-compute/better-compute/registry/workflow"
)

// Config is what the metal service runs with.
type Config struct {
	Store  *store.Store
	Engine *workflow.Engine
	// Joins tells of agents joining, for wait.agentJoined and metal.ensureRamdisk.
	Joins workflow.Joins
	// HardwareProfiles are the hardware profiles nodes and pools may name.
	HardwareProfiles HardwareProfiles
	// Images resolves and verifies deploy.deploy's image; without it deploy.deploy is
	// UNSUPPORTED.
	Images Images
	// AllowUnsignedImages lets a tenant-private unsigned OS image deploy: for
	// development only.
	AllowUnsignedImages bool
	// UserData renders userdata.render; without it the step is UNSUPPORTED.
	UserData UserData
	// Generations tells what an agent has applied, for wait.generationObserved; without
	// it the step is UNSUPPORTED.
	Generations Generations
	// Ramdisk mints ramdisk boots for boot.prepareRamdisk and metal.ensureRamdisk;
	// without it those steps are UNSUPPORTED.
	Ramdisk RamdiskBoots
	// Presence tells whether a node's installed OS agent is connected, for the
	// automatic remediation of a pool's policy.remediation.agentGoneAfter; without it
	// that rule never fires.
	Presence Presence
	Log      *slog.Logger
	// Clock times the waits of metal's own steps (a MAC discovery's polling); clock.Real
	// when nil.
	Clock clock.Clock
}

// Service is metal's node lifecycle.
type Service struct {
	cfg    Config
	absent absences
}

// New returns the service and registers its steps, and what the end of a deploy does,
// with the engine.
func New(cfg Config) *Service {
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.Real{}
	}
	s := &Service{cfg: cfg}
	e := cfg.Engine
	e.Handle(stepEnsureRamdisk, s.ensureRamdisk)
	e.GuardRelays(s.noRamdisk)
	e.Handle(proto.StepRevokeIdentity, s.revokeIdentity)
	e.Handle(proto.StepRenderUserData, s.renderUserData)
	e.Handle(proto.StepWaitAgentJoined, s.waitAgentJoined)
	e.Handle(proto.StepWaitGenerationObserved, s.waitGenerationObserved)
	e.Handle(proto.StepAttestBoot, s.attestBoot)
	e.Handle(proto.StepDeploy, s.deployImage)
	e.Handle(proto.CommandPrepareRamdisk, s.prepareRamdisk)
	e.Handle(proto.CommandInventoryRefresh, s.refreshInventory)
	e.Handle(proto.CommandDiagDCGM, s.diagDCGM)
	e.Handle(proto.CommandSetPower, s.setPower)
	e.Handle(proto.CommandInspectOOB, s.inspectOOB)
	for req := range transitions {
		e.OnFinish(string(req), s.ended)
	}
	e.CheckEnd(string(Deploy), s.deployFailsAtEnd)
	return s
}

// Start runs a workflow created in a committed transaction; for a cancelled one it
// abandons the attempt it is on. A workflow that takes the machine away from its
// installed OS moved the node's identity epoch in that transaction, whose commit ended
// the sessions of that OS's agent and of a ramdisk booted before it
// (store.Store.OnNodeIdentity) before Start runs any step.
func (s *Service) Start(run store.Run) {
	if run.Cancelled != nil {
		s.cfg.Engine.Abort(run.ID)
		return
	}
	s.cfg.Engine.Start(run.ID)
}

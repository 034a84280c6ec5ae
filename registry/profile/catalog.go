package profile

import (
	"slices"
	"time"

	"github.com/better-compute/better-compute/jsondoc"
	"github.com/better-compute/better-compute/proto"
)

// Places a step runs: proto's places, as text.
const (
	// Site: relayed to the site agent of the machine's rack (its BMC and boot server).
	Site = string(proto.PlaceSite)
	// Ramdisk: relayed to the agent of the RAM disk the machine booted.
	Ramdisk = string(proto.PlaceRamdisk)
	// Node: relayed to the agent of the installed OS.
	Node = string(proto.PlaceNode)
	// ControlPlane: run by the registry itself.
	ControlPlane = string(proto.PlaceControlPlane)
)

var places = texts(proto.Places)

// stepSpec is one step of the catalog: proto's step kind (its name and where it can
// run), and what a profile adds to it: the checks of its input, its default timeout.
type stepSpec struct {
	name string
	// runs lists the places the step can run; the first is where it runs by default.
	// placed fills it in from proto.Steps.
	runs    []string
	timeout time.Duration
	// inputs are the fields of the step's with, in the order the documentation gives them.
	inputs []input
	// exactlyOne names inputs of which exactly one must be set.
	exactlyOne []string
	// awaits reports whether the step, with the given with (nil when left out), can await
	// the machine's rejoin.
	awaits func(with *jsondoc.Value) bool
}

// input is one field of a step's with.
type input struct {
	name     string
	required bool
	// def is the value Render fills in when the field is left out, nil for none.
	def   any
	check func(w *walker, v *jsondoc.Value, p jsondoc.Path)
}

// The steps of the catalog: one for each of proto.Steps, in its order.
var catalog = placed([]stepSpec{
	{name: proto.CommandGetPower, timeout: 2 * time.Minute},
	{name: proto.CommandSetPower, timeout: 5 * time.Minute,
		inputs: []input{{name: "action", required: true, check: oneOf(proto.PowerActions...)}},
		awaits: func(with *jsondoc.Value) bool {
			action := with.Get("action")
			return action != nil && proto.PowerAction(action.Text).Boots()
		}},
	{name: proto.CommandSetBootDevice, timeout: 2 * time.Minute,
		inputs: []input{
			{name: "device", required: true, check: oneOf(proto.BootDevices...)},
			{name: "persistent", def: false, check: boolean},
		}},
	{name: proto.CommandInspectOOB, timeout: 5 * time.Minute},
	{name: proto.CommandMediaInsert, timeout: 30 * time.Minute,
		inputs: []input{
			{name: "url", check: httpsURL},
			{name: "fromStep", check: (*walker).fromStep},
			{name: "image", check: imageRef},
		},
		exactlyOne: []string{"url", "fromStep", "image"}},
	{name: proto.CommandMediaEject, timeout: 5 * time.Minute},
	{name: proto.CommandPrepareRamdisk, timeout: 2 * time.Minute},
	{name: proto.CommandBootCleanUp, timeout: 2 * time.Minute},
	{name: proto.StepEnsureRamdisk, timeout: 20 * time.Minute},
	{name: proto.CommandInventoryRefresh, timeout: 10 * time.Minute},
	{name: proto.CommandDiagDCGM, timeout: time.Hour,
		inputs: []input{{name: "level", def: 1, check: wholeIn(1, 4)}}},
	{name: proto.CommandDiskWipe, timeout: 6 * time.Hour,
		inputs: []input{{name: "mode", def: proto.WipeQuick, check: oneOf(proto.WipeModes...)}}},
	{name: proto.StepAttestBoot, timeout: 5 * time.Minute},
	{name: proto.StepDeploy, timeout: time.Hour,
		inputs: []input{{name: "image", check: imageRef}}},
	{name: proto.CommandBootKexec, timeout: 15 * time.Minute,
		awaits: func(*jsondoc.Value) bool { return true }},
	{name: proto.StepRenderUserData, timeout: 2 * time.Minute},
	{name: proto.StepWaitAgentJoined, timeout: 15 * time.Minute,
		inputs: []input{{name: "role", required: true, check: oneOf(proto.RoleNode, proto.RoleRamdisk, proto.RoleSite)}}},
	{name: proto.StepWaitGenerationObserved, timeout: 10 * time.Minute},
	{name: proto.StepRevokeIdentity, timeout: 5 * time.Minute},
})

// Names the rules across steps refer to.
const (
	stepDeploy         = proto.StepDeploy
	stepRender         = proto.StepRenderUserData
	stepEnsureRamdisk  = proto.StepEnsureRamdisk
	stepAgentJoined    = proto.StepWaitAgentJoined
	stepKexec          = proto.CommandBootKexec
	stepRevokeIdentity = proto.StepRevokeIdentity
	inputImage         = "image"
	awaitRejoin        = "rejoin"
	onFailureFail      = "fail"
	onFailureContinue  = "continue"
)

// placed fills in each step's places from proto.Steps. A step proto does not define is a
// fault of the build, and stops the registry at once.
func placed(specs []stepSpec) []stepSpec {
	for i := range specs {
		kind, ok := proto.LookupStep(specs[i].name)
		if !ok {
			panic("profile catalog: proto defines no step " + specs[i].name)
		}
		specs[i].runs = texts(kind.Runs)
	}
	return specs
}

func lookupStep(name string) (*stepSpec, bool) {
	i := slices.IndexFunc(catalog, func(s stepSpec) bool { return s.name == name })
	if i < 0 {
		return nil, false
	}
	return &catalog[i], true
}

func stepNames() []string {
	names := make([]string, len(catalog))
	for i, s := range catalog {
		names[i] = s.name
	}
	return names
}

// oneOf checks that a value is one of the values of one of proto's enums.
func oneOf[T ~string](values ...T) func(*walker, *jsondoc.Value, jsondoc.Path) {
	return func(w *walker, v *jsondoc.Value, p jsondoc.Path) { w.r.Enum(v, p, texts(values)...) }
}

// texts is an enum's values as text.
func texts[T ~string](values []T) []string {
	out := make([]string, len(values))
	for i, v := range values {
		out[i] = string(v)
	}
	return out
}

func wholeIn(min, max int64) func(*walker, *jsondoc.Value, jsondoc.Path) {
	return func(w *walker, v *jsondoc.Value, p jsondoc.Path) { w.r.Whole(v, p, min, max) }
}

func boolean(w *walker, v *jsondoc.Value, p jsondoc.Path) { w.r.Bool(v, p) }

func httpsURL(w *walker, v *jsondoc.Value, p jsondoc.Path) {
	if s, ok := w.r.String(v, p); ok {
		if err := CheckHTTPSURL(s); err != nil {
			w.r.Add(v, p, "%v", err)
		}
	}
}

func imageRef(w *walker, v *jsondoc.Value, p jsondoc.Path) {
	if s, ok := w.r.String(v, p); ok {
		if err := checkImageRef(s); err != nil {
			w.r.Add(v, p, "%v", err)
		}
	}
}

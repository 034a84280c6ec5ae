package registry

import (
	"context"
	"crypto/x509"
	"encoding/json"
	"log/slog"
	"strings"
	"testing"

	"github.com/better-compute/better-compute/proto"
	"github.com/better-compute/better-compute/registry/store"
)

// TestARamdiskOfAnEndedDeployIsRefused, as a host that held a ramdisk's key would try
// it: a deploy boots the node's ramdisk (boot.prepareRamdisk, whose boot script carries
// the ramdisk join token over plain HTTP), the ramdisk joins with that token through the
// JoinService and holds its session over real QUIC, and the deploy, whose last step
// waits for it, succeeds. The certificate names that deploy's run. Then its key connects
// again, as the host that read the token and joined first would once the machine booted
// its installed OS: its hello is refused for good (CloseRevoked, the reason saying the
// run no longer runs) and the registry holds no session of it. Before, that certificate
// was taken until the node's identity epoch moved (its year of validity, or the next
// release): the host said hello, reported and answered as the node's ramdisk.
func TestARamdiskOfAnEndedDeployIsRefused(t *testing.T) {
	f, held, node, started := deployPrepareHeld(t, `{"id": "prep", "version": 1, "target": "metal", "steps": [{"use": "boot.prepareRamdisk"}, `+
		`{"use": "wait.agentJoined", "with": {"role": "ramdisk"}, "timeout": "5m"}]}`)
	boot := preparedBoot(t, held)
	held.free()
	creds, err := f.join(node.ID, "ramdisk", boot.Token)
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := x509.ParseCertificate(creds.Certificate.Certificate[0])
	if err != nil || proto.AgentRun(leaf) != started.WorkflowID {
		t.Fatalf("the ramdisk's certificate names run %q (%v), want the deploy's %s", proto.AgentRun(leaf), err, started.WorkflowID)
	}
	ramdisk := f.newAgent(node.ID, creds)
	end := ramdisk.session(context.Background(), ramdisk.start())
	if wf := f.ended(f.tenants["acme"], started.WorkflowID); wf.State != store.RunSucceeded {
		t.Fatalf("the deploy its ramdisk joined: %s, failure %+v", wf.State, wf.Failure)
	}
	end()

	closes := &refusals{from: slog.LevelError}
	again := f.newAgent(node.ID, creds)
	again.log = slog.New(closes)
	s := again.start()
	defer again.session(context.Background(), s)()
	// A request it makes fails with the refusal's reason, not as a session that merely
	// ended (which bcd would ask again over).
	if _, err := s.Secret(t.Context(), "secret://k8s/join"); proto.CodeOf(err) != proto.Forbidden || !strings.Contains(err.Error(), "which no longer runs") {
		t.Errorf("the ended deploy's ramdisk asking for a secret: %v; want FORBIDDEN saying its run no longer runs", err)
	}
	if !f.wait("the hello of the ended deploy's ramdisk refused", func() bool { return closes.count("which no longer runs") > 0 }) {
		t.Fatalf("the ramdisk's key was not refused once its deploy ended; it logged %q", closes.reasons)
	}
	if closes.count("refuses this agent's certificate for good") == 0 {
		t.Errorf("the refusal was not for good (CloseRevoked): %q", closes.reasons)
	}
	if f.r.plane.ep.Connected(node.ID, proto.RoleRamdisk) {
		t.Error("the registry holds a session of the ended deploy's ramdisk")
	}
}

// TestARamdiskSessionEndsWithItsRun, as the host holding a ramdisk's key would see it:
// the ramdisk of a deploy joins with the token boot.prepareRamdisk minted and opens its
// session over real QUIC, then says nothing more, while the deploy, whose last step
// waits for it, succeeds. The commit that ends the deploy ends the session: the registry
// closes it for good (CloseRevoked, the reason saying the run no longer runs) and holds
// no session of the ramdisk. Before, the store told the endpoint only of a node whose
// identity epoch moved or whose identity was revoked, and the session stayed registered
// after its run ended until the ramdisk next said something.
func TestARamdiskSessionEndsWithItsRun(t *testing.T) {
	f, held, node, started := deployPrepareHeld(t, `{"id": "prep", "version": 1, "target": "metal", "steps": [{"use": "boot.prepareRamdisk"}, `+
		`{"use": "wait.agentJoined", "with": {"role": "ramdisk"}, "timeout": "5m"}]}`)
	creds, err := f.join(node.ID, "ramdisk", preparedBoot(t, held).Token)
	if err != nil {
		t.Fatal(err)
	}
	closes := &refusals{from: slog.LevelError}
	ramdisk := f.newAgent(node.ID, creds)
	ramdisk.log = slog.New(closes)
	defer ramdisk.session(context.Background(), ramdisk.start())()
	if !f.wait("the ramdisk's session", func() bool { return f.r.plane.ep.Connected(node.ID, proto.RoleRamdisk) }) {
		t.FailNow()
	}
	held.free()
	if wf := f.ended(f.tenants["acme"], started.WorkflowID); wf.State != store.RunSucceeded {
		t.Fatalf("the deploy its ramdisk joined: %s, failure %+v", wf.State, wf.Failure)
	}
	if !f.wait("the session of the ended deploy's ramdisk to end", func() bool { return !f.r.plane.ep.Connected(node.ID, proto.RoleRamdisk) }) {
		t.Fatalf("the registry holds the session of the ramdisk of deploy %s, which ended; the ramdisk logged %q", started.WorkflowID, closes.reasons)
	}
	if !f.wait("the ramdisk told its session ended for good, its run ended", func() bool {
		return closes.count("which no longer runs") > 0 && closes.count("refuses this agent's certificate for good") > 0
	}) {
		t.Errorf("the ramdisk logged %q", closes.reasons)
	}
}

// TestARamdiskTokenOfAnEndedRunIsRefusedAtJoin, as a host that read a ramdisk join
// token from a boot script would try it: a deploy's boot.prepareRamdisk mints the token,
// and the deploy succeeds without its ramdisk joining. Joining with the token afterwards
// is FORBIDDEN, reason run-ended, at sealedToken, and leaves the token unused: no
// certificate is minted. Before, the join succeeded and minted a certificate that its
// first hello found ended. An operator's ramdisk token (tokens create --kind ramdisk,
// minted by no run) still joins.
func TestARamdiskTokenOfAnEndedRunIsRefusedAtJoin(t *testing.T) {
	f, held, node, started := deployPrepareHeld(t, `{"id": "prep", "version": 1, "target": "metal", "steps": [{"use": "boot.prepareRamdisk"}]}`)
	boot := preparedBoot(t, held)
	held.free()
	if wf := f.ended(f.tenants["acme"], started.WorkflowID); wf.State != store.RunSucceeded {
		t.Fatalf("the deploy: %s, failure %+v", wf.State, wf.Failure)
	}
	_, err := f.join(node.ID, "ramdisk", boot.Token)
	if e := proto.AsError(err); e.Code != proto.Forbidden || e.Details.Reason != proto.ReasonRunEnded || e.Details.Path != "sealedToken" {
		t.Errorf("a join with the ended deploy's ramdisk token: %v (%+v); want FORBIDDEN %s at sealedToken", err, e.Details, proto.ReasonRunEnded)
	}
	f.r.st.View(func(tx *store.Tx) error {
		tok, err := tx.JoinTokenOf(boot.Token)
		if err != nil || tok.Workflow != started.WorkflowID || !tok.UsedAt.IsZero() {
			t.Errorf("the deploy's ramdisk token after the refused join: %+v, %v; want it the deploy's, unused", tok, err)
		}
		return nil
	})
	if _, err := f.join(node.ID, "ramdisk", f.mint("ramdisk", node.ID)); err != nil {
		t.Errorf("a join with an operator's ramdisk token: %v", err)
	}
}

// preparedBoot is the ramdisk boot the first boot.prepareRamdisk held ran prepared.
func preparedBoot(t *testing.T, held *heldCommand) proto.PrepareRamdisk {
	t.Helper()
	var cmd proto.SiteCommand
	var boot proto.PrepareRamdisk
	if err := json.Unmarshal(held.ran()[0], &cmd); err != nil || json.Unmarshal(cmd.Input, &boot) != nil || boot.Token == "" {
		t.Fatalf("boot.prepareRamdisk's command %s carries no join token: %v", held.ran()[0], err)
	}
	return boot
}

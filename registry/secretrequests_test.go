package registry

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/better-compute/better-compute/agent/session"
	"github.com/better-compute/better-compute/proto"
	"github.com/better-compute/better-compute/registry/store"
	"github.com/better-compute/better-compute/registry/store/storetest"
	"github.com/better-compute/better-compute/testkit"
)

// TestAnAgentsRefusedSecretRequestsCannotFillTheLog: acme's installed machine, whose
// NodeSpec names one secret, asks with its own `bcd node` key, over real QUIC through the
// real session code, for a ref of 512 KiB of control characters (DEL) and then for 200
// secrets its NodeSpec does not name, as fast as the answers come. The malformed ref is
// INVALID_INPUT at ref, the others FORBIDDEN as before, and the registry's log holds a
// line a minute of the agent's refusals (its first, the probe of firstInstallation), and
// the request it served. Before, each refusal was a warning carrying the ref whole: 201
// more lines, 573 KiB in all (2 MiB of a ref of \x01, quoted in four bytes each), a log
// any tenant's machine could fill for every tenant as fast as its link went.
//
// DEL, as JSON carries it as itself, makes the request a frame of 512 KiB; \x01, which
// JSON escapes in six bytes, made it 3 MiB, whose encoding, sending and decoding under
// -race on a loaded machine outlasted the call's wait (session.CallTimeout), or, as the
// agent's pings wait behind the frame, the fleet's 800 ms of silence that end a session:
// the machine pings at bcd's own period.
func TestAnAgentsRefusedSecretRequestsCannotFillTheLog(t *testing.T) {
	var logged testkit.SyncBuffer
	f := serveBusy(t, Config{Log: slog.New(slog.NewTextHandler(&logged, nil))})
	f.keepAlive = session.DefaultKeepAlive
	f.populate()
	n := storetest.Node(t, f.r.st, store.Node{Tenant: "acme", Pool: "gpu", MACs: []string{"52:54:00:00:0b:01"}})
	const ref = "secret://k8s/join"
	f.secretNamed(n, ref)
	machine, _, stop := f.firstInstallation(n.ID, proto.RoleNode, store.TokenProvisioned)
	defer stop()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	before := len(logged.String())
	v, err := machine.s.Secret(ctx, "secret://"+strings.Repeat("\x7f", 512<<10))
	if e := proto.AsError(err); v != nil || e.Code != proto.InvalidInput || e.Details.Path != "ref" || len(e.Message) > 1<<10 {
		t.Errorf("a ref of 512 KiB of control characters: %q, %.200v (%d bytes); want INVALID_INPUT at ref, short", v, err, len(proto.AsError(err).Message))
	}
	for i := range 200 {
		if v, err := machine.s.Secret(ctx, fmt.Sprintf("secret://k8s/other-%d", i)); proto.CodeOf(err) != proto.Forbidden || v != nil {
			t.Fatalf("a secret its NodeSpec does not name: %q, %v; want FORBIDDEN", v, err)
		}
	}
	if v, err := machine.s.Secret(ctx, ref); err != nil || string(v) != "join-token" {
		t.Fatalf("the secret its NodeSpec names: %q, %v", v, err)
	}

	// The session's first refusal (firstInstallation's probe, a minute ago at most) was
	// logged; the 201 since stand for a line the next minute.
	all := logged.String()
	log := all[before:]
	if refused := strings.Count(all, `msg="agent secret request refused"`); refused != 1 || len(log) > 16<<10 {
		t.Errorf("201 refused secret requests: %d refusals logged, %d bytes in all since; want the session's first only, and a short log", refused, len(log))
	}
	if served := `msg="agent secret request" node=` + n.ID + ` role=node ref=` + ref + ` code=OK`; !strings.Contains(log, served) {
		t.Errorf("the request served is not logged as %s", served)
	}
}

package metal

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/better-compute/better-compute/proto"
	"github.com/better-compute/better-compute/registry/store"
)

// TestConfirmMAC: a machine enrolled by its product UUID alone is inspected. Its
// metal.ensureRamdisk power-cycles it into PXE with no entry and waits; PXE discovery
// proposes a MAC; another tenant confirming it is NOT_FOUND, a MAC other than the
// proposed one INVALID_INPUT, and neither changes the node; the owner's confirmation
// binds it, the ramdisk boots on it, and inventory.refresh sends it to be checked.
func TestConfirmMAC(t *testing.T) {
	h := newHarness(t)
	const uuid = "4c4c4544-0042-3510-8052-b4c04f5958b1"
	var n store.Node
	var run store.Run
	err := h.store.Update(func(tx *store.Tx) (err error) {
		if _, err := tx.CreateTenant("beta"); err != nil {
			return err
		}
		n, run, err = h.svc.Enroll(tx, Enrollment{Tenant: "acme", Pool: "gpu", ProductUUID: uuid,
			BMC: store.BMC{Driver: "redfish", Address: "https://10.0.0.5"}})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	h.svc.Start(run)
	h.end(run.ID)
	confirm := func(tenant, mac string) (store.Node, error) {
		var out store.Node
		err := h.store.Update(func(tx *store.Tx) (err error) { out, err = h.svc.ConfirmMAC(tx, tenant, n.ID, mac, false); return err })
		return out, err
	}
	if _, err := confirm("acme", "52:54:00:00:00:07"); proto.AsError(err).Details.Reason != "no-proposal" {
		t.Errorf("confirming before any proposal: %v", err)
	}
	h.machine.forget()
	run, _, err = h.act(n.ID, Inspect, Options{})
	if err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(10 * time.Second); h.node(n.ID).PoweredAt.IsZero(); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("metal.ensureRamdisk never power-cycled the machine into PXE")
		}
	}
	if err := h.store.Update(func(tx *store.Tx) error {
		_, err := tx.ProposeMAC(n.ID, store.MACProposal{MAC: "52:54:00:00:00:07", Site: "rack-a", SeenAt: tx.Now()})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	before := h.node(n.ID)
	for _, tc := range []struct {
		tenant, mac string
		code        proto.Code
		path        string
	}{
		{"beta", "52:54:00:00:00:07", proto.NotFound, "nodeId"},
		{"acme", "52:54:00:00:00:08", proto.InvalidInput, "mac"},
		{"acme", "not-a-mac", proto.InvalidInput, "mac"},
	} {
		_, err := confirm(tc.tenant, tc.mac)
		if e := proto.AsError(err); err == nil || e.Code != tc.code || e.Details.Path != tc.path {
			t.Errorf("%s confirming %s: %v, want %s at %s", tc.tenant, tc.mac, err, tc.code, tc.path)
		}
	}
	if after := h.node(n.ID); after.Rev != before.Rev {
		t.Fatalf("refused confirmations changed the node: %+v", after)
	}
	got, err := confirm("acme", "52:54:00:00:00:07")
	if err != nil {
		t.Fatal(err)
	}
	if got.BoundMAC != "52:54:00:00:00:07" || len(got.MACs) != 1 || got.MACProposal != nil {
		t.Errorf("confirmed node: macs %v, bound %q, proposal %+v", got.MACs, got.BoundMAC, got.MACProposal)
	}
	run, got = h.end(run.ID)
	if run.State != store.RunSucceeded || got.State != store.NodeReady {
		t.Fatalf("inspect %s, node %s %+v", run.State, got.State, got.Failure)
	}
	var kinds []string
	for _, r := range h.machine.got {
		kinds = append(kinds, strings.TrimPrefix(r.ID, run.ID+":")+" "+r.Kind+" "+r.Input)
	}
	want := []string{
		`main.0:a1:discover-pxe management.setBootDevice {"device":"pxe","persistent":false}`,
		`main.0:a1:discover-cycle power.setPower {"action":"cycle"}`,
		`main.0:a1:pxe management.setBootDevice {"device":"pxe","persistent":false}`,
	}
	if len(kinds) < 6 || strings.Join(kinds[:3], "\n") != strings.Join(want, "\n") ||
		!strings.Contains(kinds[3], `"macs":["52:54:00:00:00:07"]`) ||
		kinds[5] != `main.1:a1 inventory.refresh {"productUuid":"`+uuid+`","mac":"52:54:00:00:00:07"}` {
		t.Errorf("commands:\n%s", strings.Join(kinds, "\n"))
	}
	// The bound MAC is a hardware key now: no other machine enrolls it.
	err = h.store.Update(func(tx *store.Tx) error {
		_, _, err := h.svc.Enroll(tx, Enrollment{Tenant: "acme", Pool: "gpu", MACs: []string{"52:54:00:00:00:07"},
			BMC: store.BMC{Driver: "redfish", Address: "https://10.0.0.6"}})
		return err
	})
	if proto.CodeOf(err) != proto.Conflict {
		t.Errorf("enrolling the bound MAC again: %v", err)
	}
}

// TestConfirmMACAgainstTheBMC: enrollment's inspect.oob records the NICs the BMC lists;
// a proposed MAC that is none of them (another machine on the provisioning network
// sending this one's product UUID) is refused, and bound only with force.
func TestConfirmMACAgainstTheBMC(t *testing.T) {
	h := newHarness(t)
	h.machine.answers["inspect.oob"] = func(json.RawMessage) (json.RawMessage, error) {
		return json.RawMessage(`{"system":{"uuid":"4C4C4544-0042-3510-8052-B4C04F5958B1"},"nics":[{"mac":"52:54:00:00:00:0A"},{"mac":"52:54:00:00:00:09"},{"mac":"junk"}]}`), nil
	}
	_, n := h.end(enrollByUUID(t, h).ID)
	if strings.Join(n.BMCMACs, " ") != "52:54:00:00:00:09 52:54:00:00:00:0a" {
		t.Fatalf("the BMC's NICs on the node: %v", n.BMCMACs)
	}
	confirm := func(mac string, force bool) (store.Node, error) {
		var out store.Node
		err := h.store.Update(func(tx *store.Tx) (err error) { out, err = h.svc.ConfirmMAC(tx, "acme", n.ID, mac, force); return err })
		return out, err
	}
	propose := func(mac string) {
		t.Helper()
		if err := h.store.Update(func(tx *store.Tx) error {
			_, err := tx.ProposeMAC(n.ID, store.MACProposal{MAC: mac, Site: "rack-a", SeenAt: tx.Now()})
			return err
		}); err != nil {
			t.Fatal(err)
		}
	}
	propose("52:54:00:00:00:66")
	_, err := confirm("52:54:00:00:00:66", false)
	if e := proto.AsError(err); err == nil || e.Code != proto.InvalidInput || e.Details.Path != "mac" || e.Details.Reason != "not-listed-by-bmc" {
		t.Fatalf("confirming a MAC the BMC does not list: %v", err)
	}
	if got := h.node(n.ID); len(got.MACs) != 0 || got.MACProposal == nil {
		t.Fatalf("the refusal changed the node: %+v", got)
	}
	got, err := confirm("52:54:00:00:00:66", true)
	if err != nil || got.BoundMAC != "52:54:00:00:00:66" {
		t.Fatalf("with force: %v, bound %q", err, got.BoundMAC)
	}
}

// TestABMCListingThousandsOfNICsRecordsNone: enrollment's inspect.oob is answered with
// 4,000 NICs (about as many as an answer of proto.MaxStepResult holds): the step fails,
// INVALID_INPUT at result.nics, reason too-large, and the node records none of them.
// Before, all 4,000 MACs were recorded on the node, whose record every read of the node
// carries. A BMC listing maxBMCMACs is recorded whole.
func TestABMCListingThousandsOfNICsRecordsNone(t *testing.T) {
	for _, tc := range []struct {
		nics     int
		recorded bool
	}{{4000, false}, {maxBMCMACs, true}} {
		t.Run(fmt.Sprint(tc.nics), func(t *testing.T) {
			h := newHarness(t)
			var nics []string
			for i := range tc.nics {
				nics = append(nics, fmt.Sprintf(`{"mac":"52:54:01:00:%02x:%02x"}`, i>>8, i&0xff))
			}
			answer := `{"system":{"uuid":"4C4C4544-0042-3510-8052-B4C04F5958B1"},"nics":[` + strings.Join(nics, ",") + `]}`
			if len(answer) > proto.MaxStepResult {
				t.Fatalf("the answer takes %d bytes, more than an agent's answer may", len(answer))
			}
			h.machine.answers["inspect.oob"] = func(json.RawMessage) (json.RawMessage, error) { return json.RawMessage(answer), nil }
			run, n := h.end(enrollByUUID(t, h).ID)
			if tc.recorded {
				if run.State != store.RunSucceeded || len(n.BMCMACs) != tc.nics {
					t.Errorf("a BMC listing %d NICs: run %s, %d MACs recorded", tc.nics, run.State, len(n.BMCMACs))
				}
				return
			}
			if len(n.BMCMACs) > 0 {
				t.Errorf("a BMC listing %d NICs left %d MACs on the node", tc.nics, len(n.BMCMACs))
			}
			if f := run.Failure; run.State != store.RunFailed || f == nil || f.Use != proto.CommandInspectOOB || f.Error == nil ||
				f.Error.Code != proto.InvalidInput || f.Error.Details.Path != "result.nics" || f.Error.Details.Reason != proto.ReasonTooLarge {
				t.Errorf("a BMC listing %d NICs: run %s, failure %+v; want failed at inspect.oob, INVALID_INPUT at result.nics, reason too-large", tc.nics, run.State, f)
			}
		})
	}
}

// enrollByUUID enrolls acme's machine known only by its product UUID, behind a Redfish
// BMC, and starts its enrollment.
func enrollByUUID(t *testing.T, h *harness) store.Run {
	t.Helper()
	var run store.Run
	err := h.store.Update(func(tx *store.Tx) (err error) {
		_, run, err = h.svc.Enroll(tx, Enrollment{Tenant: "acme", Pool: "gpu", ProductUUID: "4c4c4544-0042-3510-8052-b4c04f5958b1",
			BMC: store.BMC{Driver: "redfish", Address: "https://10.0.0.5"}})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	h.svc.Start(run)
	return run
}

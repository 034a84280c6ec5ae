package agentplane

import (
	"context"
	"encoding/json"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/better-compute/better-compute/agent/session"
	"github.com/better-compute/better-compute/proto"
	"github.com/better-compute/better-compute/registry/attest"
)

// TestSignedWipeResults runs disk.wipe through the real agent plane with a ramdisk agent
// that answers as an attacker would: the registry stores attested true only for the honest
// answer, and refuses a tampered result, one signed by another node's key, a result
// replayed from another workflow step, and a bare claim of attested.
func TestSignedWipeResults(t *testing.T) {
	e, other := signingEnv(t)
	wiped := proto.DiskWipeResult{Mode: proto.WipeQuick, Disks: []proto.WipedDisk{{Name: "vda", SizeBytes: 64 << 20, Method: proto.WipeMethodSignatures,
		Wiped: true, Bytes: 2 << 20, ReadBack: &proto.ReadBack{Expect: proto.ExpectZeroes, Passed: true}}}}
	var replayMu sync.Mutex
	var earlier json.RawMessage // an honest answer to an earlier step
	ramdisk, err := e.ca.AgentCertificate("node-1", string(proto.RoleRamdisk))
	if err != nil {
		t.Fatal(err)
	}
	e.startAgent("node-1", func(c *session.Config) {
		c.Certificate = ramdisk
		c.Handlers = map[string]session.Handler{proto.CommandDiskWipe: func(ctx context.Context, p json.RawMessage) (json.RawMessage, error) {
			var in struct{ Mode, Attack string }
			json.Unmarshal(p, &in)
			switch in.Attack {
			case "claim":
				return json.RawMessage(`{"attested":true,"mode":"quick","disks":[{"name":"vda","wiped":true}]}`), nil
			case "replay":
				replayMu.Lock()
				defer replayMu.Unlock()
				return earlier, nil
			case "other-key":
				return signedBy(other, commandOf(p), proto.CommandDiskWipe, wiped)
			}
			out, err := session.SignResult(ctx, proto.CommandDiskWipe, wiped)
			if in.Attack == "tamper" {
				var sr proto.SignedResult
				json.Unmarshal(out, &sr)
				sr.Payload = []byte(strings.Replace(string(sr.Payload), `"wiped":true`, `"wiped":true `, 1))
				out, _ = json.Marshal(sr)
			}
			if in.Attack == "" {
				replayMu.Lock()
				earlier = out
				replayMu.Unlock()
			}
			return out, err
		}}
	})
	waitFor(t, "session", func() bool { return e.ep.Sessions() == 1 })

	relay := func(id, attack string) attest.Wipe {
		t.Helper()
		ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
		defer cancel()
		payload, _ := json.Marshal(map[string]string{"mode": "quick", "attack": attack, "id": id})
		out, err := e.ep.Relay(ctx, "node-1", proto.RoleRamdisk, proto.Command{ID: id, Kind: proto.CommandDiskWipe, Payload: payload})
		if err != nil {
			t.Fatalf("%s: %v", attack, err)
		}
		var w attest.Wipe
		if err := json.Unmarshal(out, &w); err != nil {
			t.Fatal(err)
		}
		return w
	}
	if w := relay("wf_1:main.1:a1", ""); !w.Attested || len(w.Disks) != 1 || w.Attestation == nil || len(w.Attestation.Certificate) == 0 {
		t.Fatalf("the honest wipe: %+v", w)
	}
	for attack, reason := range map[string]string{"tamper": "does not verify", "other-key": "node-2", "replay": "another step", "claim": "not signed"} {
		if w := relay("wf_2:main.1:a1-"+attack, attack); w.Attested || len(w.Disks) != 0 || !strings.Contains(w.Reason, reason) {
			t.Errorf("%s: stored %+v; want attested false (%s)", attack, w, reason)
		}
	}
}

// commandOf is the id a test command carries in its payload.
func commandOf(p json.RawMessage) string {
	var in struct{ ID string }
	json.Unmarshal(p, &in)
	return in.ID
}

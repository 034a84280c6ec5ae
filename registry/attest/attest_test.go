package attest_test

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/better-compute/better-compute/proto"
	"github.com/better-compute/better-compute/registry/attest"
	"github.com/better-compute/better-compute/testkit"
)

// agentKey is an agent's certificate and key from ca.
type agentKey struct {
	cert *x509.Certificate
	key  crypto.Signer
}

func newAgent(t testing.TB, ca *testkit.CA, node, role string) agentKey {
	t.Helper()
	c, err := ca.AgentCertificate(node, role)
	if err != nil {
		t.Fatal(err)
	}
	return fromTLS(t, c)
}

func fromTLS(t testing.TB, c tls.Certificate) agentKey {
	t.Helper()
	leaf, err := x509.ParseCertificate(c.Certificate[0])
	if err != nil {
		t.Fatal(err)
	}
	return agentKey{leaf, c.PrivateKey.(crypto.Signer)}
}

var wipeCmd = proto.Command{ID: "wf_1:main.2:a1", Kind: proto.CommandDiskWipe, Payload: json.RawMessage(`{"mode":"secure-erase"}`)}

func wipedDisk(name, method string) proto.WipedDisk {
	return proto.WipedDisk{Name: name, SizeBytes: 64 << 20, Method: method, Wiped: true, Bytes: 64 << 20,
		ReadBack: &proto.ReadBack{Expect: proto.ExpectZeroes, Blocks: 16, BlockSize: 4096, Passed: true}}
}

var goodWipe = proto.DiskWipeResult{Mode: proto.WipeSecureErase, Disks: []proto.WipedDisk{
	wipedDisk("nvme0n1", proto.WipeMethodNVMeFormatUserData), wipedDisk("sda", proto.WipeMethodATASecurityErase)}}

// sign is what the agent answers: result signed by a's key for node and command id.
func sign(t testing.TB, a agentKey, node, commandID string, result any) json.RawMessage {
	t.Helper()
	body, err := json.Marshal(result)
	if err != nil {
		t.Fatal(err)
	}
	sr, err := proto.SignResult(a.key, proto.ResultPayload{NodeID: node, CommandID: commandID, Kind: proto.CommandDiskWipe, Result: body})
	if err != nil {
		t.Fatal(err)
	}
	sr.Certificate = a.cert.Raw
	raw, err := json.Marshal(sr)
	if err != nil {
		t.Fatal(err)
	}
	return raw
}

// received is what the registry stores for raw, the answer of node-1's ramdisk whose
// session presented peer.
func received(t *testing.T, v attest.Verifier, peer *x509.Certificate, cmd proto.Command, raw json.RawMessage) attest.Wipe {
	t.Helper()
	res := v.Received("node-1", proto.RoleRamdisk, peer, cmd, time.Time{}, proto.Result{ID: cmd.ID, Result: raw})
	if res.Error != nil {
		t.Fatalf("stored an error: %v", res.Error)
	}
	var w attest.Wipe
	if err := json.Unmarshal(res.Result, &w); err != nil {
		t.Fatal(err)
	}
	return w
}

func TestWipeAttested(t *testing.T) {
	ca, _ := testkit.NewCA()
	v := attest.Verifier{AgentCAs: ca.Pool()}
	a := newAgent(t, ca, "node-1", "ramdisk")
	w := received(t, v, a.cert, wipeCmd, sign(t, a, "node-1", wipeCmd.ID, goodWipe))
	if !w.Attested || w.Reason != "" || len(w.Disks) != 2 {
		t.Fatalf("a good wipe: %+v", w)
	}
	// What is stored verifies offline: the certificate is kept beside the signature.
	cert, err := x509.ParseCertificate(w.Attestation.Certificate)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := attest.VerifyResult(cert.PublicKey, *w.Attestation, proto.ResultWant{NodeID: "node-1", CommandID: wipeCmd.ID, Kind: proto.CommandDiskWipe}); err != nil {
		t.Fatal(err)
	}

	// A certificate the agent CA issued to the same node and role since the session
	// started (a renewal) verifies too.
	renewed := newAgent(t, ca, "node-1", "ramdisk")
	if w := received(t, v, a.cert, wipeCmd, sign(t, renewed, "node-1", wipeCmd.ID, goodWipe)); !w.Attested {
		t.Fatalf("signed by a renewed certificate: %+v", w)
	}
}

// TestWipeRefusals are the attacks on an attested wipe: each one is stored with
// attested false, the reason, and none of the claimed disks.
func TestWipeRefusals(t *testing.T) {
	ca, _ := testkit.NewCA()
	other, _ := testkit.NewCA()
	v := attest.Verifier{AgentCAs: ca.Pool()}
	a := newAgent(t, ca, "node-1", "ramdisk")
	node2 := newAgent(t, ca, "node-2", "ramdisk")
	site := newAgent(t, ca, "node-1", "site")
	stranger := newAgent(t, other, "node-1", "ramdisk")

	good := sign(t, a, "node-1", wipeCmd.ID, goodWipe)
	var sr proto.SignedResult
	json.Unmarshal(good, &sr)
	sr.Payload = []byte(strings.Replace(string(sr.Payload), `"nodeId"`, ` "nodeId"`, 1))
	tampered, _ := json.Marshal(sr)

	node2Key := sign(t, node2, "node-1", wipeCmd.ID, goodWipe)
	json.Unmarshal(node2Key, &sr)
	sr.Certificate = a.cert.Raw // node-2's key, claiming node-1's certificate
	node2KeyOwnCert := node2Key
	node2KeyClaimed, _ := json.Marshal(sr)

	_, edKey, _ := ed25519.GenerateKey(rand.Reader)
	selfSigned := sign(t, agentKey{a.cert, edKey}, "node-1", wipeCmd.ID, goodWipe)

	cases := []struct {
		name, want string
		raw        json.RawMessage
	}{
		{"tampered payload", "does not verify", tampered},
		{"signed by another node's key (its own certificate)", "node-2", node2KeyOwnCert},
		{"signed by another node's key (claiming this node's certificate)", "does not verify", node2KeyClaimed},
		{"signed by a key this certificate does not certify", "algorithm", selfSigned},
		{"replayed from another workflow step", "another step", sign(t, a, "node-1", "wf_1:main.0:a1", goodWipe)},
		{"replayed from another attempt", "another step", sign(t, a, "node-1", "wf_1:main.2:a2", goodWipe)},
		{"signed for another node", "node-2", sign(t, node2, "node-2", wipeCmd.ID, goodWipe)},
		{"a site agent's certificate", "site", sign(t, site, "node-1", wipeCmd.ID, goodWipe)},
		{"a certificate of another CA", "not the agent CA's", sign(t, stranger, "node-1", wipeCmd.ID, goodWipe)},
		{"unsigned, claiming attested", "not signed", json.RawMessage(`{"attested":true,"mode":"secure-erase","disks":[]}`)},
	}
	for _, c := range cases {
		w := received(t, v, a.cert, wipeCmd, c.raw)
		if w.Attested || len(w.Disks) != 0 || !strings.Contains(w.Reason, c.want) {
			t.Errorf("%s: stored %+v; want attested false for %q", c.name, w, c.want)
		}
	}
}

// TestWipeSignedOnlyByTheRamdisk: the installed OS's root user reads its own node-role
// key, and signs a wipe of its own disk with the certificate of the machine's current
// installation, presented as the session's or carried in the result. Neither is
// attested: a wipe counts only when the machine's ramdisk signs it. Before the verifier
// read the certificate's role, both were stored as attested.
func TestWipeSignedOnlyByTheRamdisk(t *testing.T) {
	ca, _ := testkit.NewCA()
	var asked []proto.Role
	v := attest.Verifier{AgentCAs: ca.Pool(), Current: func(c proto.AgentCredential) error {
		asked = append(asked, c.Role)
		return nil // the certificate is of the current installation
	}}
	installed := newAgent(t, ca, "node-1", "node")
	ramdisk := newAgent(t, ca, "node-1", "ramdisk")
	signedByOS := sign(t, installed, "node-1", wipeCmd.ID, goodWipe)
	for _, c := range []struct {
		name string
		role proto.Role
		peer *x509.Certificate
	}{
		{"on the node agent's session", proto.RoleNode, installed.cert},
		{"on the node agent's session, certificate carried", proto.RoleNode, ramdisk.cert},
	} {
		_, _, err := v.Verify("node-1", c.role, c.peer, wipeCmd, time.Time{}, signedByOS)
		if e, ok := err.(*proto.Error); !ok || e.Code != proto.Forbidden || e.Details.Reason != proto.ReasonRole || !strings.Contains(e.Message, "ramdisk") {
			t.Errorf("%s: Verify %v; want FORBIDDEN (%s) naming the ramdisk", c.name, err, proto.ReasonRole)
		}
		res := v.Received("node-1", c.role, c.peer, wipeCmd, time.Time{}, proto.Result{ID: wipeCmd.ID, Result: signedByOS})
		var w attest.Wipe
		if res.Error != nil || json.Unmarshal(res.Result, &w) != nil {
			t.Fatalf("%s: stored %+v", c.name, res)
		}
		if w.Attested || len(w.Disks) != 0 || w.Mode != "" || !strings.Contains(w.Reason, "ramdisk agent signs it") {
			t.Errorf("%s: stored %+v; want attested false, no disks, the reason naming the ramdisk", c.name, w)
		}
	}
	if len(asked) != 0 {
		t.Errorf("the installation was asked of %v: a wrong role is refused before", asked)
	}
	// The ramdisk of the same installation signs the same result: attested.
	if w := received(t, v, ramdisk.cert, wipeCmd, sign(t, ramdisk, "node-1", wipeCmd.ID, goodWipe)); !w.Attested {
		t.Errorf("signed by the ramdisk: %+v", w)
	}
}

// TestWipeVerdict: a verified signature is not enough; the registry reads the disks,
// and a disk that hides capacity from its wipe is not attested however it was wiped.
func TestWipeVerdict(t *testing.T) {
	ca, _ := testkit.NewCA()
	v := attest.Verifier{AgentCAs: ca.Pool()}
	a := newAgent(t, ca, "node-1", "ramdisk")
	unwiped := wipedDisk("vda", "")
	unwiped.Wiped, unwiped.Unwiped, unwiped.ReadBack = false, "the device offers no secure erase", nil
	failed := wipedDisk("sda", proto.WipeMethodATASecurityErase)
	failed.ReadBack.Passed, failed.ReadBack.Failure = false, "block at 4096 is not zeroes"
	noReadBack := wipedDisk("sda", proto.WipeMethodATASecurityErase)
	noReadBack.ReadBack = nil
	hidden := wipedDisk("nvme0n1", proto.WipeMethodNVMeFormatUserData)
	hidden.Hidden = []proto.HiddenCapacity{{Kind: proto.HiddenNVMeNamespace, NSID: 2, Bytes: 1 << 30}}
	hpa := wipedDisk("sda", proto.WipeMethodATASecurityErase)
	hpa.Hidden = []proto.HiddenCapacity{{Kind: proto.HiddenATAHPA, Bytes: 1 << 20}}
	unchecked := wipedDisk("sda", proto.WipeMethodATASecurityErase)
	unchecked.Hidden = []proto.HiddenCapacity{{Kind: proto.HiddenUnchecked, Error: "READ NATIVE MAX ADDRESS: EIO"}}
	cases := []struct {
		name, want string
		cmd        proto.Command
		result     proto.DiskWipeResult
	}{
		{"a disk unwiped", "no secure erase", wipeCmd, proto.DiskWipeResult{Mode: proto.WipeSecureErase, Disks: []proto.WipedDisk{wipedDisk("nvme0n1", proto.WipeMethodNVMeFormatUserData), unwiped}}},
		{"a read-back failed", "read-back", wipeCmd, proto.DiskWipeResult{Mode: proto.WipeSecureErase, Disks: []proto.WipedDisk{failed}}},
		{"no read-back", "not read back", wipeCmd, proto.DiskWipeResult{Mode: proto.WipeSecureErase, Disks: []proto.WipedDisk{noReadBack}}},
		{"no disks", "no disk", wipeCmd, proto.DiskWipeResult{Mode: proto.WipeSecureErase}},
		{"a detached namespace", "nvme-namespace-detached 2 (1073741824 bytes)", wipeCmd, proto.DiskWipeResult{Mode: proto.WipeSecureErase, Disks: []proto.WipedDisk{hidden}}},
		{"a host protected area", "ata-host-protected-area (1048576 bytes)", wipeCmd, proto.DiskWipeResult{Mode: proto.WipeSecureErase, Disks: []proto.WipedDisk{hpa}}},
		{"a device not asked", "unchecked (READ NATIVE MAX ADDRESS: EIO)", wipeCmd, proto.DiskWipeResult{Mode: proto.WipeSecureErase, Disks: []proto.WipedDisk{unchecked}}},
		{"a weaker method", "no secure-erase method", wipeCmd, proto.DiskWipeResult{Mode: proto.WipeSecureErase, Disks: []proto.WipedDisk{wipedDisk("vda", proto.WipeMethodSignatures)}}},
		{"another mode", "not \"crypto-erase\"", proto.Command{ID: wipeCmd.ID, Kind: wipeCmd.Kind, Payload: json.RawMessage(`{"mode":"crypto-erase"}`)}, goodWipe},
		{"secure erase for crypto-erase", "no crypto-erase method", proto.Command{ID: wipeCmd.ID, Kind: wipeCmd.Kind, Payload: json.RawMessage(`{"mode":"crypto-erase"}`)},
			proto.DiskWipeResult{Mode: proto.WipeCryptoErase, Disks: []proto.WipedDisk{wipedDisk("nvme0n1", proto.WipeMethodNVMeFormatUserData)}}},
		{"mode none", "wipes nothing", proto.Command{ID: wipeCmd.ID, Kind: wipeCmd.Kind, Payload: json.RawMessage(`{"mode":"none"}`)}, proto.DiskWipeResult{Mode: proto.WipeNone}},
	}
	for _, c := range cases {
		w := received(t, v, a.cert, c.cmd, sign(t, a, "node-1", c.cmd.ID, c.result))
		if w.Attested || !strings.Contains(w.Reason, c.want) || w.Attestation == nil {
			t.Errorf("%s: stored %+v; want attested false for %q", c.name, w, c.want)
		}
	}
	// NVM in no namespace holds no data a host can read (a namespace made over it begins
	// deallocated); a drive over-provisioned by a namespace smaller than it reports it at
	// every wipe, which is attested, the capacity kept in the signed result.
	overProvisioned := wipedDisk("nvme0n1", proto.WipeMethodNVMeFormatUserData)
	overProvisioned.Hidden = []proto.HiddenCapacity{{Kind: proto.HiddenNVMeUnallocated, Bytes: 384 << 30}}
	result := proto.DiskWipeResult{Mode: proto.WipeSecureErase, Disks: []proto.WipedDisk{overProvisioned}}
	if w := received(t, v, a.cert, wipeCmd, sign(t, a, "node-1", wipeCmd.ID, result)); !w.Attested || len(w.Disks) != 1 || len(w.Disks[0].Hidden) != 1 {
		t.Errorf("a drive over-provisioned by its namespace's size: stored %+v; want attested, the unallocated capacity kept", w)
	}
}

// TestOtherKindsPassThrough: results of kinds that are not node-signed, and agent
// errors, are stored as they are.
func TestOtherKindsPassThrough(t *testing.T) {
	v := attest.Verifier{}
	res := proto.Result{ID: "c1", Result: json.RawMessage(`{"sha256":"x"}`)}
	if got := v.Received("node-1", proto.RoleRamdisk, nil, proto.Command{ID: "c1", Kind: proto.CommandDeployImage}, time.Time{}, res); string(got.Result) != string(res.Result) {
		t.Fatalf("deploy.image: %s", got.Result)
	}
	res = proto.Result{ID: "c1", Error: proto.Errorf(proto.Unsupported, "no")}
	if got := v.Received("node-1", proto.RoleRamdisk, nil, wipeCmd, time.Time{}, res); got.Error == nil || got.Error.Code != proto.Unsupported {
		t.Fatalf("an agent's error: %+v", got)
	}
}

func agentKeys(t *testing.T) map[string]crypto.Signer {
	t.Helper()
	ec, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	_, ed, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return map[string]crypto.Signer{proto.SigECDSAP256: ec, proto.SigEd25519: ed}
}

var wantResult = proto.ResultWant{NodeID: "node-1", CommandID: "wf-1.s3.a1", Kind: proto.CommandDiskWipe}

func signed(t *testing.T, k crypto.Signer, w proto.ResultWant) proto.SignedResult {
	t.Helper()
	sr, err := proto.SignResult(k, proto.ResultPayload{NodeID: w.NodeID, CommandID: w.CommandID, Kind: w.Kind,
		Time: time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC), Result: json.RawMessage(`{"disks":[]}`)})
	if err != nil {
		t.Fatal(err)
	}
	return sr
}

func TestSignedResultVerifies(t *testing.T) {
	for alg, k := range agentKeys(t) {
		sr := signed(t, k, wantResult)
		if sr.Algorithm != alg {
			t.Errorf("algorithm %q, want %q", sr.Algorithm, alg)
		}
		p, err := attest.VerifyResult(k.Public(), sr, wantResult)
		if err != nil {
			t.Fatalf("%s: %v", alg, err)
		}
		if p.Version != proto.ResultPayloadVersion || p.NodeID != wantResult.NodeID || string(p.Result) != `{"disks":[]}` {
			t.Errorf("%s: payload %+v", alg, p)
		}
	}
}

// TestSignedResultRefusals are what an attacker tries: change a byte of the payload,
// sign with another node's key, present a result of another step (command id), of
// another node or kind, or claim another algorithm.
func TestSignedResultRefusals(t *testing.T) {
	keys, others := agentKeys(t), agentKeys(t)
	for alg, k := range keys {
		good := signed(t, k, wantResult)
		tampered := good
		tampered.Payload = []byte(strings.Replace(string(good.Payload), `"disks":[]`, `"disks":[ ]`, 1))
		other := signed(t, others[alg], wantResult)
		otherAlg := good
		otherAlg.Algorithm = map[string]string{proto.SigEd25519: proto.SigECDSAP256, proto.SigECDSAP256: proto.SigEd25519}[alg]
		cases := []struct {
			name   string
			sr     proto.SignedResult
			w      proto.ResultWant
			reason string
		}{
			{"tampered payload", tampered, wantResult, "signature"},
			{"other node's key", other, wantResult, "signature"},
			{"replayed from another step", good, proto.ResultWant{NodeID: wantResult.NodeID, CommandID: "wf-1.s5.a1", Kind: wantResult.Kind}, "command"},
			{"another node", good, proto.ResultWant{NodeID: "node-2", CommandID: wantResult.CommandID, Kind: wantResult.Kind}, "node"},
			{"another kind", good, proto.ResultWant{NodeID: wantResult.NodeID, CommandID: wantResult.CommandID, Kind: proto.CommandDiagDCGM}, "kind"},
			{"another algorithm", otherAlg, wantResult, "algorithm"},
			{"no signature", proto.SignedResult{Payload: good.Payload, Algorithm: alg}, wantResult, "signature"},
		}
		for _, c := range cases {
			_, err := attest.VerifyResult(k.Public(), c.sr, c.w)
			e, ok := err.(*proto.Error)
			if !ok || e.Code != proto.Forbidden || e.Details.Reason != c.reason {
				t.Errorf("%s %s: %v, want FORBIDDEN (%s)", alg, c.name, err, c.reason)
			}
		}
	}
}

// TestSignedResultPayloadChecks: a payload signed by the right key is still refused
// when it is not a version-1 result payload, read strictly (a key twice, which
// encoding/json took the last of, is refused like an unknown field).
func TestSignedResultPayloadChecks(t *testing.T) {
	k := agentKeys(t)[proto.SigEd25519]
	for name, payload := range map[string]string{
		"version 2":      `{"version":2,"nodeId":"node-1","commandId":"wf-1.s3.a1","kind":"disk.wipe","time":"2026-12-01T10:00:00Z","result":{}}`,
		"unknown field":  `{"version":1,"nodeId":"node-1","commandId":"wf-1.s3.a1","kind":"disk.wipe","time":"2026-12-01T10:00:00Z","result":{},"attested":true}`,
		"no result":      `{"version":1,"nodeId":"node-1","commandId":"wf-1.s3.a1","kind":"disk.wipe","time":"2026-12-01T10:00:00Z"}`,
		"trailing bytes": `{"version":1,"nodeId":"node-1","commandId":"wf-1.s3.a1","kind":"disk.wipe","time":"2026-12-01T10:00:00Z","result":{}} {}`,
		"not JSON":       `version 1`,
		"duplicate key":  `{"version":1,"nodeId":"node-2","nodeId":"node-1","commandId":"wf-1.s3.a1","kind":"disk.wipe","time":"2026-12-01T10:00:00Z","result":{}}`,
	} {
		sig, err := k.Sign(rand.Reader, proto.SignedMessage([]byte(payload)), crypto.Hash(0))
		if err != nil {
			t.Fatal(err)
		}
		_, err = attest.VerifyResult(k.Public(), proto.SignedResult{Payload: []byte(payload), Algorithm: proto.SigEd25519, Signature: sig}, wantResult)
		if proto.CodeOf(err) != proto.Forbidden {
			t.Errorf("%s: %v, want FORBIDDEN", name, err)
		}
	}
}

func FuzzVerifyResult(f *testing.F) {
	_, k, _ := ed25519.GenerateKey(rand.Reader)
	good, _ := proto.SignResult(k, proto.ResultPayload{NodeID: wantResult.NodeID, CommandID: wantResult.CommandID, Kind: wantResult.Kind, Result: json.RawMessage(`{}`)})
	f.Add(good.Payload, good.Signature)
	f.Add([]byte(`{}`), []byte{})
	f.Fuzz(func(t *testing.T, payload, sig []byte) {
		p, err := attest.VerifyResult(k.Public(), proto.SignedResult{Payload: payload, Algorithm: proto.SigEd25519, Signature: sig}, wantResult)
		if err == nil && (p.CommandID != wantResult.CommandID || p.NodeID != wantResult.NodeID) {
			t.Fatalf("accepted %+v", p)
		}
	})
}

// signAt is sign with the payload's time at.
func signAt(t testing.TB, a agentKey, kind, commandID string, at time.Time, result any) json.RawMessage {
	t.Helper()
	body, _ := json.Marshal(result)
	sr, err := proto.SignResult(a.key, proto.ResultPayload{NodeID: "node-1", CommandID: commandID, Kind: kind, Time: at, Result: body})
	if err != nil {
		t.Fatal(err)
	}
	sr.Certificate = a.cert.Raw
	raw, _ := json.Marshal(sr)
	return raw
}

// TestResultSignedOutsideItsCommand: a node-signed result counts only when signed while
// its command ran, from when the registry relayed it to when its answer arrived, give or
// take attest.ClockSkew: a wipe signed a year before the command was relayed (its
// attestation would say the disks were wiped then) is stored unattested, and so is one
// signed a day after it arrived; a diag.dcgm signed a year before fails the step. One
// signed 2 minutes before the command by the registry's clock (an agent's clock behind)
// counts, and so does one 8 hours ahead (a hardware clock kept in UTC+8's local time). Before, the payload's time was never read, and each was attested or passed.
func TestResultSignedOutsideItsCommand(t *testing.T) {
	ca, _ := testkit.NewCA()
	a := newAgent(t, ca, "node-1", "ramdisk")
	sent := time.Date(2026, 12, 7, 9, 0, 0, 0, time.UTC)
	now := sent.Add(30 * time.Minute)
	v := attest.Verifier{AgentCAs: ca.Pool(), Now: func() time.Time { return now }}
	for _, c := range []struct {
		name     string
		at       time.Time
		attested bool
		says     string
	}{
		{"a year before the command", sent.AddDate(-1, 0, 0), false, "before the registry relayed the command"},
		{"a day after its answer arrived", now.Add(24 * time.Hour), false, "after it was received"},
		{"2 minutes before the command, by a clock behind", sent.Add(-2 * time.Minute), true, ""},
		{"8 hours ahead, by a clock kept in UTC+8", sent.Add(8 * time.Hour), true, ""},
		{"while the command ran", sent.Add(10 * time.Minute), true, ""},
	} {
		res := v.Received("node-1", proto.RoleRamdisk, a.cert, wipeCmd, sent, proto.Result{ID: wipeCmd.ID, Result: signAt(t, a, proto.CommandDiskWipe, wipeCmd.ID, c.at, goodWipe)})
		var w attest.Wipe
		if res.Error != nil || json.Unmarshal(res.Result, &w) != nil {
			t.Fatalf("%s: stored %s %v", c.name, res.Result, res.Error)
		}
		if w.Attested != c.attested || !strings.Contains(w.Reason, c.says) {
			t.Errorf("%s: attested %v (%q); want %v saying %q", c.name, w.Attested, w.Reason, c.attested, c.says)
		}
	}
	node := newAgent(t, ca, "node-1", "node")
	dcgm := proto.DCGMResult{Level: 2, GPUs: 1, Tests: []proto.DCGMTest{{Category: "Hardware", Name: "memory", Status: proto.DCGMPass,
		Results: []proto.DCGMEntityResult{{Entity: "GPU", ID: 0, Status: proto.DCGMPass}}}}}
	res := v.Received("node-1", proto.RoleNode, node.cert, dcgmCmd, sent, proto.Result{ID: dcgmCmd.ID, Result: signAt(t, node, proto.CommandDiagDCGM, dcgmCmd.ID, sent.AddDate(-1, 0, 0), dcgm)})
	if res.Error == nil || res.Error.Code != proto.DriverError || res.Error.Details.Reason != proto.ReasonSignature || !strings.Contains(res.Error.Message, "before the registry relayed the command") {
		t.Errorf("a diag.dcgm signed a year before its command: %v; want DRIVER_ERROR signature saying when", res.Error)
	}
}

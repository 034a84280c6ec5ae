package store

import (
	"bytes"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/better-compute/better-compute/proto"
)

// commandRecords are the relayed commands of a deploy of an 8-GPU host with attest.boot,
// disk.wipe and diag.dcgm, each with an answer of the size a real machine gives: the
// inventory of 8 GPUs, 4 NICs and 4 NVMe disks, a TCG event log of 40 KiB (a UEFI
// server's is 20-60 KiB; proto.MaxEventLog says under 100 KiB), DCGM's recorded output
// (hardware/dcgm/testdata), ECDSA signatures and a certificate of 600 bytes on the
// signed answers.
func commandRecords(t testing.TB) map[string]struct {
	payload, result any
	count           int // how many a deploy relays
} {
	t.Helper()
	rnd := func(n int) []byte { b := make([]byte, n); rand.Read(b); return b }
	signed := func(kind string, result any) proto.SignedResult {
		raw, err := json.Marshal(result)
		if err != nil {
			t.Fatal(err)
		}
		payload, _ := proto.Marshal(proto.ResultPayload{Version: 1, NodeID: "nd_0123456789abcdef", CommandID: "wf_0123456789abcdef:3:1", Kind: kind, Time: time.Now(), Result: raw})
		return proto.SignedResult{Payload: payload, Algorithm: proto.SigECDSAP256, Signature: rnd(72), Certificate: rnd(600)}
	}
	dcgm, err := os.ReadFile("../../hardware/dcgm/testdata/dcgm4-pass.json")
	if err != nil {
		t.Fatal(err)
	}
	var inv proto.HardwareInventory
	inv.System = proto.SystemInfo{ProductUUID: "4c4c4544-0000-1000-8000-000000000001", Vendor: "Supermicro"}
	for i := range 8 {
		inv.GPUs = append(inv.GPUs, proto.GPUInfo{PCIAddress: fmt.Sprintf("0000:%02x:00.0", 0x17+i), Vendor: "10de", Device: "2330", Name: "NVIDIA H100 80GB HBM3",
			UUID: "GPU-" + strings.Repeat("a", 36), DriverVersion: "550.54.15", MemoryMiB: 81559, NVLinks: 18})
	}
	for i := range 4 {
		inv.NICs = append(inv.NICs, proto.NICInfo{Name: fmt.Sprintf("ens%df0", i+1), MAC: "52:54:00:00:00:01", Driver: "mlx5_core", PCIAddress: "0000:9a:00.0", Link: "up", SpeedMbps: 100000})
		inv.Disks = append(inv.Disks, proto.DiskInfo{Name: fmt.Sprintf("nvme%dn1", i), SizeBytes: 3840755982336, Model: "SAMSUNG MZQL23T8HCLS-00A07", Serial: "S64HNE0R000000", Transport: "nvme"})
	}
	var wiped []proto.WipedDisk
	for range 4 {
		wiped = append(wiped, proto.WipedDisk{Name: "nvme0n1"})
	}
	pcrs := make([]proto.PCRValue, 4)
	for i := range pcrs {
		pcrs[i] = proto.PCRValue{Index: i, Digest: rnd(32)}
	}
	site := func(input any) proto.SiteCommand {
		in, _ := proto.Marshal(input)
		return proto.SiteCommand{Node: "nd_0123456789abcdef", Input: in, Drivers: map[string]proto.DriverBinding{
			"power": {Driver: "redfish", Config: json.RawMessage(`{"address":"https://10.20.0.5","credentialRef":"secret://bmc/nd_0123456789abcdef"}`)}}}
	}
	return map[string]struct {
		payload, result any
		count           int
	}{
		proto.CommandGetPower:         {site(nil), proto.GetPowerResult{State: "on"}, 1},
		proto.CommandSetPower:         {site(proto.SetPower{Action: "reset"}), proto.SetPower{Action: "reset"}, 2},
		proto.CommandSetBootDevice:    {site(proto.SetBootDevice{Device: "pxe"}), proto.SetBootDevice{Device: "pxe"}, 2},
		proto.CommandPrepareRamdisk:   {site(proto.PrepareRamdisk{MACs: []string{"52:54:00:00:00:01"}, Token: "bcj_0123456789abcdef." + strings.Repeat("A", 43), Registry: "https://registry.example:7443", Pins: []string{strings.Repeat("p", 51), strings.Repeat("p", 51), strings.Repeat("p", 51)}}), proto.PrepareRamdiskResult{Kind: "ipxe", MACs: []string{"52:54:00:00:00:01"}}, 1},
		proto.CommandBootCleanUp:      {site(nil), proto.BootCleanUpResult{Removed: true}, 1},
		proto.CommandInventoryRefresh: {proto.InventoryRefresh{ProductUUID: inv.System.ProductUUID, MAC: "52:54:00:00:00:01"}, inv, 1},
		proto.CommandTPMEnroll:        {nil, proto.TPMEnrollResult{EKPublic: rnd(294), EKCertificate: rnd(1200), AKBlob: rnd(300), AKPublic: rnd(280), AKCreateData: rnd(100), AKCreateAttestation: rnd(150), AKCreateSignature: rnd(262)}, 1},
		proto.CommandTPMActivate:      {proto.TPMActivate{AKBlob: rnd(300), Credential: rnd(140), Secret: rnd(262)}, proto.TPMActivateResult{Secret: rnd(32)}, 1},
		proto.CommandTPMQuote:         {proto.TPMQuote{AKBlob: rnd(300), Nonce: rnd(32), PCRs: proto.DefaultBootPCRs}, proto.TPMQuoteResult{Quote: rnd(150), Signature: rnd(262), PCRs: pcrs, EventLog: rnd(40 << 10)}, 2},
		proto.CommandDiskWipe:         {proto.DiskWipe{}, signed(proto.CommandDiskWipe, proto.DiskWipeResult{Mode: "discard", Disks: wiped}), 1},
		proto.CommandDiagDCGM:         {proto.DiagDCGM{Level: 3}, signed(proto.CommandDiagDCGM, json.RawMessage(dcgm)), 1},
		proto.CommandDeployImage:      {proto.DeployImage{Ref: "ubuntu-24.04@3", Source: "https://images.example/ubuntu-24.04-3.qcow2", CacheURL: "https://10.20.0.2:8443/blobs/sha256:" + strings.Repeat("a", 64)}, proto.DeployImageResult{SHA256: strings.Repeat("a", 64), BytesWritten: 4 << 30}, 1},
		proto.CommandBootKexec:        {nil, proto.BootKexecResult{}, 1},
	}
}

// TestAgentCommandRecordSizes measures what an answered command of each kind takes in the
// store (key and record, as both backends keep them) from its answer until its run
// records it, and once recorded (RecordAgentCommands), and what the commands of a day of
// deploys hold over agents.CommandTTL (docs/store.md, "A day of answers"). It fails when
// a kind's record outgrows the bound the figures assume, or when the fleet's day of
// recorded commands comes near etcd's default backend quota.
func TestAgentCommandRecordSizes(t *testing.T) {
	s, err := Open(t.TempDir(), Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var perDeploy, recordedPerDeploy int
	var table bytes.Buffer
	records := commandRecords(t)
	for _, kind := range slices.Sorted(maps.Keys(records)) {
		c := records[kind]
		id := "wf_0123456789abcdef:" + kind + ":1"
		payload, _ := proto.Marshal(c.payload)
		result, _ := proto.Marshal(c.result)
		var answered, recorded int
		err := s.Update(func(tx *Tx) error {
			if _, err := tx.EnqueueAgentCommand("nd_0123456789abcdef", proto.RoleRamdisk, proto.Command{ID: id, Kind: kind, Payload: payload, TimeoutSeconds: 1800}, nil); err != nil {
				return err
			}
			if _, err := tx.CompleteAgentCommand("nd_0123456789abcdef", proto.Result{ID: id, Result: result}); err != nil {
				return err
			}
			key := commandKey("nd_0123456789abcdef", id)
			answered = len(key) + len(tx.kv.get(bucketAgentCommands, key))
			if n, err := tx.RecordAgentCommands("nd_0123456789abcdef", id, "wf_0123456789abcdef", "steps[10]"); err != nil || n != 1 {
				return fmt.Errorf("recording %s: %d recorded, %v", id, n, err)
			}
			recorded = len(key) + len(tx.kv.get(bucketAgentCommands, key))
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(&table, "%-24s %7d bytes, recorded %4d, x %d\n", kind, answered, recorded, c.count)
		perDeploy += answered * c.count
		recordedPerDeploy += recorded * c.count
		if bound := 64 << 10; answered > bound {
			t.Errorf("%s: an answered command takes %d bytes, over the %d the figure assumes", kind, answered, bound)
		}
		if bound := 600; recorded > bound {
			t.Errorf("%s: a recorded command takes %d bytes, over the %d the figure assumes", kind, recorded, bound)
		}
	}
	const nodes = 10000
	mib := func(perDeploy int) float64 { return float64(perDeploy*nodes) / (1 << 20) }
	t.Logf("command records:\n%sa deploy: %d bytes answered, %d recorded; %d nodes deploying once in a day: %.0f MiB kept answered, %.0f MiB recorded",
		table.String(), perDeploy, recordedPerDeploy, nodes, mib(perDeploy), mib(recordedPerDeploy))
	if quota, day := 2<<30, recordedPerDeploy*nodes; day > quota/16 {
		t.Errorf("%d nodes deploying once in a day keep %.0f MiB of recorded commands, over a sixteenth of etcd's default backend quota (%d MiB)", nodes, mib(recordedPerDeploy), quota/16>>20)
	}
}

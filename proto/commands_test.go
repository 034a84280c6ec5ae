package proto

import (
	"encoding/json"
	"slices"
	"testing"
)

// The typed inputs and results keep the bytes the wire carried before they were typed.
func TestStepBodiesKeepTheirWire(t *testing.T) {
	for name, tc := range map[string]struct {
		v    any
		want string
	}{
		"one-time pxe":     {SetBootDevice{Device: BootDevicePXE}, `{"device":"pxe","persistent":false}`},
		"power cycle":      {SetPower{Action: PowerActionCycle}, `{"action":"cycle"}`},
		"power state":      {GetPowerResult{State: PowerStateOn}, `{"state":"on"}`},
		"mounted":          {MediaInsertResult{Mounted: "https://isos.example/x.iso"}, `{"mounted":"https://isos.example/x.iso"}`},
		"sanboot":          {MediaInsertResult{Sanboot: "ab"}, `{"sanboot":"ab"}`},
		"ejected":          {MediaEjectResult{Ejected: true}, `{"ejected":true}`},
		"removed":          {BootCleanUpResult{Removed: true}, `{"removed":true}`},
		"ramdisk boot set": {PrepareRamdiskResult{Kind: BootRamdisk, MACs: []string{"52:54:00:12:34:56"}}, `{"kind":"ramdisk","macs":["52:54:00:12:34:56"]}`},
		"kexec loaded":     {BootKexecResult{}, `{}`},
		"ramdisk booted":   {EnsureRamdiskResult{Booted: true}, `{"booted":true}`},
		"ramdisk ran":      {EnsureRamdiskResult{}, `{"booted":false}`},
		"ramdisk gone":     {EnsureRamdiskResult{Booted: true, Gone: "it ended"}, `{"booted":true,"gone":"it ended"}`},
		"agent joined":     {WaitAgentJoined{Role: RoleNode}, `{"role":"node"}`},
		"revoked":          {RevokeIdentityResult{JoinTokensDeleted: 2}, `{"revokedAt":"0001-01-01T00:00:00Z","joinTokensDeleted":2}`},
		"user data rendered": {UserDataRendered{UserDataRef: "secret://userdata/n1/1", Kind: "cloud-init", JoinTokenID: "tok1"},
			`{"userDataRef":"secret://userdata/n1/1","kind":"cloud-init","joinTokenId":"tok1"}`},
		"bmc inventory": {OOBInventory{System: OOBSystem{Manufacturer: "QEMU", UUID: "u"}, PowerState: PowerStateOn,
			CPUs: []OOBCPU{{Socket: "0", Model: "x", Cores: 2}}, Memory: OOBMemory{TotalBytes: 1 << 20, Modules: []OOBMemoryModule{{CapacityBytes: 1 << 20}}},
			NICs: []OOBNIC{{Name: "nic0", MAC: "52:54:00:aa:bb:cc"}}, Storage: []OOBDrive{{Name: "disk0", CapacityBytes: 1}},
			BMC: OOBController{Model: "QEMU QMP"}, Unread: []OOBUnread{{Part: "memory", Error: "e"}}},
			`{"system":{"manufacturer":"QEMU","uuid":"u"},"powerState":"on","cpus":[{"socket":"0","model":"x","cores":2}],` +
				`"memory":{"totalBytes":1048576,"modules":[{"capacityBytes":1048576}]},"nics":[{"name":"nic0","mac":"52:54:00:aa:bb:cc"}],` +
				`"storage":[{"name":"disk0","capacityBytes":1}],"bmc":{"model":"QEMU QMP"},"unread":[{"part":"memory","error":"e"}]}`},
	} {
		got, err := json.Marshal(tc.v)
		if err != nil || string(got) != tc.want {
			t.Errorf("%s: %s, %v; want %s", name, got, err, tc.want)
		}
	}
}

func TestStepsTable(t *testing.T) {
	seen := map[string]bool{}
	for _, s := range Steps {
		if seen[s.Kind] {
			t.Errorf("%s twice", s.Kind)
		}
		seen[s.Kind] = true
		if len(s.Runs) == 0 {
			t.Errorf("%s runs nowhere", s.Kind)
		}
		if s.BMCConcern != "" && (len(s.Runs) != 1 || s.Runs[0] != PlaceSite) {
			t.Errorf("%s reaches a BMC but runs on %v, not on the site alone", s.Kind, s.Runs)
		}
		if s.Result == nil && s.Kind != StepWaitGenerationObserved {
			t.Errorf("%s has no typed result", s.Kind)
		}
		if k, ok := LookupStep(s.Kind); !ok || k.Kind != s.Kind {
			t.Errorf("LookupStep(%s) = %v, %v", s.Kind, k, ok)
		}
	}
	if _, ok := LookupStep("power.warp"); ok {
		t.Errorf("LookupStep found a kind proto does not define")
	}
}

// TestRelayRoles: every kind the registry relays goes to the roles whose agents have a
// handler for it (agent/site, agent/ramdisk, agent/node), and to no other: the site's
// BMC and boot-entry commands to the site agent, the ramdisk's wipe, image, kexec and
// TPM commands to the ramdisk alone, inventory and diagnostics to either of a machine's
// agents. A step the registry runs itself goes to none; a kind no step names or relays
// is unknown.
func TestRelayRoles(t *testing.T) {
	site, ramdisk, either := []Role{RoleSite}, []Role{RoleRamdisk}, []Role{RoleRamdisk, RoleNode}
	want := map[string][]Role{
		CommandGetPower: site, CommandSetPower: site, CommandSetBootDevice: site, CommandInspectOOB: site,
		CommandMediaInsert: site, CommandMediaEject: site, CommandPrepareRamdisk: site, CommandBootCleanUp: site,
		CommandInventoryRefresh: either, CommandDiagDCGM: either,
		CommandDiskWipe: ramdisk, CommandBootKexec: ramdisk, CommandDeployImage: ramdisk,
		CommandTPMEnroll: ramdisk, CommandTPMActivate: ramdisk, CommandTPMQuote: ramdisk,
		StepEnsureRamdisk: nil, StepDeploy: nil, StepAttestBoot: nil, StepRenderUserData: nil,
		StepWaitAgentJoined: nil, StepWaitGenerationObserved: nil, StepRevokeIdentity: nil,
	}
	for kind, roles := range want {
		got, known := RelayRoles(kind)
		if !known || !slices.Equal(got, roles) {
			t.Errorf("RelayRoles(%q) = %v, %v; want %v, true", kind, got, known, roles)
		}
	}
	if len(relayRoles) != len(want) {
		t.Errorf("the relay table has %d kinds, want %d: %v", len(relayRoles), len(want), relayRoles)
	}
	if got, known := RelayRoles("echo"); known || got != nil {
		t.Errorf(`RelayRoles("echo") = %v, %v; want unknown`, got, known)
	}
}

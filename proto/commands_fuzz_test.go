package proto

import (
	"bytes"
	"encoding/json"
	"reflect"
	"testing"
)

// commandBodies are the typed bodies of relayed commands, their results and the
// inventory sections agents report: each is decoded from what a peer sent.
var commandBodies = []any{
	SiteCommand{}, PrepareRamdisk{}, MediaInsert{}, Discovery{}, SiteInventory{}, InventoryRefresh{},
	HostInventory{}, HardwareInventory{}, DeployImage{}, DeployImageResult{}, DeployImageProgress{},
	DiskWipe{}, DiskWipeResult{}, WipeProgress{}, DiagDCGM{}, DCGMResult{}, ImageCacheEntry{},
	OOBInventory{}, EnsureRamdiskResult{}, WaitAgentJoined{}, RevokeIdentityResult{}, UserDataRendered{},
}

// FuzzCommandBodies decodes any JSON into each typed body, strictly (unknown fields
// refused, as the site agent and disk.wipe decode) or not: a body decoded once encodes to
// JSON that decodes again and encodes the same, so what one side writes the other reads.
func FuzzCommandBodies(f *testing.F) {
	for i, s := range []string{
		`{"node":"gpu-01","drivers":{"power":{"driver":"redfish","config":{"address":"https://10.0.0.9"}}},"input":{"action":"on"},"credential":{"ref":"secret://bmc","username":"admin","password":"x"}}`,
		`{"macs":["52:54:00:12:34:56"],"productUuid":"4c4c4544-0035-4410-8052-b2c04f4a4d32","token":"bcj_x.y","registry":"https://r:7443","pins":["a","b","c"]}`,
		`{"url":"http://10.0.0.1:8080/images/ab","image":"ab"}`,
		`{"mac":"52:54:00:12:34:56","productUuid":"x","firstSeen":"2026-01-02T03:04:05Z"}`,
		`{"httpBase":"http://10.0.0.1:8080"}`,
		`{"productUuid":"x","mac":"52:54:00:12:34:56"}`,
		`{"generation":3,"units":[{"unit":"sysctl"}]}`,
		`{"system":{"productUuid":"x"},"nics":[{"name":"eth0","mac":"52:54:00:12:34:56","speedMbps":-1}],"disks":[{"name":"sda","sizeBytes":1e3}]}`,
		`{"cacheUrl":"http://c/i","source":"https://s/i","sha256":"ab","format":"qcow2","compression":"zstd","sizeBytes":10,"userData":"I2Nsb3VkLWNvbmZpZw==","userDataKind":"cloud-init"}`,
		`{"sha256":"ab","bytesWritten":1}`,
		`{"location":"cache","read":1,"sizeBytes":2,"bytesWritten":1,"skipped":0}`,
		`{"mode":"secure-erase"}`,
		`{"mode":"quick","disks":[{"name":"sda","readBack":{"passed":true}}],"skipped":[{"name":"sr0","reason":"removable"}]}`,
		`{"mode":"quick","percent":{"sda":50}}`,
		`{"level":4}`,
		`{"level":1,"tests":[{"name":"x","results":[{"entity":"GPU","id":0,"status":"pass"}]}],"passed":true}`,
		`{"ref":"os@1","sha256":"ab","sizeBytes":-5}`,
	} {
		f.Add(uint8(i), false, []byte(s))
	}
	f.Add(uint8(0), true, []byte(`{"node":"n","extra":1}`))
	f.Add(uint8(7), true, []byte(`{"nics":null,"system":{"productUuid":"\u0000"}}`))
	f.Fuzz(func(t *testing.T, which uint8, strict bool, data []byte) {
		typ := reflect.TypeOf(commandBodies[int(which)%len(commandBodies)])
		decode := func(b []byte) (any, error) {
			v := reflect.New(typ)
			dec := json.NewDecoder(bytes.NewReader(b))
			if strict {
				dec.DisallowUnknownFields()
			}
			return v.Interface(), dec.Decode(v.Interface())
		}
		v, err := decode(data)
		if err != nil {
			return
		}
		first, err := json.Marshal(v)
		if err != nil {
			t.Fatalf("%s decoded from %q does not encode: %v", typ, data, err)
		}
		again, err := decode(first)
		if err != nil {
			t.Fatalf("%s: its own encoding %s does not decode: %v", typ, first, err)
		}
		second, err := json.Marshal(again)
		if err != nil || !bytes.Equal(first, second) {
			t.Fatalf("%s encodes %s, then %s (%v)", typ, first, second, err)
		}
	})
}

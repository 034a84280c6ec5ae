package metal

import (
	"encoding/json"
	"testing"

	"github.com/better-compute/better-compute/jsondoc"
	"github.com/better-compute/better-compute/proto"
)

// FuzzParseHardwareProfiles checks that any file either is refused with INVALID_CONFIG at
// a path or parses into profiles that encode and parse back the same.
func FuzzParseHardwareProfiles(f *testing.F) {
	for _, seed := range []string{
		hardwareProfilesSeed,
		`{"version":1}`,
		`{"version":1,"hardwareProfiles":{"a":{"drivers":{"power":{"driver":"redfish","config":{"x":1}}}}}}`,
		`{"version":1,"hardwareProfiles":{"a":{"drivers":{"cooling":"fan"}}}}`,
		`{"version":2}`, `[]`, `{"version":1} {}`,
		`{"version":1,"hardwareProfiles":{"a":{"drivers":{"power":{"driver":5,"x":1}}}}}`,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		hp, err := parseHardwareProfiles(jsondoc.Decoder{Name: "hw.json", File: true, Code: proto.InvalidConfig}, data)
		if err != nil {
			if e := proto.AsError(err); e.Code != proto.InvalidConfig || e.Details.Path == "" {
				t.Fatalf("refused with %v: want INVALID_CONFIG at a path", err)
			}
			return
		}
		text, err := json.Marshal(hardwareFile{Version: 1, HardwareProfiles: hp})
		if err != nil {
			t.Fatal(err)
		}
		again, err := parseHardwareProfiles(jsondoc.Decoder{Name: "hw.json", File: true, Code: proto.InvalidConfig}, text)
		if err != nil {
			t.Fatalf("%s does not parse back: %v", text, err)
		}
		if back, _ := json.Marshal(hardwareFile{Version: 1, HardwareProfiles: again}); string(back) != string(text) {
			t.Fatalf("parsed back as %s, not %s", back, text)
		}
	})
}

const hardwareProfilesSeed = `{"version":1,"hardwareProfiles":{"gpu-redfish":{"drivers":{"power":"redfish","management":"redfish","boot":"ipxe"}}}}`

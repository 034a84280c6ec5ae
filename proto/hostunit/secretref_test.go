package hostunit

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/better-compute/better-compute/proto"
	"github.com/google/go-cmp/cmp"
)

func TestIsSecretRef(t *testing.T) {
	for ref, want := range map[string]bool{
		"secret://k8s/prod-join": true,
		"secret://t":             true,
		"secret://" + strings.Repeat("a", MaxSecretRef-9): true,
		"secret://" + strings.Repeat("a", MaxSecretRef-8): false,
		"secret://":               false,
		"secret://a//b":           false,
		"secret://a/../b":         false,
		"secret://a/./b":          false,
		"secret://a b":            false,
		"secret:/a":               false,
		"abcdef.0123456789abcdef": false,
	} {
		if got := IsSecretRef(ref); got != want {
			t.Errorf("IsSecretRef(%q) = %v, want %v", ref, got, want)
		}
	}
}

func TestSecretRefs(t *testing.T) {
	join := func(ref string) json.RawMessage {
		return json.RawMessage(`{"server": "https://10.0.0.1:6443", "caCertSha256": "` + strings.Repeat("ab", 32) + `", "tokenRef": "` + ref + `"}`)
	}
	units := []proto.HostUnit{
		{Unit: UnitSysctl, Settings: json.RawMessage(`{"vm.swappiness": 10}`)},
		{Unit: UnitK8sJoin, Settings: join("secret://k8s/a")},
		{Unit: UnitK8sJoin, Settings: join("not-a-ref")},
		{Unit: "frobnicate", Settings: join("secret://k8s/b")},
		{Unit: UnitK8sJoin, Settings: join("secret://k8s/c")},
	}
	if diff := cmp.Diff([]string{"secret://k8s/a", "secret://k8s/c"}, SecretRefs(units)); diff != "" {
		t.Errorf("SecretRefs (-want +got):\n%s", diff)
	}
}

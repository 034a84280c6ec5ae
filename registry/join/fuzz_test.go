package join

import (
	"encoding/json"
	"testing"

	"github.com/better-compute/better-compute/proto/joinwire"
	"github.com/better-compute/better-compute/registry/store"
)

// FuzzOpenRequest feeds join.join bodies to the request decoding and opening: nothing
// may panic, and a body that opens must be exactly one the fixture sealed.
func FuzzOpenRequest(f *testing.F) {
	fx := newFixture(f)
	_, secret := fx.mint(f, store.TokenProvisioned, "n1", "", 0)
	req, _ := request(f, fx.keys.JoinEncryptionKey(), "n1", "node", secret)
	good, _ := json.Marshal(req)
	f.Add(good)
	f.Add([]byte(`{"nodeId":"n1","role":"node","publicKey":"","sealedToken":""}`))
	f.Add([]byte(`{}`))
	f.Add([]byte(`[`))
	f.Fuzz(func(t *testing.T, body []byte) {
		var r joinwire.Request
		if json.Unmarshal(body, &r) != nil {
			return
		}
		_, token, err := fx.svc.open(r)
		if err == nil && token != secret {
			t.Fatalf("opened to %q, which nobody sealed", token)
		}
	})
}

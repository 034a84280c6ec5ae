package join

import (
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"encoding/json"
	"strings"
	"testing"

	"github.com/better-compute/better-compute/proto/joinwire"
)

func TestAcceptResponse(t *testing.T) {
	f := newFixture(t)
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	otherKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	_, otherSigner, _ := ed25519.GenerateKey(rand.Reader)
	foreign := newFixture(t)
	pub := f.signing.Public().(ed25519.PublicKey)
	cases := map[string]struct {
		body []byte
		want string
	}{
		"accepted":                    {f.response(t, f.signing, "n1", "node", key.Public()), ""},
		"another signing key":         {f.response(t, otherSigner, "n1", "node", key.Public()), "does not verify"},
		"another node":                {f.response(t, f.signing, "n2", "node", key.Public()), `for node "n2"`},
		"another role":                {f.response(t, f.signing, "n1", "site", key.Public()), `role "site"`},
		"another agent key":           {f.response(t, f.signing, "n1", "node", otherKey.Public()), "not for this agent's key"},
		"not JSON":                    {[]byte("<html>"), "JoinResponse"},
		"certificate not from its CA": {foreignCA(t, f, foreign, key), "does not chain to the agent CA"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			p, err := acceptResponse(tc.body, pub, "n1", "node", key.Public())
			if tc.want == "" {
				if err != nil || p.NodeID != "n1" {
					t.Fatalf("got %+v, %v", p, err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want an error saying %q", err, tc.want)
			}
		})
	}
}

// foreignCA is a response signed with the pinned key whose certificate comes from
// another agent CA than the one it carries.
func foreignCA(t *testing.T, f, foreign *fixture, key *ecdsa.PrivateKey) []byte {
	var r joinwire.Response
	json.Unmarshal(foreign.response(t, foreign.signing, "n1", "node", key.Public()), &r)
	p, _ := joinwire.VerifyResponse(foreign.signing.Public().(ed25519.PublicKey), r)
	p.AgentCA = pemCert(f.agentCA)
	resp, _ := joinwire.SignResponse(f.signing, p)
	data, _ := json.Marshal(resp)
	return data
}

// FuzzAcceptResponse feeds JoinResponse bodies to bcd's verification: nothing may
// panic, and nothing may be accepted that the pinned key did not sign for this agent.
func FuzzAcceptResponse(f *testing.F) {
	fx := newFixture(f)
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	pub := fx.signing.Public().(ed25519.PublicKey)
	f.Add(fx.response(f, fx.signing, "n1", "node", key.Public()))
	f.Add([]byte(`{"payload":"","signature":""}`))
	f.Add([]byte(`{}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		p, err := acceptResponse(body, pub, "n1", "node", key.Public())
		if err != nil {
			return
		}
		if p.NodeID != "n1" || p.Role != "node" {
			t.Fatalf("accepted a response for %q %q", p.NodeID, p.Role)
		}
	})
}

package joinwire

import (
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"strings"
	"testing"

	"github.com/better-compute/better-compute/proto"
)

func TestRequestParse(t *testing.T) {
	b64 := base64.StdEncoding.EncodeToString
	p256, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	p384, _ := ecdsa.GenerateKey(elliptic.P384(), rand.Reader)
	ed, _, _ := ed25519.GenerateKey(rand.Reader)
	rsaKey, _ := rsa.GenerateKey(rand.Reader, 1024)
	spki := func(k any) string { der, _ := x509.MarshalPKIXPublicKey(k); return b64(der) }
	good := Request{NodeID: "node_01.a-b", Role: RoleNode, PublicKey: spki(p256.Public()), SealedToken: b64(make([]byte, 64))}
	cases := map[string]struct {
		mutate func(r *Request)
		path   string
	}{
		"ECDSA P-256":       {func(r *Request) {}, ""},
		"Ed25519":           {func(r *Request) { r.PublicKey = spki(ed) }, ""},
		"ramdisk role":      {func(r *Request) { r.Role = RoleRamdisk }, ""},
		"upper-case node":   {func(r *Request) { r.NodeID = "Node" }, "nodeId"},
		"newline in node":   {func(r *Request) { r.NodeID = "n\nx" }, "nodeId"},
		"empty node":        {func(r *Request) { r.NodeID = "" }, "nodeId"},
		"unknown role":      {func(r *Request) { r.Role = "admin" }, "role"},
		"P-384 key":         {func(r *Request) { r.PublicKey = spki(p384.Public()) }, "publicKey"},
		"RSA key":           {func(r *Request) { r.PublicKey = spki(&rsaKey.PublicKey) }, "publicKey"},
		"key not base64":    {func(r *Request) { r.PublicKey = "%%" }, "publicKey"},
		"key not SPKI":      {func(r *Request) { r.PublicKey = b64([]byte("junk")) }, "publicKey"},
		"no sealed token":   {func(r *Request) { r.SealedToken = "" }, "sealedToken"},
		"huge sealed token": {func(r *Request) { r.SealedToken = b64(make([]byte, 2000)) }, "sealedToken"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			r := good
			tc.mutate(&r)
			_, err := r.Parse()
			if tc.path == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			e := proto.AsError(err)
			if e.Code != proto.InvalidInput || e.Details.Path != tc.path {
				t.Fatalf("got %v (path %q), want INVALID_INPUT at %s", err, e.Details.Path, tc.path)
			}
		})
	}
}

func TestLargestRequestFitsMaxRequest(t *testing.T) {
	b64 := base64.StdEncoding.EncodeToString
	largest := Request{NodeID: "n" + strings.Repeat("x", 127), Role: RoleRamdisk,
		PublicKey: b64(make([]byte, maxPublicKey)), SealedToken: b64(make([]byte, maxSealedToken))}
	data, err := json.Marshal(largest)
	if err != nil {
		t.Fatal(err)
	}
	if len(data) > MaxRequest*3/4 {
		t.Errorf("the largest join request is %d bytes: MaxRequest (%d) leaves too little headroom", len(data), MaxRequest)
	}
	if proto.CheckNodeID(largest.NodeID) != nil {
		t.Errorf("the largest node id is refused")
	}
}

func TestARefusedNodeIDIsQuotedShort(t *testing.T) {
	_, err := Request{NodeID: strings.Repeat("X", MaxRequest)}.Parse()
	if msg := proto.AsError(err).Message; len(msg) > 300 || !strings.Contains(msg, "XXX…") {
		t.Errorf("message of %d bytes: %.300s", len(msg), msg)
	}
}

package image

import (
	"bytes"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/x509"
	"encoding/pem"
	"os"
	"testing"

	"github.com/better-compute/better-compute/proto"
	"github.com/better-compute/better-compute/testkit/openssl"
)

func TestParsePublicKey(t *testing.T) {
	ed := openssl.Generate(t, openssl.Ed25519)
	p256 := openssl.Generate(t, openssl.P256)
	p384 := openssl.Generate(t, openssl.P384)
	rsa := openssl.Generate(t, openssl.RSA)
	privatePEM := func(k *openssl.Key) []byte { b, _ := os.ReadFile(k.PrivatePath); return b }
	cases := map[string]struct {
		pem []byte
		alg string
	}{
		"ed25519":              {pem: ed.PublicPEM, alg: AlgEd25519},
		"p256":                 {pem: p256.PublicPEM, alg: AlgECDSAP256},
		"p256 with crlf":       {pem: bytes.ReplaceAll(p256.PublicPEM, []byte("\n"), []byte("\r\n")), alg: AlgECDSAP256},
		"p384 refused":         {pem: p384.PublicPEM},
		"rsa refused":          {pem: rsa.PublicPEM},
		"private key refused":  {pem: privatePEM(ed)},
		"two blocks":           {pem: append(bytes.Clone(ed.PublicPEM), p256.PublicPEM...)},
		"text before":          {pem: append([]byte("key:\n"), ed.PublicPEM...)},
		"text after":           {pem: append(bytes.Clone(ed.PublicPEM), "trailer\n"...)},
		"certificate block":    {pem: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: []byte{1}})},
		"headers":              {pem: pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Headers: map[string]string{"a": "b"}, Bytes: derOf(t, ed.PublicPEM)})},
		"garbage der":          {pem: pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: []byte{0x30, 0x03, 1, 2, 3}})},
		"not pem":              {pem: []byte("ssh-ed25519 AAAAC3Nz")},
		"empty":                {pem: nil},
		"too large":            {pem: append(bytes.Repeat([]byte(" "), maxPublicKeyPEM), ed.PublicPEM...)},
		"broken block first":   {pem: append([]byte("-----BEGIN PUBLIC KEY-----\n!!\n-----END PUBLIC KEY-----\n"), ed.PublicPEM...)},
		"leading blank lines":  {pem: append([]byte("\n\n"), ed.PublicPEM...), alg: AlgEd25519},
		"trailing blank lines": {pem: append(bytes.Clone(ed.PublicPEM), "\n\n"...), alg: AlgEd25519},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			k, err := ParsePublicKey(tc.pem)
			if tc.alg == "" {
				if e := proto.AsError(err); err == nil || e.Code != proto.InvalidInput || e.Details.Path != "publicKey" {
					t.Fatalf("got %+v, %v; want INVALID_INPUT at publicKey", k, err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if k.Algorithm != tc.alg || len(k.Fingerprint) != len("sha256/")+44 {
				t.Errorf("got %s %s", k.Algorithm, k.Fingerprint)
			}
		})
	}
}

func derOf(t *testing.T, pemText []byte) []byte {
	b, _ := pem.Decode(pemText)
	if b == nil {
		t.Fatal("no PEM")
	}
	return b.Bytes
}

// TestSignatureForms checks the three forms openssl produces verify, and that a flip
// of any bit of the signature or of the input does not.
func TestSignatureForms(t *testing.T) {
	input := []byte("bc-image-v1\nos\nubuntu@1\nraw\nnone\n" + digestA + "\n")
	ed := openssl.Generate(t, openssl.Ed25519)
	ec := openssl.Generate(t, openssl.P256)
	der := ec.Sign(t, input)
	cases := map[string]struct {
		key *openssl.Key
		sig []byte
	}{
		"ed25519":     {ed, ed.Sign(t, input)},
		"ecdsa der":   {ec, der},
		"ecdsa p1363": {ec, openssl.P1363(t, der)},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			k, err := ParsePublicKey(tc.key.PublicPEM)
			if err != nil {
				t.Fatal(err)
			}
			if !k.Verify(input, tc.sig) {
				t.Fatal("a good signature does not verify")
			}
			for bit := range len(tc.sig) * 8 {
				flipped := bytes.Clone(tc.sig)
				flipped[bit/8] ^= 1 << (bit % 8)
				if k.Verify(input, flipped) {
					t.Fatalf("signature with bit %d flipped verifies", bit)
				}
			}
			for _, bit := range []int{0, 77, len(input)*8 - 9} {
				flipped := bytes.Clone(input)
				flipped[bit/8] ^= 1 << (bit % 8)
				if k.Verify(flipped, tc.sig) {
					t.Fatalf("input with bit %d flipped verifies", bit)
				}
			}
			other, _ := ParsePublicKey(openssl.Generate(t, tc.key.Algorithm).PublicPEM)
			if other.Verify(input, tc.sig) {
				t.Fatal("verifies against another key")
			}
		})
	}
}

func FuzzParsePublicKey(f *testing.F) {
	pub, _, _ := ed25519.GenerateKey(rand.Reader)
	der, _ := x509.MarshalPKIXPublicKey(pub)
	f.Add(pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der}))
	f.Add([]byte("-----BEGIN PUBLIC KEY-----\nMCowBQYDK2VwAyEA\n-----END PUBLIC KEY-----\n"))
	f.Add([]byte("-----BEGIN PUBLIC KEY-----\n-----BEGIN PUBLIC KEY-----\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		k, err := ParsePublicKey(data)
		if err != nil {
			if proto.CodeOf(err) != proto.InvalidInput {
				t.Fatalf("%v is not INVALID_INPUT", err)
			}
			return
		}
		if k.Algorithm != AlgEd25519 && k.Algorithm != AlgECDSAP256 {
			t.Fatalf("accepted %q", k.Algorithm)
		}
		// A parsed key verifies nothing it did not sign, and never panics.
		if k.Verify([]byte("x"), make([]byte, 64)) {
			t.Fatal("a zero signature verifies")
		}
	})
}

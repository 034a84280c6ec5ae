package image

import (
	"bytes"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/x509"
	"encoding/asn1"
	"encoding/pem"
	"fmt"
	"math/big"
	"os"
	"strings"
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
		msg string // the refusal's message, when it matters
	}{
		"ed25519":              {pem: ed.PublicPEM, alg: AlgEd25519},
		"p256":                 {pem: p256.PublicPEM, alg: AlgECDSAP256},
		"p256 with crlf":       {pem: bytes.ReplaceAll(p256.PublicPEM, []byte("\n"), []byte("\r\n")), alg: AlgECDSAP256},
		"p384 refused":         {pem: p384.PublicPEM},
		"rsa refused":          {pem: rsa.PublicPEM, msg: "RSA keys are not accepted: use ECDSA P-256 or Ed25519"},
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
				if tc.msg != "" && !strings.HasSuffix(proto.AsError(err).Message, tc.msg) {
					t.Errorf("refused with %q, want it to end %q", proto.AsError(err).Message, tc.msg)
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
			if ok, err := k.Verify(input, tc.sig); !ok || err != nil {
				t.Fatalf("a good signature does not verify: %v", err)
			}
			for bit := range len(tc.sig) * 8 {
				flipped := bytes.Clone(tc.sig)
				flipped[bit/8] ^= 1 << (bit % 8)
				if ok, _ := k.Verify(input, flipped); ok {
					t.Fatalf("signature with bit %d flipped verifies", bit)
				}
			}
			for _, bit := range []int{0, 77, len(input)*8 - 9} {
				flipped := bytes.Clone(input)
				flipped[bit/8] ^= 1 << (bit % 8)
				if ok, _ := k.Verify(flipped, tc.sig); ok {
					t.Fatalf("input with bit %d flipped verifies", bit)
				}
			}
			other, _ := ParsePublicKey(openssl.Generate(t, tc.key.Algorithm).PublicPEM)
			if ok, _ := other.Verify(input, tc.sig); ok {
				t.Fatal("verifies against another key")
			}
		})
	}
}

// TestHighSRefused turns real openssl signatures into their high-S twins, (r, n - s),
// which verify as well: in both encodings the catalog refuses them, saying to
// normalise to low S, and LowS gives back the signature the catalog takes.
func TestHighSRefused(t *testing.T) {
	ec := openssl.Generate(t, openssl.P256)
	k, err := ParsePublicKey(ec.PublicPEM)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 8 { // openssl's S is high about half the time: both halves meet HighS
		input := []byte(fmt.Sprintf("bc-image-v1\nos\nubuntu@%d\nraw\nnone\n%s\n", i, digestA))
		low := ec.Sign(t, input)
		high := openssl.HighS(t, low)
		for form, sig := range map[string][]byte{"der": high, "p1363": openssl.P1363(t, high)} {
			ok, err := k.Verify(input, sig)
			if e := proto.AsError(err); ok || e.Code != proto.InvalidInput || e.Details.Path != "signature" || !strings.Contains(e.Message, "low S") {
				t.Fatalf("%s high-S signature: %v, %v; want INVALID_INPUT at signature saying to normalise to low S", form, ok, err)
			}
		}
		if got := LowS(high); !bytes.Equal(got, low) {
			t.Fatalf("LowS of the high-S twin: %x, want %x", got, low)
		}
		for _, same := range [][]byte{low, openssl.P1363(t, high), []byte("not a signature")} {
			if got := LowS(same); !bytes.Equal(got, same) {
				t.Fatalf("LowS changed %x to %x", same, got)
			}
		}
	}
}

// FuzzLowS: whatever bytes an operator passes, LowS never panics, changes only a DER
// signature with a high S, and makes one LowS keeps.
func FuzzLowS(f *testing.F) {
	f.Add([]byte{0x30, 0x06, 0x02, 0x01, 0x01, 0x02, 0x01, 0x01})
	high, _ := asn1.Marshal(derSignature{big.NewInt(1), new(big.Int).Sub(p256Order, big.NewInt(1))})
	f.Add(high)
	f.Add(make([]byte, 64))
	f.Fuzz(func(t *testing.T, sig []byte) {
		out := LowS(sig)
		if bytes.Equal(out, sig) {
			return
		}
		rs, ok := parseDER(sig)
		if !ok || rs.S.Cmp(p256HalfOrder) <= 0 {
			t.Fatalf("LowS changed %x, which is no high-S DER signature", sig)
		}
		if low, ok := parseDER(out); !ok || low.S.Cmp(p256HalfOrder) > 0 || low.R.Cmp(rs.R) != 0 || !bytes.Equal(LowS(out), out) {
			t.Fatalf("LowS(%x) = %x", sig, out)
		}
	})
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
		if ok, _ := k.Verify([]byte("x"), make([]byte, 64)); ok {
			t.Fatal("a zero signature verifies")
		}
	})
}

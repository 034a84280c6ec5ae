// Package openssl makes keys and signatures with the openssl command line, so tests
// check the registry against exactly what operators run. Only tests import it.
package openssl

import (
	"crypto/elliptic"
	"encoding/asn1"
	"math/big"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// Algorithm names a kind of key openssl makes.
type Algorithm string

// The algorithms: the two the catalog accepts and two it refuses.
const (
	Ed25519 Algorithm = "ed25519"
	P256    Algorithm = "p256"
	P384    Algorithm = "p384"
	RSA     Algorithm = "rsa"
)

var genArgs = map[Algorithm][]string{
	Ed25519: {"-algorithm", "ed25519"},
	P256:    {"-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256"},
	P384:    {"-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-384"},
	RSA:     {"-algorithm", "RSA", "-pkeyopt", "rsa_keygen_bits:2048"},
}

// Key is a private key in a temporary directory and its SPKI PEM public key.
type Key struct {
	Algorithm Algorithm
	// PrivatePath and PublicPath are the PEM files openssl wrote.
	PrivatePath, PublicPath string
	// PublicPEM is the content of PublicPath.
	PublicPEM []byte
}

// Generate makes a key with `openssl genpkey` and its public half with `openssl pkey
// -pubout`.
func Generate(t testing.TB, alg Algorithm) *Key {
	t.Helper()
	dir := t.TempDir()
	k := &Key{Algorithm: alg, PrivatePath: filepath.Join(dir, "key.pem"), PublicPath: filepath.Join(dir, "pub.pem")}
	run(t, append(append([]string{"genpkey"}, genArgs[alg]...), "-out", k.PrivatePath)...)
	run(t, "pkey", "-in", k.PrivatePath, "-pubout", "-out", k.PublicPath)
	var err error
	if k.PublicPEM, err = os.ReadFile(k.PublicPath); err != nil {
		t.Fatal(err)
	}
	return k
}

// Sign signs input as an operator would: Ed25519 with `openssl pkeyutl -sign -rawin`,
// ECDSA with `openssl dgst -sha256 -sign` (which writes DER, with a high S about half
// the time). An ECDSA signature comes back in low-S form, as `images register` sends it
// and the catalog takes it; HighS makes its twin.
func (k *Key) Sign(t testing.TB, input []byte) []byte {
	t.Helper()
	dir := t.TempDir()
	in, out := filepath.Join(dir, "input"), filepath.Join(dir, "sig")
	if err := os.WriteFile(in, input, 0o600); err != nil {
		t.Fatal(err)
	}
	if k.Algorithm == Ed25519 {
		run(t, "pkeyutl", "-sign", "-rawin", "-inkey", k.PrivatePath, "-in", in, "-out", out)
	} else {
		run(t, "dgst", "-sha256", "-sign", k.PrivatePath, "-out", out, in)
	}
	sig, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	if k.Algorithm != Ed25519 {
		sig = withS(t, sig, false)
	}
	return sig
}

// HighS turns a DER ECDSA P-256 signature into its high-S twin, (r, n - s) where s is
// at most n/2: it verifies as well, and the catalog must refuse it.
func HighS(t testing.TB, der []byte) []byte {
	t.Helper()
	return withS(t, der, true)
}

// withS re-encodes a DER ECDSA P-256 signature with its s in the upper half of the
// group order (high) or the lower (low), replacing s by n - s where needed.
func withS(t testing.TB, der []byte, high bool) []byte {
	t.Helper()
	rs := parseDER(t, der)
	n := elliptic.P256().Params().N
	if isHigh := rs.S.Cmp(new(big.Int).Rsh(n, 1)) > 0; isHigh != high {
		rs.S.Sub(n, rs.S)
	}
	out, err := asn1.Marshal(rs)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

type derSignature struct{ R, S *big.Int }

func parseDER(t testing.TB, der []byte) derSignature {
	t.Helper()
	var rs derSignature
	if rest, err := asn1.Unmarshal(der, &rs); err != nil || len(rest) != 0 {
		t.Fatalf("not a DER ECDSA signature: %v", err)
	}
	return rs
}

// P1363 turns a DER ECDSA P-256 signature into its IEEE P1363 form, r||s in 64 bytes.
func P1363(t testing.TB, der []byte) []byte {
	t.Helper()
	rs := parseDER(t, der)
	out := make([]byte, 64)
	rs.R.FillBytes(out[:32])
	rs.S.FillBytes(out[32:])
	return out
}

func run(t testing.TB, args ...string) {
	t.Helper()
	if out, err := exec.Command("openssl", args...).CombinedOutput(); err != nil {
		t.Fatalf("openssl %v: %v\n%s", args, err, out)
	}
}

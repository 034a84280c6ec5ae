package proto

import (
	"crypto/x509"
	"crypto/x509/pkix"
	"strconv"
	"testing"
)

// FuzzIdentityEpoch checks the reading of a certificate's identity epoch: none is 0,
// and anything else is a count written in canonical decimal, read back as it is
// written, or UNAUTHENTICATED.
func FuzzIdentityEpoch(f *testing.F) {
	for _, s := range []string{"", "0", "1", "42", "-1", "01", "+1", " 1", "9223372036854775807", "9223372036854775808", "x"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		n, err := IdentityEpoch(&x509.Certificate{Subject: pkix.Name{CommonName: "nd_1", SerialNumber: s}})
		switch {
		case s == "":
			if n != 0 || err != nil {
				t.Fatalf("no epoch: %d, %v; want 0", n, err)
			}
		case err != nil:
			if CodeOf(err) != Unauthenticated {
				t.Fatalf("%q: %v, want UNAUTHENTICATED", s, err)
			}
			if v, perr := strconv.ParseInt(s, 10, 64); perr == nil && v >= 0 && strconv.FormatInt(v, 10) == s {
				t.Fatalf("%q refused: %v", s, err)
			}
		case n < 0 || strconv.FormatInt(n, 10) != s:
			t.Fatalf("%q read as %d", s, n)
		}
	})
}

package registry

import (
	"log/slog"
	"testing"
	"time"

	"github.com/better-compute/better-compute/clock"
	"github.com/better-compute/better-compute/registry/pki"
)

// TestServingCertificateRenewed: the serving certificate stays the same until 30 days of
// its 90 are left, and is issued again, from the same CA, at the next handshake after.
func TestServingCertificateRenewed(t *testing.T) {
	keys, err := pki.LoadOrCreate(t.TempDir(), clock.Real{})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	s, err := newServingCertificate(keys, []string{"127.0.0.1"}, func() time.Time { return now }, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	first, _ := s.get(nil)
	now = now.Add(59 * 24 * time.Hour)
	same, _ := s.get(nil)
	if same.Leaf.SerialNumber.Cmp(first.Leaf.SerialNumber) != 0 {
		t.Errorf("renewed with %s left", first.Leaf.NotAfter.Sub(now))
	}
	now = now.Add(2 * 24 * time.Hour)
	renewed, _ := s.get(nil)
	if renewed.Leaf.SerialNumber.Cmp(first.Leaf.SerialNumber) == 0 {
		t.Fatalf("not renewed with %s left", first.Leaf.NotAfter.Sub(now))
	}
	if err := renewed.Leaf.CheckSignatureFrom(keys.ServingCA); err != nil {
		t.Errorf("renewed certificate: %v", err)
	}
}

package cli

import (
	"bytes"
	"strings"
	"testing"
	"text/tabwriter"
	"time"

	"github.com/better-compute/better-compute/registry/api"
)

// TestAttestationTableShowsTheBootsDigest: `nodes attestation`'s table shows the last
// boot's digest whole, on a line of its own, so that an operator can copy it into
// `nodes attest accept --boot`.
func TestAttestationTableShowsTheBootsDigest(t *testing.T) {
	digest := "sha256:" + strings.Repeat("0123456789abcdef", 4)
	var buf bytes.Buffer
	w := tabwriter.NewWriter(&buf, 0, 4, 2, ' ', 0)
	attestedBootText(w, api.NodeAttestation{NodeID: "nd_1", Enrolled: true, EnrolledAt: &time.Time{},
		LastBoot: &api.AttestedBoot{Digest: digest, Mode: "tofu", Verdict: "mismatch", VerifiedAt: time.Date(2026, 3, 1, 12, 0, 0, 5, time.UTC)}})
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	for line := range strings.Lines(buf.String()) {
		if f := strings.Fields(line); len(f) == 2 && f[0] == "digest" && f[1] == digest {
			return
		}
	}
	t.Fatalf("no line \"digest %s\" in:\n%s", digest, buf.String())
}

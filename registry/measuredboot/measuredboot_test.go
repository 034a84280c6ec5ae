package measuredboot_test

import (
	"slices"
	"strings"
	"testing"

	"github.com/better-compute/better-compute/proto"
	"github.com/better-compute/better-compute/registry/measuredboot"
)

var (
	challenge = measuredboot.Challenge
	quoted    = measuredboot.QuotedPCRs
)

func wantRefused(t *testing.T, err error, code proto.Code, reason, says string) {
	t.Helper()
	e := proto.AsError(err)
	if err == nil || e.Code != code || e.Details.Reason != reason || !strings.Contains(e.Message, says) {
		t.Fatalf("got %v, want %s with reason %s saying %q", err, code, reason, says)
	}
}

// A boot verifies: the quote with the enrolled AK over the nonce, the log replayed; its
// events decoded; compared with itself as the baseline, nothing differs.
func TestVerifiedBoot(t *testing.T) {
	m := machine(t, boot("kernel 6.1"), nil)
	e := enrolled(t, m)
	n := nonce(t)
	b, err := measuredboot.Verify(e.AKPublic, n, proto.DefaultBootPCRs, quote(t, m, e, n))
	if err != nil {
		t.Fatal(err)
	}
	if !slices.ContainsFunc(b.Events, func(ev proto.BootEvent) bool {
		return ev.PCR == 4 && ev.Type == "EV_EFI_BOOT_SERVICES_APPLICATION" && ev.Description == `image \vmlinuz`
	}) {
		t.Fatalf("the kernel's event is not among the decoded events: %+v", b.Events)
	}
	if b.SecureBoot.Enabled || b.SecureBoot.Problem != "" {
		t.Fatalf("secure boot: %+v, want read as disabled", b.SecureBoot)
	}
	if len(b.PCRs) != 4 {
		t.Fatalf("PCRs %+v, want 0, 2, 4, 7", b.PCRs)
	}
	if d := measuredboot.Compare(proto.DefaultBootPCRs, b.PCRs, b.Events, b); d != nil {
		t.Fatalf("a boot differs from itself: %v", d)
	}
}

// A quote over an earlier nonce (a replay of an earlier answer) is refused.
func TestReplayedQuoteRefused(t *testing.T) {
	m := machine(t, boot("kernel 6.1"), nil)
	e := enrolled(t, m)
	old := quote(t, m, e, nonce(t))
	_, err := measuredboot.Verify(e.AKPublic, nonce(t), proto.DefaultBootPCRs, old)
	wantRefused(t, err, proto.DriverError, proto.ReasonQuote, "nonce")
}

// A quote made by another node's AK, over this attestation's nonce, is refused: the
// other machine cannot stand in for this one.
func TestOtherNodesQuoteRefused(t *testing.T) {
	mine := machine(t, boot("kernel 6.1"), nil)
	e := enrolled(t, mine)
	other := machine(t, boot("kernel 6.1"), nil)
	oe := enrolled(t, other)
	n := nonce(t)
	_, err := measuredboot.Verify(e.AKPublic, n, proto.DefaultBootPCRs, quote(t, other, oe, n))
	wantRefused(t, err, proto.DriverError, proto.ReasonQuote, "does not verify")
}

// A machine that booted one kernel and sends the log of another is refused: its log does
// not replay to the quoted PCRs.
func TestLogThatDoesNotReplayRefused(t *testing.T) {
	m := machine(t, boot("tampered kernel"), eventLog(boot("kernel 6.1")))
	e := enrolled(t, m)
	n := nonce(t)
	_, err := measuredboot.Verify(e.AKPublic, n, proto.DefaultBootPCRs, quote(t, m, e, n))
	wantRefused(t, err, proto.DriverError, proto.ReasonQuote, "does not replay")
}

// Values the quote does not cover (the PCR values changed after the quote) are refused.
func TestPCRsOutsideTheQuoteRefused(t *testing.T) {
	m := machine(t, boot("kernel 6.1"), nil)
	e := enrolled(t, m)
	n := nonce(t)
	q := quote(t, m, e, n)
	q.PCRs[2].Digest = digestOf("another value")
	_, err := measuredboot.Verify(e.AKPublic, n, proto.DefaultBootPCRs, q)
	wantRefused(t, err, proto.DriverError, proto.ReasonQuote, "does not verify")
}

// A boot of another kernel verifies but differs from the baseline, and Compare names the
// kernel's event: the new one and the baseline's that is missing.
func TestAnotherKernelDiffers(t *testing.T) {
	first := machine(t, boot("kernel 6.1"), nil)
	e := enrolled(t, first)
	n := nonce(t)
	base, err := measuredboot.Verify(e.AKPublic, n, proto.DefaultBootPCRs, quote(t, first, e, n))
	if err != nil {
		t.Fatal(err)
	}
	second := machine(t, boot("kernel 6.2 with a rootkit"), nil)
	e2 := enrolled(t, second)
	n = nonce(t)
	b, err := measuredboot.Verify(e2.AKPublic, n, proto.DefaultBootPCRs, quote(t, second, e2, n))
	if err != nil {
		t.Fatal(err)
	}
	d := measuredboot.Compare(proto.DefaultBootPCRs, base.PCRs, base.Events, b)
	if len(d) != 1 || !strings.HasPrefix(d[0], "PCR 4 is ") || strings.Count(d[0], `image \vmlinuz`) != 2 ||
		!strings.Contains(d[0], "new event EV_EFI_BOOT_SERVICES_APPLICATION") || !strings.Contains(d[0], "missing event") {
		t.Fatalf("differences %q, want PCR 4's kernel event named, new and missing", d)
	}
	golden := []proto.PCRValue{{Index: 4, Digest: base.PCRs[2].Digest}}
	if d := measuredboot.Compare([]int{4}, golden, nil, b); len(d) != 1 {
		t.Fatalf("against golden values: %q, want PCR 4", d)
	}
}

// An AK that does not live beside the EK it is enrolled with cannot be activated: a
// machine reporting another TPM's EK with its own AK does not learn the secret.
func TestActivationNeedsTheEKsTPM(t *testing.T) {
	m := machine(t, boot("kernel 6.1"), nil)
	mine, err := m.Enroll()
	if err != nil {
		t.Fatal(err)
	}
	other := machine(t, boot("kernel 6.1"), nil)
	theirs, err := other.Enroll()
	if err != nil {
		t.Fatal(err)
	}
	claimed := mine
	claimed.EKPublic = theirs.EKPublic
	_, in, err := measuredboot.Challenge(claimed)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.Activate(in); err == nil {
		t.Fatal("a TPM activated a credential made for another TPM's EK")
	}
}

// An enrollment whose AK parameters are not a TPM's (a key made outside it) is refused.
func TestForgedAKRefused(t *testing.T) {
	m := machine(t, boot("kernel 6.1"), nil)
	e, err := m.Enroll()
	if err != nil {
		t.Fatal(err)
	}
	e.AKCreateAttestation[len(e.AKCreateAttestation)-1] ^= 1
	_, _, err = measuredboot.Challenge(e)
	wantRefused(t, err, proto.DriverError, proto.ReasonActivation, "attestation key")
}

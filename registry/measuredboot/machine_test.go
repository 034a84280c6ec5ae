package measuredboot_test

import (
	"bytes"
	"crypto/rand"
	"testing"

	"github.com/better-compute/better-compute/hardware/tpm"
	"github.com/better-compute/better-compute/proto"
	"github.com/better-compute/better-compute/testkit/tpmboot"
)

// The machines of these tests are software TPMs that booted the test's events
// (testkit/tpmboot).

var (
	boot     = tpmboot.Boot
	eventLog = tpmboot.EventLog
	digestOf = tpmboot.DigestOf
)

func machine(t *testing.T, events []tpmboot.Event, log []byte) *tpm.TPM {
	t.Helper()
	m, _ := tpmboot.Machine(t, events, log)
	return m
}

func nonce(t *testing.T) []byte {
	n := make([]byte, 32)
	if _, err := rand.Read(n); err != nil {
		t.Fatal(err)
	}
	return n
}

// enrolled enrolls m and proves its AK by activation, as the registry does.
func enrolled(t *testing.T, m *tpm.TPM) proto.TPMEnrollResult {
	t.Helper()
	e, err := m.Enroll()
	if err != nil {
		t.Fatal(err)
	}
	secret, in, err := challenge(e)
	if err != nil {
		t.Fatal(err)
	}
	out, err := m.Activate(in)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(out.Secret, secret) {
		t.Fatal("the activated secret is not the credential's")
	}
	return e
}

func quote(t *testing.T, m *tpm.TPM, e proto.TPMEnrollResult, n []byte) proto.TPMQuoteResult {
	t.Helper()
	q, err := m.Quote(proto.TPMQuote{AKBlob: e.AKBlob, Nonce: n, PCRs: quoted(proto.DefaultBootPCRs)})
	if err != nil {
		t.Fatal(err)
	}
	return q
}

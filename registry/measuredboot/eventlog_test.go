package measuredboot_test

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/binary"
	"math/big"
	"slices"
	"strings"
	"testing"
	"time"
	"unicode"

	"github.com/better-compute/better-compute/proto"
	"github.com/better-compute/better-compute/registry/measuredboot"
	"github.com/better-compute/better-compute/testkit/tpmboot"
)

// algorithmsLog is a crypto-agile log of MaxEventLog bytes whose Spec ID event lists
// SHA-256 (with a 1-byte digest) n times, then one event with as many SHA-256 digests as
// the rest of the log holds.
func algorithmsLog(n int) []byte {
	algs := make([]tpmboot.Algorithm, n)
	for i := range algs {
		algs[i] = tpmboot.Algorithm{ID: 0x000B, Size: 1}
	}
	var b bytes.Buffer
	b.Write(tpmboot.SpecIDEvent(algs...))
	digests := (proto.MaxEventLog - b.Len() - 16) / 3
	binary.Write(&b, binary.LittleEndian, []uint32{4, 0x0D, uint32(digests)})
	for range digests {
		binary.Write(&b, binary.LittleEndian, uint16(0x000B))
		b.WriteByte(1)
	}
	binary.Write(&b, binary.LittleEndian, uint32(0))
	return b.Bytes()
}

// A machine whose quote verifies and whose log's Spec ID event lists its algorithm ten
// thousand times is refused at once: the parser would look each of the log's hundreds of
// thousands of digests up in that list, for minutes of the registry's CPU a quote.
func TestLogOfCountlessAlgorithmsRefused(t *testing.T) {
	m := machine(t, boot("kernel 6.1"), nil)
	e := enrolled(t, m)
	n := nonce(t)
	q := quote(t, m, e, n)
	q.EventLog = algorithmsLog(10000)
	done := make(chan error, 1)
	go func() {
		_, err := measuredboot.Verify(e.AKPublic, n, proto.DefaultBootPCRs, q)
		done <- err
	}()
	select {
	case err := <-done:
		wantRefused(t, err, proto.DriverError, proto.ReasonQuote, "10000 digest algorithms")
	case <-time.After(10 * time.Second):
		t.Fatal("the registry still parses a 1 MiB event log after 10s")
	}
}

// A machine that booted a kernel and sends a log without PCR 4's events is refused: a
// PCR of which the log has no event replays to nothing, yet its quoted value is the
// kernel's, and the boot recorded would name no boot loader and no kernel.
func TestLogWithoutAPCRsEventsRefused(t *testing.T) {
	booted := boot("kernel 6.2 with a rootkit")
	var told []tpmboot.Event
	for _, e := range booted {
		if e.PCR != 4 {
			told = append(told, e)
		}
	}
	m := machine(t, booted, eventLog(told))
	e := enrolled(t, m)
	n := nonce(t)
	b, err := measuredboot.Verify(e.AKPublic, n, proto.DefaultBootPCRs, quote(t, m, e, n))
	if err == nil {
		t.Fatalf("a boot verified whose log has no event of PCR 4, its events %+v", b.Events)
	}
	wantRefused(t, err, proto.DriverError, proto.ReasonQuote, "PCR 4")
}

// The subject of a certificate the log says verified the boot is the log's, and
// untrusted, as the events' data: control characters in it are not recorded, so `nodes
// attestation` writes none into the operator's terminal.
func TestAuthoritiesRecordedPrintable(t *testing.T) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "db key\x1b]0;owned\x07\x1b[2J"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour)}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	booted := boot("kernel 6.1")
	booted = slices.Insert(booted, 3, tpmboot.Authority(der))
	m := machine(t, booted, nil)
	e := enrolled(t, m)
	n := nonce(t)
	b, err := measuredboot.Verify(e.AKPublic, n, proto.DefaultBootPCRs, quote(t, m, e, n))
	if err != nil {
		t.Fatal(err)
	}
	if len(b.SecureBoot.Authorities) != 1 || !strings.HasPrefix(b.SecureBoot.Authorities[0], "CN=db key") {
		t.Fatalf("authorities %q, want the db key's", b.SecureBoot.Authorities)
	}
	if i := strings.IndexFunc(b.SecureBoot.Authorities[0], unicode.IsControl); i >= 0 {
		t.Fatalf("authority %q recorded with a control character at %d", b.SecureBoot.Authorities[0], i)
	}
}

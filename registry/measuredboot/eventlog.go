package measuredboot

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"slices"

	"github.com/google/go-attestation/attest"
)

// maxLogAlgorithms bounds the digest algorithms a log's Spec ID event may list: one for
// each PCR bank a TPM has, and the TCG registers eight hash algorithms for banks.
// go-attestation's parser looks each digest of each event up in that whole list, so a
// list of a hundred thousand entries (400 KiB of a log the registry reads up to 1 MiB of)
// costs minutes of CPU for one quote.
const maxLogAlgorithms = 8

// The Spec ID event opens a crypto-agile log (TCG PC Client Platform Firmware Profile,
// 10.4.5.1): a TCG_PCR_EVENT (PCR index, type, SHA-1 digest, data size: 32 bytes) whose
// data is "Spec ID Event03", the platform class, four version and size bytes, then the
// count of algorithms.
const (
	specIDEventHeader = 32
	specIDCountAt     = 24
	evNoAction        = 0x00000003
)

// checkAlgorithms refuses a log whose Spec ID event lists more than maxLogAlgorithms
// digest algorithms, before go-attestation parses it. A log without a Spec ID event
// (the SHA-1 format) lists none.
func checkAlgorithms(log []byte) error {
	if len(log) < specIDEventHeader || binary.LittleEndian.Uint32(log[4:8]) != evNoAction {
		return nil
	}
	size := binary.LittleEndian.Uint32(log[28:32])
	data := log[specIDEventHeader:]
	if size < specIDCountAt+4 || uint64(size) > uint64(len(data)) || !bytes.HasPrefix(data, []byte("Spec ID Event03\x00")) {
		return nil
	}
	if n := binary.LittleEndian.Uint32(data[specIDCountAt:]); n > maxLogAlgorithms {
		return fmt.Errorf("its Spec ID event lists %d digest algorithms, more than the %d PCR banks a TPM can have", n, maxLogAlgorithms)
	}
	return nil
}

// checkUnlogged refuses a quoted PCR of the firmware's (0 to lastFirmwarePCR) of which
// the log has no event, unless it holds the value it was reset to: go-attestation
// replays such a PCR to whatever value it was quoted with, so a log cut of a PCR's
// events (the boot loader's and the kernel's) would verify, and the boot be recorded
// with none of them.
func checkUnlogged(quoted []attest.PCR, events []attest.Event) error {
	for _, p := range quoted {
		if p.Index > lastFirmwarePCR || slices.ContainsFunc(events, func(e attest.Event) bool { return e.Index == p.Index }) {
			continue
		}
		if !bytes.Equal(p.Digest, resetValue(p.Index, len(p.Digest))) {
			return fmt.Errorf("it has no event of PCR %d, whose value %x is not the value of a PCR nothing was extended into", p.Index, p.Digest)
		}
	}
	return nil
}

// lastFirmwarePCR is the last PCR whose every extension the firmware's event log records:
// 0 to 7 the firmware's own, 8 and 9 the boot loader's, which extends them through the
// firmware and so logs with it (TCG PC Client Platform Firmware Profile). PCRs from 10 on
// are the running OS's (IMA's boot aggregate into 10 with no policy at all, systemd's
// phases into 11, an application's into 23), which keeps their events in logs of its own:
// a policy comparing one of them compares its quoted value, and its absence from the
// firmware's log says nothing.
const lastFirmwarePCR = 9

// resetValue is the value of PCR index at power-on: ones for the dynamic PCRs 17 to 22
// (reset to zeros by a late launch, which extends them), zeros for the others.
func resetValue(index, size int) []byte {
	v := make([]byte, size)
	if index >= 17 && index <= 22 {
		for i := range v {
			v[i] = 0xff
		}
	}
	return v
}

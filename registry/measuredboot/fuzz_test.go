package measuredboot_test

import (
	"testing"

	"github.com/better-compute/better-compute/registry/measuredboot"
)

// FuzzParseEventLog: the event log a machine sends is parsed and its events decoded
// without a panic, whatever its bytes.
func FuzzParseEventLog(f *testing.F) {
	f.Add(eventLog(boot("kernel 6.1")))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, raw []byte) {
		events, err := measuredboot.ParseEventLog(raw)
		if err != nil && events != nil {
			t.Fatal("events beside an error")
		}
		for _, e := range events {
			if len(e.Description) > 4*200+3 {
				t.Fatalf("a description of %d bytes", len(e.Description))
			}
		}
	})
}

package bmc

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/better-compute/better-compute/proto"
)

// states is a Power that reports a sequence of states, then the last one forever.
type states struct {
	seq   []proto.PowerState
	err   error
	reads int
}

func (s *states) GetPower(context.Context) (proto.PowerState, error) {
	i := min(s.reads, len(s.seq)-1)
	s.reads++
	return s.seq[i], s.err
}

func (s *states) SetPower(context.Context, proto.PowerAction) error { return nil }

func TestWaitPower(t *testing.T) {
	timing := Timing{Timeout: 100 * time.Millisecond, Interval: time.Millisecond}
	cases := map[string]struct {
		p     *states
		code  proto.Code
		text  string
		reads int
	}{
		"at once":    {p: &states{seq: []proto.PowerState{proto.PowerStateOn}}, reads: 1},
		"later":      {p: &states{seq: []proto.PowerState{proto.PowerStateOff, proto.PowerStatePoweringOn, proto.PowerStateOn}}, reads: 3},
		"never":      {p: &states{seq: []proto.PowerState{proto.PowerStatePoweringOn}}, code: proto.Timeout, text: "the machine is still powering-on, not on"},
		"read fails": {p: &states{seq: []proto.PowerState{""}, err: proto.Errorf(proto.DriverError, "BMC busy")}, code: proto.DriverError, text: "BMC busy", reads: 1},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			err := WaitPower(context.Background(), tc.p, proto.PowerStateOn, timing)
			if tc.code == "" && err != nil || tc.code != "" && (proto.CodeOf(err) != tc.code || !strings.Contains(err.Error(), tc.text)) {
				t.Fatalf("got %v, want %s %q", err, tc.code, tc.text)
			}
			if tc.reads != 0 && tc.p.reads != tc.reads {
				t.Fatalf("%d reads, want %d", tc.p.reads, tc.reads)
			}
		})
	}
}

package qmp

import (
	"context"
	"strings"
	"testing"

	"github.com/better-compute/better-compute/bmc"
	"github.com/better-compute/better-compute/proto"
	"github.com/google/go-cmp/cmp"
)

// TestGracefulPower runs the actions that need a guest OS against a VM whose guest
// answers the power button.
func TestGracefulPower(t *testing.T) {
	cases := map[string]struct {
		status   string
		restarts bool
		refuse   map[string]string
		action   proto.PowerAction
		commands []string
		after    string
		code     proto.Code
		message  string
	}{
		"graceful-off":                  {status: "running", action: proto.PowerActionGracefulOff, commands: []string{"system_powerdown"}, after: "shutdown"},
		"graceful-restart":              {status: "running", action: proto.PowerActionGracefulRestart, commands: []string{"system_powerdown", "system_reset", "cont"}, after: "running"},
		"on after a guest shutdown":     {status: "shutdown", action: proto.PowerActionOn, commands: []string{"system_reset", "cont"}, after: "running"},
		"reset after a guest panic":     {status: "guest-panicked", action: proto.PowerActionReset, commands: []string{"system_reset", "cont"}, after: "running"},
		"graceful-off of a paused VM":   {status: "paused", action: proto.PowerActionGracefulOff, after: "paused"},
		"guest ignores the button":      {status: "running", restarts: true, action: proto.PowerActionGracefulOff, commands: []string{"system_powerdown"}, after: "running", code: proto.Timeout, message: "the machine is still on, not off"},
		"qemu refuses":                  {status: "running", refuse: map[string]string{"inject-nmi": "Injecting an NMI is not supported here"}, action: proto.PowerActionNMI, after: "running", code: proto.DriverError, message: "nmi: Injecting an NMI is not supported here"},
		"migrating is unknown, then on": {status: "inmigrate", action: proto.PowerActionOn, commands: []string{"system_reset", "cont"}, after: "running"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			f := newFakeVM(t, tc.status, tc.restarts)
			for k, v := range tc.refuse {
				f.refuse[k] = v
			}
			d, err := Open(context.Background(), bmc.Config{Address: f.socket, Options: map[string]string{"pollInterval": "5ms", "powerTimeout": "100ms"}}, bmc.Env{})
			if err != nil {
				t.Fatal(err)
			}
			err = d.SetPower(context.Background(), tc.action)
			if proto.CodeOf(err) != tc.code && !(err == nil && tc.code == "") || err != nil && !strings.Contains(err.Error(), tc.message) {
				t.Fatalf("got %v, want %s %q", err, tc.code, tc.message)
			}
			if diff := cmp.Diff(tc.commands, f.history()); diff != "" {
				t.Errorf("commands (-want +got):\n%s", diff)
			}
			if got := f.state(); got != tc.after {
				t.Errorf("run state %s, want %s", got, tc.after)
			}
		})
	}
}

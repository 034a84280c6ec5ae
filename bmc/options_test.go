package bmc

import (
	"testing"
	"time"

	"github.com/better-compute/better-compute/proto"
)

func TestOptions(t *testing.T) {
	opts := map[string]string{"powerTimeout": "90s", "auth": "basic"}
	if err := CheckOptions(opts, "auth", "powerTimeout"); err != nil {
		t.Fatal(err)
	}
	if err := CheckOptions(opts, "auth"); proto.AsError(err).Details.Path != "options.powerTimeout" {
		t.Fatalf("unknown option: %v", err)
	}
	timing, err := TimingOptions(opts)
	if err != nil || timing != (Timing{Timeout: 90 * time.Second, Interval: DefaultInterval}) {
		t.Fatalf("timing %+v, %v", timing, err)
	}
	if got, err := ChoiceOption(opts, "auth", "session", "session", "basic"); got != "basic" || err != nil {
		t.Fatalf("auth %q, %v", got, err)
	}
	if got, err := ChoiceOption(opts, "mode", "uefi", "uefi", "legacy"); got != "uefi" || err != nil {
		t.Fatalf("default mode %q, %v", got, err)
	}
	if _, err := ChoiceOption(opts, "auth", "session", "session"); proto.AsError(err).Details.Path != "options.auth" {
		t.Fatalf("bad choice: %v", err)
	}
	for _, bad := range []string{"0s", "-5s", "5", "soon"} {
		if _, err := DurationOption(map[string]string{"pollInterval": bad}, "pollInterval", time.Second); proto.AsError(err).Details.Path != "options.pollInterval" {
			t.Errorf("pollInterval %q: %v", bad, err)
		}
	}
}

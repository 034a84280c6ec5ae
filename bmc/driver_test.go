package bmc

import (
	"context"
	"strings"
	"testing"

	"github.com/better-compute/better-compute/proto"
)

func TestRegistryOpen(t *testing.T) {
	var opened Config
	r := Registry{
		"fake":  func(_ context.Context, cfg Config, _ Env) (Driver, error) { opened = cfg; return nil, nil },
		"other": func(context.Context, Config, Env) (Driver, error) { return nil, nil },
	}
	cfg := Config{Address: "10.0.0.5", CredentialRef: "secret://rack-1/bmc"}
	if _, err := r.Open(context.Background(), "fake", cfg, Env{}); err != nil || opened.Address != cfg.Address {
		t.Fatalf("open fake: %v, opened %+v", err, opened)
	}
	_, err := r.Open(context.Background(), "ipmi", cfg, Env{})
	e := proto.AsError(err)
	if e.Code != proto.InvalidConfig || e.Details.Path != "driver" || !strings.Contains(e.Message, "the drivers are fake, other") {
		t.Fatalf("open ipmi: %v", err)
	}
}

func TestParse(t *testing.T) {
	for _, a := range proto.PowerActions {
		if got, err := proto.ParsePowerAction(string(a)); err != nil || got != a {
			t.Errorf("proto.ParsePowerAction(%s) = %s, %v", a, got, err)
		}
	}
	for _, d := range proto.BootDevices {
		if got, err := proto.ParseBootDevice(string(d)); err != nil || got != d {
			t.Errorf("proto.ParseBootDevice(%s) = %s, %v", d, got, err)
		}
	}
	if _, err := proto.ParsePowerAction("On"); proto.CodeOf(err) != proto.InvalidConfig {
		t.Errorf("proto.ParsePowerAction(On): %v", err)
	}
	if _, err := proto.ParseBootDevice("usb"); proto.CodeOf(err) != proto.InvalidConfig {
		t.Errorf("proto.ParseBootDevice(usb): %v", err)
	}
}

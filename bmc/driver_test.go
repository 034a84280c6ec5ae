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

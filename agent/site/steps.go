package site

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"

	"github.com/better-compute/better-compute/agent/session"
	"github.com/better-compute/better-compute/bmc"
	"github.com/better-compute/better-compute/proto"
)

// The concerns of a machine's driver bindings that the site's steps open.
const (
	concernPower        = "power"
	concernManagement   = "management"
	concernVirtualMedia = "virtual-media"
)

// steps runs the relayed site steps against machines' BMCs.
type steps struct {
	drivers bmc.Registry
	env     bmc.Env
	entries *entries
}

// handlers are the session handlers of the site's relayed steps, by kind.
func (s *steps) handlers() map[string]session.Handler {
	return map[string]session.Handler{
		"power.getPower":           s.bind(concernPower, s.getPower),
		"power.setPower":           s.bind(concernPower, s.setPower),
		"management.setBootDevice": s.bind(concernManagement, s.setBootDevice),
		"inspect.oob":              s.bind(concernPower, s.inspect),
		"media.insert":             s.bind(concernVirtualMedia, s.insert),
		"media.eject":              s.bind(concernVirtualMedia, s.eject),
	}
}

// step is one site step, run with the machine's driver open.
type step func(ctx context.Context, cmd proto.SiteCommand, d bmc.Driver) (any, error)

// bind makes a session handler of fn: it decodes the SiteCommand, opens the driver the
// machine binds concern to, runs fn and closes the driver.
func (s *steps) bind(concern string, fn step) session.Handler {
	return func(ctx context.Context, payload json.RawMessage) (json.RawMessage, error) {
		var cmd proto.SiteCommand
		if err := decodeStrict(payload, &cmd); err != nil {
			return nil, proto.Errorf(proto.InvalidInput, "site command: %v", err)
		}
		b, ok := cmd.Drivers[concern]
		if !ok {
			return nil, proto.Errorf(proto.InvalidConfig, "node %s has no %s driver binding", cmd.Node, concern).WithPath("drivers." + concern)
		}
		var cfg bmc.Config
		if err := decodeStrict(b.Config, &cfg); err != nil {
			return nil, proto.Errorf(proto.InvalidConfig, "node %s: the %s binding's config: %v", cmd.Node, concern, err).WithPath("drivers." + concern + ".config")
		}
		env := s.env
		env.Log = env.Logger().With("node", cmd.Node)
		d, err := s.drivers.Open(ctx, b.Driver, cfg, env)
		if err != nil {
			return nil, err
		}
		defer d.Close()
		out, err := fn(ctx, cmd, d)
		if err != nil {
			return nil, err
		}
		return json.Marshal(out)
	}
}

func (s *steps) getPower(ctx context.Context, _ proto.SiteCommand, d bmc.Driver) (any, error) {
	state, err := d.GetPower(ctx)
	return map[string]bmc.PowerState{"state": state}, err
}

func (s *steps) setPower(ctx context.Context, cmd proto.SiteCommand, d bmc.Driver) (any, error) {
	var in struct {
		Action string `json:"action"`
	}
	if err := decodeStrict(cmd.Input, &in); err != nil {
		return nil, proto.Errorf(proto.InvalidInput, "power.setPower: %v", err).WithPath("with")
	}
	action, err := bmc.ParsePowerAction(in.Action)
	if err != nil {
		return nil, err
	}
	if err := d.SetPower(ctx, action); err != nil {
		return nil, err
	}
	s.env.Logger().Info("power set", "node", cmd.Node, "action", string(action))
	return map[string]bmc.PowerAction{"action": action}, nil
}

// setBootDevice sets the boot device; cd on a machine whose boot entry is a sanboot (an
// ISO media.insert could not mount) sets pxe, so that the machine boots the ISO from the
// site cache.
func (s *steps) setBootDevice(ctx context.Context, cmd proto.SiteCommand, d bmc.Driver) (any, error) {
	var in struct {
		Device     string `json:"device"`
		Persistent bool   `json:"persistent"`
	}
	if err := decodeStrict(cmd.Input, &in); err != nil {
		return nil, proto.Errorf(proto.InvalidInput, "management.setBootDevice: %v", err).WithPath("with")
	}
	device, err := bmc.ParseBootDevice(in.Device)
	if err != nil {
		return nil, err
	}
	if device == bmc.BootCD && s.entries.kind(cmd.Node) == proto.BootSanboot {
		device = bmc.BootPXE
	}
	if err := d.SetBootDevice(ctx, device, in.Persistent); err != nil {
		return nil, err
	}
	s.env.Logger().Info("boot device set", "node", cmd.Node, "device", string(device), "persistent", in.Persistent)
	return map[string]any{"device": device, "persistent": in.Persistent}, nil
}

func (s *steps) inspect(ctx context.Context, _ proto.SiteCommand, d bmc.Driver) (any, error) {
	return d.Inspect(ctx)
}

// insert mounts the ISO on the BMC's virtual media. A BMC without virtual media answers
// UNSUPPORTED, which the registry turns into a sanboot entry for a catalog image.
func (s *steps) insert(ctx context.Context, cmd proto.SiteCommand, d bmc.Driver) (any, error) {
	var in proto.MediaInsert
	if err := decodeStrict(cmd.Input, &in); err != nil {
		return nil, proto.Errorf(proto.InvalidInput, "media.insert: %v", err).WithPath("with")
	}
	if err := d.Insert(ctx, in.URL); err != nil {
		return nil, err
	}
	s.env.Logger().Info("media inserted", slog.String("node", cmd.Node), slog.String("url", in.URL))
	return map[string]string{"mounted": in.URL}, nil
}

func (s *steps) eject(ctx context.Context, cmd proto.SiteCommand, d bmc.Driver) (any, error) {
	if err := d.Eject(ctx); err != nil {
		return nil, err
	}
	return map[string]bool{"ejected": true}, nil
}

// decodeStrict decodes one JSON value into v, refusing unknown fields; empty is {}.
func decodeStrict(data json.RawMessage, v any) error {
	if len(bytes.TrimSpace(data)) == 0 {
		data = json.RawMessage("{}")
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	return dec.Decode(v)
}

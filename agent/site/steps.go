package site

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"runtime/debug"
	"time"

	"github.com/better-compute/better-compute/agent/session"
	"github.com/better-compute/better-compute/bmc"
	"github.com/better-compute/better-compute/jsondoc"
	"github.com/better-compute/better-compute/proto"
)

// steps runs the relayed site steps against machines' BMCs.
type steps struct {
	drivers bmc.Registry
	env     bmc.Env
	entries *entries
	// holds says whether the site cache holds a digest verified from a source
	// (cache.Cache.Holds).
	holds func(digest, source string) bool
	// changed is called after a step changed the boot entries.
	changed func()
}

// handlers are the session handlers of the site's relayed steps, by kind.
func (s *steps) handlers() map[string]session.Handler {
	return map[string]session.Handler{
		proto.CommandGetPower:       s.bind(proto.CommandGetPower, s.getPower),
		proto.CommandSetPower:       s.bind(proto.CommandSetPower, s.setPower),
		proto.CommandSetBootDevice:  s.bind(proto.CommandSetBootDevice, s.setBootDevice),
		proto.CommandInspectOOB:     s.bind(proto.CommandInspectOOB, s.inspect),
		proto.CommandMediaInsert:    s.bind(proto.CommandMediaInsert, s.insert),
		proto.CommandMediaEject:     s.bind(proto.CommandMediaEject, s.eject),
		proto.CommandPrepareRamdisk: s.entryStep(s.prepareRamdisk),
		proto.CommandBootCleanUp:    s.entryStep(s.cleanUp),
	}
}

// entryStep makes a session handler of a step that changes only the boot entries.
func (s *steps) entryStep(fn func(cmd proto.SiteCommand) (any, error)) session.Handler {
	return func(_ context.Context, payload json.RawMessage) (json.RawMessage, error) {
		var cmd proto.SiteCommand
		if err := decodeStrict(jsondoc.Decoder{Name: "the site command"}, payload, &cmd); err != nil {
			return nil, err
		}
		out, err := fn(cmd)
		if err != nil {
			return nil, err
		}
		return proto.Marshal(out)
	}
}

// prepareRamdisk makes the machine's entry a ramdisk boot.
func (s *steps) prepareRamdisk(cmd proto.SiteCommand) (any, error) {
	var in proto.PrepareRamdisk
	if err := decodeStrict(jsondoc.Decoder{Name: "boot.prepareRamdisk's input", At: "input"}, cmd.Input, &in); err != nil {
		return nil, err
	}
	e := proto.BootEntry{Node: cmd.Node, MACs: in.MACs, ProductUUID: in.ProductUUID, Kind: proto.BootRamdisk,
		Ramdisk:    &proto.RamdiskBoot{Kernel: in.Kernel, Initrd: in.Initrd, Args: in.Args, Token: in.Token, Registry: in.Registry, Pins: in.Pins, Extras: in.Extras},
		SecureBoot: in.SecureBoot}
	if err := s.setEntry(cmd.Node, &e); err != nil {
		return nil, err
	}
	return proto.PrepareRamdiskResult{Kind: e.Kind, MACs: e.MACs}, nil
}

// cleanUp removes the machine's relayed entry; its standing entry, if any, applies again.
func (s *steps) cleanUp(cmd proto.SiteCommand) (any, error) {
	if err := s.setEntry(cmd.Node, nil); err != nil {
		return nil, err
	}
	return proto.BootCleanUpResult{Removed: true}, nil
}

// setEntry checks and sets (or, nil, removes) a machine's relayed entry.
func (s *steps) setEntry(node string, e *proto.BootEntry) error {
	if e != nil {
		if err := e.Check(); err != nil {
			return err
		}
	}
	if err := s.entries.setRelayed(node, e); err != nil {
		return err
	}
	s.changed()
	kind := "none"
	if e != nil {
		kind = string(e.Kind)
	}
	s.env.Logger().Info("boot entry set", "node", node, "kind", kind)
	return nil
}

// step is one site step, run with the machine's driver open.
type step func(ctx context.Context, cmd proto.SiteCommand, d bmc.Driver) (any, error)

// bind makes a session handler of fn: it decodes the SiteCommand, opens the driver the
// machine binds concern to with the credential the command carries, runs fn and closes
// the driver. The credential lives as long as the command: it is never written or logged.
// The command runs at most proto.MaxSiteCommandSeconds (its step's timeout, which the
// session applies, may end it sooner): a BMC that never answers, or a machine that never
// reaches the state asked for, gives back the command's slot, which every tenant of the
// site shares, as TIMEOUT.
func (s *steps) bind(kind string, fn step) session.Handler {
	concern := proto.SiteBMCConcerns[kind]
	return func(ctx context.Context, payload json.RawMessage) (json.RawMessage, error) {
		var cmd proto.SiteCommand
		if err := decodeStrict(jsondoc.Decoder{Name: "the site command"}, payload, &cmd); err != nil {
			return nil, err
		}
		b, ok := cmd.Drivers[concern]
		if !ok {
			return nil, proto.Errorf(proto.InvalidConfig, "node %s has no %s driver binding", cmd.Node, concern).WithPath("drivers." + concern)
		}
		ctx, cancel := context.WithTimeout(ctx, proto.MaxSiteCommandSeconds*time.Second)
		defer cancel()
		var cfg bmc.Config
		dec := jsondoc.Decoder{Name: "node " + cmd.Node + ": the " + concern + " binding's config", Code: proto.InvalidConfig, At: jsondoc.Path("drivers." + concern + ".config")}
		if err := decodeStrict(dec, b.Config, &cfg); err != nil {
			return nil, err
		}
		env := s.env
		env.Log = env.Logger().With("node", cmd.Node)
		// The credential the registry sent with this command, for this command only.
		env.Credentials = bmc.Attached{}
		if c := cmd.Credential; c != nil {
			env.Credentials = bmc.Attached{Ref: bmc.CredentialRef(c.Ref), Credential: bmc.NewCredential(c.Username, c.Password)}
		}
		out, err := s.drive(ctx, b.Driver, cfg, env, func(d bmc.Driver) (any, error) { return fn(ctx, cmd, d) })
		if err != nil {
			return nil, err
		}
		return proto.Marshal(out)
	}
}

// drive opens the driver called name, runs fn with it and closes it. A panic in any of
// them, a driver's library undone by what a BMC answered, fails this command with
// DRIVER_ERROR and is logged with its stack: it must not end the site agent, which
// answers every machine of the rack.
func (s *steps) drive(ctx context.Context, name string, cfg bmc.Config, env bmc.Env, fn func(bmc.Driver) (any, error)) (out any, err error) {
	defer func() {
		if r := recover(); r != nil {
			env.Logger().Error("BMC driver failed", "driver", name, "address", cfg.Address, "panic", fmt.Sprint(r), "stack", string(debug.Stack()))
			out, err = nil, proto.Errorf(proto.DriverError, "the %s driver failed on what the BMC at %s answered (%v): the site goes on; check the BMC's firmware, and report the site's log of it", name, cfg.Address, r)
		}
	}()
	d, err := s.drivers.Open(ctx, name, cfg, env)
	if err != nil {
		return nil, err
	}
	defer d.Close()
	return fn(d)
}

func (s *steps) getPower(ctx context.Context, _ proto.SiteCommand, d bmc.Driver) (any, error) {
	state, err := d.GetPower(ctx)
	return proto.GetPowerResult{State: state}, err
}

func (s *steps) setPower(ctx context.Context, cmd proto.SiteCommand, d bmc.Driver) (any, error) {
	var in proto.SetPower
	if err := decodeStrict(jsondoc.Decoder{Name: "power.setPower's with", At: "with"}, cmd.Input, &in); err != nil {
		return nil, err
	}
	action, err := proto.ParsePowerAction(string(in.Action))
	if err != nil {
		return nil, err
	}
	if err := d.SetPower(ctx, action); err != nil {
		return nil, err
	}
	s.env.Logger().Info("power set", "node", cmd.Node, "action", string(action))
	return proto.SetPower{Action: action}, nil
}

// setBootDevice sets the boot device; cd on a machine whose boot entry is a sanboot (an
// ISO media.insert could not mount) sets pxe, so that the machine boots the ISO from the
// site cache, and disk turns a machine's relayed entry into a disk entry (iPXE exits).
func (s *steps) setBootDevice(ctx context.Context, cmd proto.SiteCommand, d bmc.Driver) (any, error) {
	var in proto.SetBootDevice
	if err := decodeStrict(jsondoc.Decoder{Name: "management.setBootDevice's with", At: "with"}, cmd.Input, &in); err != nil {
		return nil, err
	}
	device, err := proto.ParseBootDevice(string(in.Device))
	if err != nil {
		return nil, err
	}
	if device == proto.BootDeviceCD && s.entries.kind(cmd.Node) == proto.BootSanboot {
		device = proto.BootDevicePXE
	}
	if err := d.SetBootDevice(ctx, device, in.Persistent); err != nil {
		return nil, err
	}
	if device == proto.BootDeviceDisk && s.entries.relayedKind(cmd.Node) != "" {
		// A machine that network-boots again all the same (a one-time device a guest's
		// own reboot uses once more) is sent on to its disk.
		macs, uuid, secure := s.entries.identity(cmd.Node)
		if err := s.setEntry(cmd.Node, &proto.BootEntry{Node: cmd.Node, MACs: macs, ProductUUID: uuid, Kind: proto.BootDisk, SecureBoot: secure}); err != nil {
			return nil, err
		}
	}
	s.env.Logger().Info("boot device set", "node", cmd.Node, "device", string(device), "persistent", in.Persistent)
	return proto.SetBootDevice{Device: device, Persistent: in.Persistent}, nil
}

func (s *steps) inspect(ctx context.Context, _ proto.SiteCommand, d bmc.Driver) (any, error) {
	return d.Inspect(ctx)
}

// insert mounts the ISO on the BMC's virtual media. A BMC without virtual media
// (UNSUPPORTED) boots a catalog image, one with a digest, by iPXE sanboot from the site
// cache instead, when the cache holds the digest verified from the image's own source
// (another tenant's image of the digest gets no copy its source never served): the
// machine's entry becomes a sanboot of that digest, and a later setBootDevice cd sets
// pxe.
func (s *steps) insert(ctx context.Context, cmd proto.SiteCommand, d bmc.Driver) (any, error) {
	var in proto.MediaInsert
	if err := decodeStrict(jsondoc.Decoder{Name: "media.insert's with", At: "with"}, cmd.Input, &in); err != nil {
		return nil, err
	}
	err := d.Insert(ctx, in.URL)
	if proto.CodeOf(err) == proto.Unsupported && in.Digest != "" {
		macs, uuid := in.MACs, in.ProductUUID
		knownMACs, knownUUID, secure := s.entries.identity(cmd.Node)
		if len(macs) == 0 {
			macs, uuid = knownMACs, knownUUID
		}
		if len(macs) == 0 {
			return nil, proto.Errorf(proto.Unsupported, "node %s: the BMC has no virtual media, and and no MAC is known to boot the ISO by sanboot from the site cache", cmd.Node)
		}
		if !s.holds(in.Digest, in.URL) {
			return nil, proto.Errorf(proto.Unsupported, "node %s: the BMC has no virtual media, and the site cache does not hold sha256:%s from %s to boot it by sanboot: pre-warm the image at the site", cmd.Node, in.Digest, in.URL)
		}
		e := proto.BootEntry{Node: cmd.Node, MACs: macs, ProductUUID: uuid, Kind: proto.BootSanboot, Sanboot: &proto.Sanboot{Image: in.Digest}, SecureBoot: secure}
		if err := s.setEntry(cmd.Node, &e); err != nil {
			return nil, err
		}
		return proto.MediaInsertResult{Sanboot: in.Digest}, nil
	}
	if err != nil {
		return nil, err
	}
	s.env.Logger().Info("media inserted", slog.String("node", cmd.Node), slog.String("url", in.URL))
	return proto.MediaInsertResult{Mounted: in.URL}, nil
}

// eject ejects the virtual media, or removes the sanboot entry that stands in for it.
func (s *steps) eject(ctx context.Context, cmd proto.SiteCommand, d bmc.Driver) (any, error) {
	if s.entries.kind(cmd.Node) == proto.BootSanboot {
		if err := s.setEntry(cmd.Node, nil); err != nil {
			return nil, err
		}
		return proto.MediaEjectResult{Ejected: true}, nil
	}
	if err := d.Eject(ctx); err != nil {
		return nil, err
	}
	return proto.MediaEjectResult{Ejected: true}, nil
}

// decodeStrict decodes one JSON value into v with d; empty is {}.
func decodeStrict(d jsondoc.Decoder, data json.RawMessage, v any) error {
	if len(bytes.TrimSpace(data)) == 0 {
		data = json.RawMessage("{}")
	}
	return d.Decode(data, v)
}

package metal

import (
	"encoding/json"
	"errors"
	"io/fs"
	"maps"
	"os"
	"slices"

	"github.com/better-compute/better-compute/jsondoc"
	"github.com/better-compute/better-compute/proto"
	"github.com/better-compute/better-compute/registry/store"
)

// concerns are the jobs a driver can be bound to.
var concerns = []string{"power", "management", "virtual-media", "boot", "deploy", "inspect"}

// bmcConcerns are the concerns the BMC given at enrollment binds.
var bmcConcerns = []string{"power", "management", "virtual-media"}

// HardwareProfile is the driver choices a kind of machine shares.
type HardwareProfile struct {
	Drivers map[string]Binding `json:"drivers"`
}

// Binding is a driver bound to a concern: written as its name, or as
// {"driver": name, "config": {...}}.
type Binding store.DriverBinding

// UnmarshalJSON reads a driver name or {driver, config}, refusing other fields.
func (b *Binding) UnmarshalJSON(data []byte) error {
	if len(data) > 0 && data[0] == '"' {
		*b = Binding{}
		return json.Unmarshal(data, &b.Driver)
	}
	var full struct {
		Driver string          `json:"driver"`
		Config json.RawMessage `json:"config"`
	}
	if err := (jsondoc.Decoder{Name: "the binding"}).Decode(data, &full); err != nil {
		return err
	}
	*b = Binding{Driver: full.Driver, Config: full.Config}
	return nil
}

// ShapeJSON checks a binding's shape before it decodes (jsondoc.Shaper), so that a
// malformed one is refused at its path: a driver name, or an object of a driver name and
// a config.
func (Binding) ShapeJSON(r *jsondoc.Report, v *jsondoc.Value, p jsondoc.Path) {
	switch v.Kind {
	case jsondoc.String:
	case jsondoc.Object:
		r.Fields(v, p, map[string]jsondoc.Check{
			"driver": func(v *jsondoc.Value, p jsondoc.Path) { r.String(v, p) },
			"config": func(*jsondoc.Value, jsondoc.Path) {}, // an object, checked with the binding (checkBindings)
		})
	default:
		r.Add(v, p, `must be a driver's name or {"driver", "config"}, not %s`, v.Kind)
	}
}

// HardwareProfiles are the hardware profiles a registry knows, by name.
type HardwareProfiles map[string]HardwareProfile

// hardwareFile is the hardware profiles file, version 1.
type hardwareFile struct {
	Version          int              `json:"version"`
	HardwareProfiles HardwareProfiles `json:"hardwareProfiles"`
}

// LoadHardwareProfiles reads a hardware profiles file:
//
//	{"version": 1, "hardwareProfiles": {"gpu-redfish": {"drivers": {"power": "redfish", "boot": "ipxe"}}}}
//
// Unknown fields, an unknown concern and a malformed driver name are INVALID_CONFIG with
// the path of the offending field. A file it cannot read (missing, a directory, not
// allowed) is INVALID_CONFIG at jsondoc.WholeFile naming it.
func LoadHardwareProfiles(path string) (HardwareProfiles, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		reason := err
		if pe, ok := errors.AsType[*fs.PathError](err); ok {
			reason = pe.Err // its path is path, named already
		}
		return nil, proto.Errorf(proto.InvalidConfig, "hardware profiles %s: cannot read it: %v: give the registry a hardware profiles file it can read "+
			"(serve --hardware-profiles FILE, else DATA_DIR/hardware-profiles.json; docs/nodes.md#hardware-profiles)", path, reason).WithPath(string(jsondoc.WholeFile))
	}
	hp, err := parseHardwareProfiles(jsondoc.Decoder{Name: path, File: true, Code: proto.InvalidConfig}, data)
	if err != nil {
		return nil, err
	}
	return hp, nil
}

// parseHardwareProfiles reads the text of a hardware profiles file with d, which names
// it: a problem is INVALID_CONFIG with the path of the offending field ("." when the file
// is not one JSON object), and the file's name (and where in it, when the text does not
// decode).
func parseHardwareProfiles(d jsondoc.Decoder, data []byte) (HardwareProfiles, error) {
	var f hardwareFile
	if err := d.Decode(data, &f); err != nil {
		return nil, err
	}
	hp, err := checkHardwareFile(f)
	if err != nil {
		e := proto.AsError(err)
		return nil, proto.Errorf(proto.InvalidConfig, "hardware profiles %s: %s", d.Name, e.Message).WithPath(e.Details.Path)
	}
	return hp, nil
}

// checkHardwareFile checks a decoded hardware profiles file.
func checkHardwareFile(f hardwareFile) (HardwareProfiles, error) {
	if f.Version != 1 {
		return nil, proto.Errorf(proto.InvalidConfig, "version %d; this registry reads version 1", f.Version).WithPath("version")
	}
	for _, name := range slices.Sorted(maps.Keys(f.HardwareProfiles)) {
		p := "hardwareProfiles." + name
		if !proto.IsDriverName(name) {
			return nil, proto.Errorf(proto.InvalidConfig, "hardware profile name %q: 1 to 63 of a-z, 0-9 and -, starting with a letter or digit", name).WithPath(p)
		}
		if err := checkBindings(f.HardwareProfiles[name].Drivers, p+".drivers", true); err != nil {
			return nil, proto.AsError(err).WithCode(proto.InvalidConfig)
		}
	}
	return f.HardwareProfiles, nil
}

// MaxDriverConfig bounds a driver's config as the registry writes it (a BMC concern's
// laid over its BMC's address, overlay), where a key's line separators (U+2028, U+2029)
// take six bytes each, twice what a request spends on them. The bindings travel in the
// node's NodeSpec and in every site command for it, each one agent frame
// (proto.MaxFrame, 4 MiB): without a bound, an enrollment of 2 MiB made a NodeSpec no
// frame carries. A config holds a driver's options (a TLS pin, a wait), a few hundred
// bytes; all six concerns at the bound take 384 KiB.
const MaxDriverConfig = 64 << 10

// checkBindings refuses an unknown concern, a malformed driver name, a config that is
// not an object, one larger than MaxDriverConfig as written, or one that names a BMC
// address or credential (the BMC given at enrollment binds those, see bmcFields), or one
// that waits longer than a site runs one command (proto.LongWait), as INVALID_INPUT at
// path.concern (path.concern.config for its size); unless
// platform (a hardware profile, a root-tenant credential's enrollment), a config that
// names a file of the site host (proto.SiteHostFile) is FORBIDDEN at the option's path.
func checkBindings(bindings map[string]Binding, path string, platform bool) error {
	for _, c := range slices.Sorted(maps.Keys(bindings)) {
		b, p := bindings[c], path+"."+c
		config, isObject := object(b.Config)
		written := len(mustJSON(config))
		switch {
		case !slices.Contains(concerns, c):
			return proto.Errorf(proto.InvalidInput, "unknown concern %q; the concerns are %v", c, concerns).WithPath(p)
		case !proto.IsDriverName(b.Driver):
			return proto.Errorf(proto.InvalidInput, "%q is not a driver name: 1 to 63 of a-z, 0-9 and -, starting with a letter or digit", b.Driver).WithPath(p)
		case len(b.Config) > 0 && !isObject:
			return proto.Errorf(proto.InvalidInput, "a driver's config is a JSON object").WithPath(p + ".config")
		case written > MaxDriverConfig:
			return proto.Errorf(proto.InvalidInput, "a driver's config takes %d bytes as written, more than the %d it may: name its options only", written, MaxDriverConfig).WithPath(p + ".config")
		}
		for _, f := range bmcFields {
			if _, ok := config[f]; ok {
				return proto.Errorf(proto.InvalidInput, "a driver's config names no BMC %s: the machine's BMC (bmc.address, bmc.credentialRef at enrollment) binds it", f).WithPath(p + ".config." + f)
			}
		}
		if f := proto.LongWait(b.Config); f != "" {
			return proto.Errorf(proto.InvalidInput, "powerTimeout is at most %s, as long as a site runs one command: name a shorter wait", proto.MaxPowerTimeout).WithPath(p + ".config." + f)
		}
		if f := proto.SiteHostFile(b.Config); f != "" && !platform {
			return proto.Errorf(proto.Forbidden, "a driver's config names no file of the site host (%s): only the platform does, in a hardware profile; trust the BMC by its key with options.tlsPin", f).
				WithPath(p + ".config." + f).WithReason(proto.ReasonSiteHostFile)
		}
	}
	return nil
}

// object decodes a JSON object, false when raw is not one.
func object(raw json.RawMessage) (map[string]json.RawMessage, bool) {
	var m map[string]json.RawMessage
	return m, json.Unmarshal(raw, &m) == nil && m != nil
}

// lookup returns the named hardware profile; "" is none.
func (hp HardwareProfiles) lookup(name string) (*HardwareProfile, error) {
	if name == "" {
		return nil, nil
	}
	p, ok := hp[name]
	if !ok {
		known := slices.Sorted(maps.Keys(hp))
		return nil, proto.Errorf(proto.InvalidInput, "unknown hardware profile %q; this registry knows %v (serve --hardware-profiles)", name, known)
	}
	return &p, nil
}

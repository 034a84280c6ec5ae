package metal

import (
	"encoding/json"
	"maps"
	"slices"

	"github.com/better-compute/better-compute/proto"
	"github.com/better-compute/better-compute/registry/profile"
	"github.com/better-compute/better-compute/registry/store"
)

// resolveDriverBindings builds a node's driver bindings in three layers:
//
//  1. The BMC binds power, management and virtual-media to its driver, with its address
//     and credential reference as config.
//  2. The hardware profile (nil for none) overrides per concern.
//  3. The node's own overrides win.
//
// A later layer's binding replaces the concern's driver and config, except that a BMC
// concern keeps the BMC's address and credential reference, laid over the config it is
// given: they belong to the machine whatever driver speaks to it, and its credential is
// sent to its address only.
func resolveDriverBindings(bmc store.BMC, hw *HardwareProfile, overrides map[string]Binding) map[string]store.DriverBinding {
	out := map[string]store.DriverBinding{}
	for _, c := range bmcConcerns {
		out[c] = store.DriverBinding{Driver: bmc.Driver, Config: mustJSON(bmcConfig(bmc))}
	}
	if hw != nil {
		layerBindings(out, bmc, hw.Drivers, false)
	}
	layerBindings(out, bmc, overrides, false)
	return out
}

// bmcConfig is what a BMC binds in the config of its concerns: its address and
// credential reference.
func bmcConfig(bmc store.BMC) map[string]string {
	c := map[string]string{"address": bmc.Address}
	if bmc.CredentialRef != "" {
		c["credentialRef"] = bmc.CredentialRef
	}
	return c
}

// layerBindings lays bindings over out, concern by concern, a BMC concern keeping bmc's
// address and credential reference, and with keepTrust the trust options
// (proto.BMCTrustOptions) out binds it with.
func layerBindings(out map[string]store.DriverBinding, bmc store.BMC, bindings map[string]Binding, keepTrust bool) {
	for _, c := range slices.Sorted(maps.Keys(bindings)) {
		b := bindings[c]
		if slices.Contains(bmcConcerns, c) {
			var trust map[string]json.RawMessage
			if keepTrust {
				trust = trustOptions(out[c].Config)
			}
			b.Config = overlay(bmcConfig(bmc), b.Config, trust)
		}
		out[c] = store.DriverBinding(b)
	}
}

// CommandDrivers are the driver bindings a site command for node carries, read in tx. A
// command that is the operation a step of the run names itself (its kind is the step's
// use) takes the run's profile's drivers over the node's, concern by concern; any other
// command (metal.ensureRamdisk's own, or one no run sent: run is empty) the node's.
// Either way a BMC concern keeps the address and credential reference the node's BMC
// bound: a profile never names them. A BMC the platform bound keeps its trust options
// too (checkPlatformTrust).
func CommandDrivers(tx *store.Tx, node store.Node, run store.Run, step, kind string) (map[string]proto.DriverBinding, error) {
	out := maps.Clone(node.Drivers)
	if step == kind && run.ID != "" {
		doc, err := tx.RunDocument(run)
		if err != nil {
			return nil, err
		}
		p, err := profile.Define(doc)
		if err != nil {
			return nil, proto.Errorf(proto.Internal, "workflow %s: its profile no longer defines: %v", run.ID, err)
		}
		if bindings := profileBindings(p); len(bindings) > 0 {
			if err := checkPlatformTrust(node, bindings); err != nil {
				return nil, err
			}
			if out == nil {
				out = map[string]store.DriverBinding{}
			}
			layerBindings(out, node.BMC, bindings, node.PlatformBMC)
		}
	}
	return protoBindings(out), nil
}

// profileBindings are a profile's drivers as bindings.
func profileBindings(p *profile.Profile) map[string]Binding {
	bindings := map[string]Binding{}
	for c, d := range p.Drivers() {
		bindings[c] = Binding{Driver: d.Driver, Config: d.Config}
	}
	return bindings
}

// checkPlatformTrust refuses, on a node whose BMC the platform bound with its own
// credential (PlatformBMC), a profile's binding of a BMC concern that names a trust
// option (proto.BMCTrustOptions), whoever's the profile: FORBIDDEN at the option. The
// platform's login goes only to the BMC the platform trusts (its hardware profile, its
// enrollment's overrides); a tenant able to answer at the BMC's address would otherwise
// trust a TLS session of its own.
func checkPlatformTrust(node store.Node, bindings map[string]Binding) error {
	if !node.PlatformBMC {
		return nil
	}
	for _, c := range slices.Sorted(maps.Keys(bindings)) {
		if !slices.Contains(bmcConcerns, c) {
			continue
		}
		for _, o := range slices.Sorted(maps.Keys(trustOptions(bindings[c].Config))) {
			return proto.Errorf(proto.Forbidden, "node %s's BMC is bound by the platform with its credential, and trusted as the platform set it: a profile's %s binding names no options.%s", node.ID, c, o).
				WithPath("drivers." + c + ".config.options." + o).WithReason(proto.ReasonPlatformBMC)
		}
	}
	return nil
}

// trustOptions are the trust options (proto.BMCTrustOptions) a driver config names, by
// name; nil for none.
func trustOptions(config json.RawMessage) map[string]json.RawMessage {
	m, _ := object(config)
	options, _ := object(m["options"])
	var out map[string]json.RawMessage
	for _, o := range proto.BMCTrustOptions {
		if v, ok := options[o]; ok {
			if out == nil {
				out = map[string]json.RawMessage{}
			}
			out[o] = v
		}
	}
	return out
}

// withoutTrust is config without its trust options (proto.BMCTrustOptions).
func withoutTrust(config json.RawMessage) json.RawMessage {
	m, _ := object(config)
	options, _ := object(m["options"])
	named := len(options)
	for _, o := range proto.BMCTrustOptions {
		delete(options, o)
	}
	if len(options) == named {
		return config
	}
	m["options"] = mustJSON(options)
	return mustJSON(m)
}

// protoBindings are bindings as NodeSpecs and site commands carry them; nil for none.
func protoBindings(bindings map[string]store.DriverBinding) map[string]proto.DriverBinding {
	var out map[string]proto.DriverBinding
	for concern, b := range bindings {
		if out == nil {
			out = map[string]proto.DriverBinding{}
		}
		out[concern] = proto.DriverBinding{Driver: b.Driver, Config: b.Config}
	}
	return out
}

// bmcFields are the fields of a BMC concern's config that only the BMC binds.
var bmcFields = []string{"address", "credentialRef"}

// overlay lays base's fields over config's, and trust (trust options, nil for none) over
// its options.
func overlay(base map[string]string, config json.RawMessage, trust map[string]json.RawMessage) json.RawMessage {
	m, _ := object(config)
	if m == nil {
		m = map[string]json.RawMessage{}
	}
	for _, f := range bmcFields {
		delete(m, f)
	}
	for k, v := range base {
		m[k] = mustJSON(v)
	}
	if len(trust) > 0 {
		options, _ := object(m["options"])
		if options == nil {
			options = map[string]json.RawMessage{}
		}
		maps.Copy(options, trust)
		m["options"] = mustJSON(options)
	}
	return mustJSON(m)
}

func mustJSON(v any) json.RawMessage {
	b, err := proto.Marshal(v)
	if err != nil {
		panic("encoding a driver config: " + err.Error())
	}
	return b
}

package metal

import (
	"encoding/json"
	"maps"
	"slices"

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
	bmcConfig := map[string]string{"address": bmc.Address}
	if bmc.CredentialRef != "" {
		bmcConfig["credentialRef"] = bmc.CredentialRef
	}
	out := map[string]store.DriverBinding{}
	for _, c := range bmcConcerns {
		out[c] = store.DriverBinding{Driver: bmc.Driver, Config: mustJSON(bmcConfig)}
	}
	layer := func(bindings map[string]Binding) {
		for _, c := range slices.Sorted(maps.Keys(bindings)) {
			b := bindings[c]
			if slices.Contains(bmcConcerns, c) {
				b.Config = overlay(bmcConfig, b.Config)
			}
			out[c] = store.DriverBinding(b)
		}
	}
	if hw != nil {
		layer(hw.Drivers)
	}
	layer(overrides)
	return out
}

// bmcFields are the fields of a BMC concern's config that only the BMC binds.
var bmcFields = []string{"address", "credentialRef"}

// overlay lays base's fields over config's.
func overlay(base map[string]string, config json.RawMessage) json.RawMessage {
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
	return mustJSON(m)
}

func mustJSON(v any) json.RawMessage {
	b, err := json.Marshal(v)
	if err != nil {
		panic("encoding a driver config: " + err.Error())
	}
	return b
}

package hostunit

import (
	"encoding/json"
	"slices"
	"strings"

	"github.com/better-compute/better-compute/jsondoc"
	"github.com/better-compute/better-compute/labelexpr"
	"github.com/better-compute/better-compute/proto"
)

// The unit names.
const (
	UnitKernelModules    = "kernel-modules"
	UnitSysctl           = "sysctl"
	UnitHugepages        = "hugepages"
	UnitCPU              = "cpu"
	UnitIOMMU            = "iommu"
	UnitNvidiaDriver     = "nvidia-driver"
	UnitFabricManager    = "fabric-manager"
	UnitGPUSettings      = "gpu-settings"
	UnitMIGLayout        = "mig-layout"
	UnitGPUSharing       = "gpu-sharing"
	UnitContainerToolkit = "container-toolkit"
	UnitK8sJoin          = "k8s-join"
)

// units lists every unit in the order bcd applies them.
var units = []unit{
	{UnitKernelModules, checkKernelModules, func() Settings { return &KernelModules{} }},
	{UnitSysctl, checkSysctl, func() Settings { return &Sysctl{} }},
	{UnitHugepages, checkHugepages, func() Settings { return &Hugepages{} }},
	{UnitCPU, checkCPU, func() Settings { return &CPU{} }},
	{UnitIOMMU, checkIOMMU, func() Settings { return &IOMMU{Passthrough: true} }},
	{UnitNvidiaDriver, checkNvidiaDriver, func() Settings { return &NvidiaDriver{} }},
	{UnitFabricManager, checkFabricManager, func() Settings { return &FabricManager{} }},
	{UnitGPUSettings, checkGPUSettings, func() Settings { return &GPUSettings{} }},
	{UnitMIGLayout, checkMIGLayout, func() Settings { return &MIGLayout{} }},
	{UnitGPUSharing, checkGPUSharing, func() Settings { return &GPUSharing{} }},
	{UnitContainerToolkit, checkContainerToolkit, func() Settings { return &ContainerToolkit{CDI: true} }},
	{UnitK8sJoin, checkK8sJoin, func() Settings { return &K8sJoin{} }},
}

type unit struct {
	name string
	// check walks the unit's settings.
	check func(c checker, v *jsondoc.Value, p jsondoc.Path)
	// settings returns the unit's typed settings holding its defaults. With the
	// applyDefaults of the settings that depend on other fields, this is the one place
	// defaults are set.
	settings func() Settings
}

func lookup(name string) (unit, bool) {
	i := slices.IndexFunc(units, func(u unit) bool { return u.name == name })
	if i < 0 {
		return unit{}, false
	}
	return units[i], true
}

// Order returns the unit names in the order bcd applies them.
func Order() []string {
	names := make([]string, len(units))
	for i, u := range units {
		names[i] = u.name
	}
	return names
}

// Known reports whether name is a unit this package defines.
func Known(name string) bool {
	_, ok := lookup(name)
	return ok
}

// Settings is the decoded settings of one unit.
type Settings interface {
	// Unit is the unit's name.
	Unit() string
	// Condition is the unit's when: the unit applies to nodes whose labels satisfy it.
	Condition() labelexpr.Expr
}

// Common holds what every unit takes.
type Common struct {
	When labelexpr.Expr `json:"when,omitzero"`
}

// Condition returns the unit's when.
func (c Common) Condition() labelexpr.Expr { return c.When }

// Limits of one unit's settings document, for Validate and Decode.
var limits = jsondoc.Limits{MaxBytes: 256 << 10, MaxDepth: 8}

// Check checks the settings v of the unit named unit, found at path p of a larger
// document, and records each problem in r with its path under p. An unknown unit is a
// problem at p.
func Check(r *jsondoc.Report, unit string, v *jsondoc.Value, p jsondoc.Path) {
	u, ok := lookup(unit)
	if !ok {
		r.Add(v, p, "unknown host-config unit %q; the units are %s", unit, strings.Join(Order(), ", "))
		return
	}
	u.check(checker{r}, v, p)
}

// Validate checks one unit's settings document and returns every problem, in document
// order, with paths relative to the unit ("branch", "options.nvidia"; "" is the settings
// object itself).
func Validate(unit string, raw []byte) []jsondoc.Problem {
	v, err := jsondoc.Parse(raw, limits)
	if err != nil {
		return []jsondoc.Problem{{Path: err.Path, Message: err.Error(), Offset: err.Offset}}
	}
	var r jsondoc.Report
	Check(&r, unit, v, "")
	return r.Problems()
}

// Decode checks one unit's settings document and decodes it into the unit's typed
// settings, with the defaults of fields left out. A problem is an INVALID_CONFIG
// *proto.Error naming the first offending field relative to the unit.
func Decode(unit string, raw []byte) (Settings, error) {
	if problems := Validate(unit, raw); len(problems) > 0 {
		first := problems[0]
		return nil, proto.Errorf(proto.InvalidConfig, "host-config unit %s: %s", unit, first.Message).WithPath(string(first.Path))
	}
	u, _ := lookup(unit)
	s := u.settings()
	if err := json.Unmarshal(raw, s); err != nil {
		return nil, proto.Errorf(proto.Internal, "decoding the checked unit %s: %w", unit, err)
	}
	if d, ok := s.(interface{ applyDefaults() }); ok {
		d.applyDefaults()
	}
	return s, nil
}

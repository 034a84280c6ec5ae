package profile

import (
	"slices"
	"time"

	"github.com/better-compute/better-compute/jsondoc"
	"github.com/better-compute/better-compute/proto"
)

// Places a step runs.
const (
	// Site: relayed to the site agent of the machine's rack (its BMC and boot server).
	Site = "site"
	// Ramdisk: relayed to the agent of the RAM disk the machine booted.
	Ramdisk = "ramdisk"
	// Node: relayed to the agent of the installed OS.
	Node = "node"
	// ControlPlane: run by the registry itself.
	ControlPlane = "control-plane"
)

var places = []string{Site, Ramdisk, Node, ControlPlane}

// stepSpec is one step of the catalog: where it can run, its input, its default timeout.
type stepSpec struct {
	name string
	// runs lists the places the step can run; the first is where it runs by default.
	runs    []string
	timeout time.Duration
	// inputs are the fields of the step's with, in the order the documentation gives them.
	inputs []input
	// exactlyOne names inputs of which exactly one must be set.
	exactlyOne []string
	// awaits reports whether the step, with the given with (nil when left out), can await
	// the machine's rejoin.
	awaits func(with *jsondoc.Value) bool
}

// input is one field of a step's with.
type input struct {
	name     string
	required bool
	// def is the value Render fills in when the field is left out, nil for none.
	def   any
	check func(w *walker, v *jsondoc.Value, p jsondoc.Path)
}

// The steps of the catalog.
var catalog = []stepSpec{
	{name: "power.getPower", runs: []string{Site}, timeout: 2 * time.Minute},
	{name: "power.setPower", runs: []string{Site}, timeout: 5 * time.Minute,
		inputs: []input{{name: "action", required: true, check: oneOf(proto.PowerActions...)}},
		awaits: func(with *jsondoc.Value) bool {
			action := with.Get("action")
			return action != nil && proto.PowerAction(action.Text).Boots()
		}},
	{name: "management.setBootDevice", runs: []string{Site}, timeout: 2 * time.Minute,
		inputs: []input{
			{name: "device", required: true, check: oneOf(proto.BootDevices...)},
			{name: "persistent", def: false, check: boolean},
		}},
	{name: "inspect.oob", runs: []string{Site}, timeout: 5 * time.Minute},
	{name: "media.insert", runs: []string{Site}, timeout: 30 * time.Minute,
		inputs: []input{
			{name: "url", check: httpsURL},
			{name: "fromStep", check: (*walker).fromStep},
			{name: "image", check: imageRef},
		},
		exactlyOne: []string{"url", "fromStep", "image"}},
	{name: "media.eject", runs: []string{Site}, timeout: 5 * time.Minute},
	{name: "boot.prepareRamdisk", runs: []string{Site}, timeout: 2 * time.Minute},
	{name: "boot.cleanUp", runs: []string{Site}, timeout: 2 * time.Minute},
	{name: "metal.ensureRamdisk", runs: []string{ControlPlane}, timeout: 20 * time.Minute},
	{name: "inventory.refresh", runs: []string{Ramdisk, Node}, timeout: 10 * time.Minute},
	{name: "diag.dcgm", runs: []string{Ramdisk, Node}, timeout: time.Hour,
		inputs: []input{{name: "level", def: 1, check: wholeIn(1, 4)}}},
	{name: "disk.wipe", runs: []string{Ramdisk}, timeout: 6 * time.Hour,
		inputs: []input{{name: "mode", def: proto.WipeQuick, check: oneOf(proto.WipeModes...)}}},
	{name: "deploy.deploy", runs: []string{Ramdisk}, timeout: time.Hour,
		inputs: []input{{name: "image", check: imageRef}}},
	{name: "boot.kexec", runs: []string{Ramdisk}, timeout: 15 * time.Minute,
		awaits: func(*jsondoc.Value) bool { return true }},
	{name: "userdata.render", runs: []string{ControlPlane}, timeout: 2 * time.Minute},
	{name: "wait.agentJoined", runs: []string{ControlPlane}, timeout: 15 * time.Minute,
		inputs: []input{{name: "role", required: true, check: oneOf(Node, Ramdisk, Site)}}},
	{name: "wait.generationObserved", runs: []string{ControlPlane}, timeout: 10 * time.Minute},
	{name: "metal.revokeIdentity", runs: []string{ControlPlane}, timeout: 5 * time.Minute},
}

// Names the rules across steps refer to.
const (
	stepDeploy        = "deploy.deploy"
	stepRender        = "userdata.render"
	stepEnsureRamdisk = "metal.ensureRamdisk"
	stepAgentJoined   = "wait.agentJoined"
	stepKexec         = "boot.kexec"
	inputImage        = "image"
	awaitRejoin       = "rejoin"
	onFailureFail     = "fail"
	onFailureContinue = "continue"
)

func lookupStep(name string) (*stepSpec, bool) {
	i := slices.IndexFunc(catalog, func(s stepSpec) bool { return s.name == name })
	if i < 0 {
		return nil, false
	}
	return &catalog[i], true
}

func stepNames() []string {
	names := make([]string, len(catalog))
	for i, s := range catalog {
		names[i] = s.name
	}
	return names
}

// oneOf checks that a value is one of the values of one of proto's enums.
func oneOf[T ~string](values ...T) func(*walker, *jsondoc.Value, jsondoc.Path) {
	return func(w *walker, v *jsondoc.Value, p jsondoc.Path) { w.r.Enum(v, p, texts(values)...) }
}

// texts is an enum's values as text.
func texts[T ~string](values []T) []string {
	out := make([]string, len(values))
	for i, v := range values {
		out[i] = string(v)
	}
	return out
}

func wholeIn(min, max int64) func(*walker, *jsondoc.Value, jsondoc.Path) {
	return func(w *walker, v *jsondoc.Value, p jsondoc.Path) { w.r.Whole(v, p, min, max) }
}

func boolean(w *walker, v *jsondoc.Value, p jsondoc.Path) { w.r.Bool(v, p) }

func httpsURL(w *walker, v *jsondoc.Value, p jsondoc.Path) {
	if s, ok := w.r.String(v, p); ok {
		if err := checkHTTPSURL(s); err != nil {
			w.r.Add(v, p, "%v", err)
		}
	}
}

func imageRef(w *walker, v *jsondoc.Value, p jsondoc.Path) {
	if s, ok := w.r.String(v, p); ok {
		if err := checkImageRef(s); err != nil {
			w.r.Add(v, p, "%v", err)
		}
	}
}

package hostunit

import (
	"regexp"
	"strconv"

	"github.com/better-compute/better-compute/jsondoc"
)

// MIGLayout partitions GPUs into Multi-Instance GPU instances. Exactly one of From and
// Layout is set.
type MIGLayout struct {
	Common
	// From "pool" takes the layout of the pool's policy.migLayout.
	From string `json:"from,omitempty"`
	// Layout maps "all" or a GPU index ("0" to "63") to the GPU instance profiles to
	// create on it, like ["3g.40gb", "2g.20gb", "1g.10gb"]. An index overrides "all" for
	// its GPU; an empty list turns MIG off on that GPU.
	Layout map[string][]string `json:"layout,omitempty"`
}

// Unit returns "mig-layout".
func (*MIGLayout) Unit() string { return UnitMIGLayout }

// Limits of the mig-layout unit.
const (
	maxGPUIndex = 63
	// migSlices is how many compute slices a MIG-capable GPU has.
	migSlices = 7
)

// migProfile is a GPU instance profile: compute slices, memory, and optionally the media
// extensions (+me).
var migProfile = regexp.MustCompile(`^([1-9][0-9]?)g\.([1-9][0-9]{0,3})gb(\+me)?$`)

func checkMIGLayout(c checker, v *jsondoc.Value, p jsondoc.Path) {
	if !c.fields(v, p, map[string]jsondoc.Check{
		"from": func(from *jsondoc.Value, fp jsondoc.Path) {
			if c.oneOfFromLayout(v, "from", from, fp) {
				c.Enum(from, fp, "pool")
			}
		},
		"layout": func(layout *jsondoc.Value, lp jsondoc.Path) {
			if c.oneOfFromLayout(v, "layout", layout, lp) {
				c.migLayout(layout, lp)
			}
		},
	}) {
		return
	}
	if v.Get("from") == nil && v.Get("layout") == nil {
		c.AddMissing(v, p, `set from: "pool" or a layout`)
	}
}

// oneOfFromLayout refuses the later of from and layout when both are set.
func (c checker) oneOfFromLayout(settings *jsondoc.Value, name string, v *jsondoc.Value, p jsondoc.Path) bool {
	other := map[string]string{"from": "layout", "layout": "from"}[name]
	if o := settings.Get(other); o != nil && o.Offset < v.Offset {
		c.Add(v, p, "%s is set already; set from or layout, not both", other)
		return false
	}
	return true
}

func (c checker) migLayout(v *jsondoc.Value, p jsondoc.Path) {
	gpus, ok := c.object(v, p, maxGPUIndex+2)
	if !ok {
		return
	}
	if len(gpus) == 0 {
		c.Add(v, p, `name "all" or GPU indices`)
		return
	}
	for _, gpu := range gpus {
		gp := p.Field(gpu.Key)
		if n, err := strconv.Atoi(gpu.Key); gpu.Key != "all" && (err != nil || n < 0 || n > maxGPUIndex || strconv.Itoa(n) != gpu.Key) {
			c.AddAt(gpu.KeyOffset, gp, `%q is not "all" or a GPU index from 0 to %d`, gpu.Key, maxGPUIndex)
			continue
		}
		items, ok := c.Array(gpu.Value, gp, migSlices)
		if !ok {
			continue
		}
		slices := 0
		for i, item := range items {
			s, ok := c.String(item, gp.Index(i))
			if !ok {
				continue
			}
			m := migProfile.FindStringSubmatch(s)
			if m == nil {
				c.Add(item, gp.Index(i), `%q is not a GPU instance profile like "1g.10gb" or "1g.10gb+me"`, s)
				continue
			}
			switch n, _ := strconv.Atoi(m[1]); n {
			case 1, 2, 3, 4, 7:
				slices += n
			default:
				c.Add(item, gp.Index(i), "%q: a GPU instance has 1, 2, 3, 4 or 7 compute slices", s)
			}
		}
		if slices > migSlices {
			c.Add(gpu.Value, gp, "the profiles take %d compute slices; a GPU has %d", slices, migSlices)
		}
	}
}

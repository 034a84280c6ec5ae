package hostunit

import (
	"strconv"

	"github.com/better-compute/better-compute/jsondoc"
)

// Hugepages reserves huge pages and sets transparent huge pages. A field left out is left
// as the host has it.
type Hugepages struct {
	Common
	// Pages2M and Pages1G are the machine-wide counts of 2 MiB and 1 GiB pages.
	Pages2M *int64 `json:"pages2m,omitempty"`
	Pages1G *int64 `json:"pages1g,omitempty"`
	// Transparent is the transparent huge page mode: always, madvise or never.
	Transparent string `json:"transparent,omitempty"`
	// PerNUMA sets counts per NUMA node, by node id. A page size set per node is not
	// also set machine-wide.
	PerNUMA map[int]NUMAPages `json:"perNuma,omitempty"`
}

// NUMAPages is the huge page counts of one NUMA node.
type NUMAPages struct {
	Pages2M *int64 `json:"pages2m,omitempty"`
	Pages1G *int64 `json:"pages1g,omitempty"`
}

// Unit returns "hugepages".
func (*Hugepages) Unit() string { return UnitHugepages }

// Limits of the hugepages unit: 32 TiB of either size, 1024 NUMA nodes.
const (
	maxPages2M  = 1 << 24
	maxPages1G  = 1 << 15
	maxNUMANode = 1023
)

func checkHugepages(c checker, v *jsondoc.Value, p jsondoc.Path) {
	c.fields(v, p, map[string]jsondoc.Check{
		"pages2m":     func(v *jsondoc.Value, p jsondoc.Path) { c.Whole(v, p, 0, maxPages2M) },
		"pages1g":     func(v *jsondoc.Value, p jsondoc.Path) { c.Whole(v, p, 0, maxPages1G) },
		"transparent": func(v *jsondoc.Value, p jsondoc.Path) { c.Enum(v, p, "always", "madvise", "never") },
		"perNuma": func(perNUMA *jsondoc.Value, p jsondoc.Path) {
			nodes, ok := c.object(perNUMA, p, maxNUMANode+1)
			if !ok {
				return
			}
			for _, node := range nodes {
				c.numaNode(v, node, p.Field(node.Key))
			}
		},
	})
}

// numaNode checks one node of perNuma; settings is the whole unit, to refuse a page size
// set both machine-wide and per node.
func (c checker) numaNode(settings *jsondoc.Value, node jsondoc.Member, p jsondoc.Path) {
	if !isNUMANode(node.Key) {
		c.AddAt(node.KeyOffset, p, "%q is not a NUMA node id (0 to %d)", node.Key, maxNUMANode)
		return
	}
	perSize := func(name string, max int64) jsondoc.Check {
		return func(v *jsondoc.Value, p jsondoc.Path) {
			if settings.Get(name) != nil {
				c.Add(v, p, "%s is set machine-wide too; set it either machine-wide or per NUMA node", name)
				return
			}
			c.Whole(v, p, 0, max)
		}
	}
	if c.Fields(node.Value, p, map[string]jsondoc.Check{
		"pages2m": perSize("pages2m", maxPages2M),
		"pages1g": perSize("pages1g", maxPages1G),
	}) && len(node.Value.Members) == 0 {
		c.Add(node.Value, p, "set pages2m or pages1g for the node, or leave it out")
	}
}

func isNUMANode(s string) bool {
	n, err := strconv.Atoi(s)
	return err == nil && n >= 0 && n <= maxNUMANode && strconv.Itoa(n) == s
}

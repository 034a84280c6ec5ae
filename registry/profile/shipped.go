package profile

import (
	"cmp"
	"embed"
	"fmt"
	"io/fs"
	"slices"
	"sync"
)

// ShippedTenant is the tenant shipped profiles are listed under. They are read-only and
// visible to every tenant.
const ShippedTenant = "builtin"

//go:embed shipped/*.json
var shippedFiles embed.FS

var shipped = sync.OnceValue(func() []*Profile {
	files, err := fs.Glob(shippedFiles, "shipped/*.json")
	if err != nil {
		panic(err)
	}
	var out []*Profile
	for _, name := range files {
		doc, err := shippedFiles.ReadFile(name)
		if err != nil {
			panic(err)
		}
		p, err := Define(doc)
		if err != nil {
			// The documents are part of the binary and tested: this is a build defect.
			panic(fmt.Sprintf("shipped profile %s: %v", name, err))
		}
		out = append(out, p)
	}
	slices.SortFunc(out, func(a, b *Profile) int {
		if c := cmp.Compare(a.id, b.id); c != 0 {
			return c
		}
		return cmp.Compare(a.version, b.version)
	})
	return out
})

// Shipped returns the profiles that ship: the metal lifecycle profiles, their variants for
// machines without an agent, and the remediation profiles, ordered by id and version.
func Shipped() []*Profile {
	return slices.Clone(shipped())
}

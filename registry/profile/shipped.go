package profile

import (
	"cmp"
	"embed"
	"fmt"
	"io/fs"
	"path"
	"slices"
	"strings"
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
		if want := fmt.Sprintf("%s@%d.json", p.id, p.version); path.Base(name) != want {
			panic(fmt.Sprintf("shipped profile %s holds %s@%d: name its file %s", name, p.id, p.version, want))
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

// shippedIDs are the ids of the shipped profiles, read from their files' names
// (ID@VERSION.json, which shipped holds to the documents): the checks Define runs on a
// shipped document too (isShippedID) cannot wait for shipped's definitions.
var shippedIDs = sync.OnceValue(func() []string {
	files, err := fs.Glob(shippedFiles, "shipped/*.json")
	if err != nil {
		panic(err)
	}
	var ids []string
	for _, name := range files {
		id, _, _ := strings.Cut(path.Base(name), "@")
		ids = append(ids, id)
	}
	return ids
})

// isShippedID reports whether id is the id of a shipped profile. The registry reserves
// such an id: no tenant creates a profile of it (registry/api's profiles.create).
func isShippedID(id string) bool { return slices.Contains(shippedIDs(), id) }

// Shipped returns the profiles that ship: the metal lifecycle profiles, their variants for
// machines without an agent, and the remediation profiles, ordered by id and version.
func Shipped() []*Profile {
	return slices.Clone(shipped())
}

package api

import (
	"time"

	"github.com/better-compute/better-compute/registry/store"
)

// viewsOf is rows as the API shows them, each through view: an empty list is [], never
// null. The API's answers are its own types, never the store's rows, so renaming a
// storage field never changes the wire (testdata/wire holds each answer's JSON).
func viewsOf[R, V any](rows []R, view func(R) V) []V {
	out := make([]V, 0, len(rows))
	for _, r := range rows {
		out = append(out, view(r))
	}
	return out
}

// Tenant is a tenant as the API shows it.
type Tenant struct {
	ID        string    `json:"id"`
	CreatedAt time.Time `json:"createdAt"`
}

func tenantOf(t store.Tenant) Tenant { return Tenant(t) }

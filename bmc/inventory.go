package bmc

import (
	"context"

	"github.com/better-compute/better-compute/proto"
)

// Inspection reads a machine's hardware inventory out of band, for inspect.oob (its
// result, proto.OOBInventory).
type Inspection interface {
	// Inspect returns what the BMC knows of the machine. Fields the BMC does not report
	// are left empty; a part the BMC links but fails to serve is named in Unread, and
	// the rest is returned all the same.
	Inspect(ctx context.Context) (proto.OOBInventory, error)
}

// Package drivers is the table of BMC drivers bcd site opens bindings with, by the
// names hardware profiles and enrolments give them.
package drivers

import (
	"github.com/better-compute/better-compute/bmc"
	"github.com/better-compute/better-compute/bmc/qmp"
	"github.com/better-compute/better-compute/bmc/redfish"
)

// Registry returns every driver: redfish and qmp.
func Registry() bmc.Registry {
	return bmc.Registry{
		redfish.Name: redfish.Open,
		qmp.Name:     qmp.Open,
	}
}

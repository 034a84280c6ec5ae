package hostconverge

import (
	"github.com/better-compute/better-compute/proto"
)

// Status is the outcome of one unit in one pass.
type Status string

// The statuses, from the best to the worst. A pass reports one per unit of the spec.
const (
	// Converged: the host was as the unit wants it; nothing was changed.
	Converged Status = "converged"
	// Changed: the unit corrected the host, and it is now as the unit wants it.
	Changed Status = "changed"
	// Skipped: the unit's when does not hold for the node's labels; nothing was read or
	// changed.
	Skipped Status = "skipped"
	// RebootRequired: the unit's state is written (corrections may have been made) and
	// takes effect when the host reboots.
	RebootRequired Status = "rebootRequired"
	// Failed: the unit could not bring the host to its state; Code and Terminal say why
	// and whether bcd's next pass may succeed on its own.
	Failed Status = "failed"
)

// UnitResult is what one unit did in one pass.
type UnitResult struct {
	// Unit is the unit's name.
	Unit   string `json:"unit"`
	Status Status `json:"status"`
	// Message says what the status means here: the failure, or why a reboot is due.
	Message string `json:"message"`
	// Corrections lists what the unit changed, in order ("set vm.swappiness 60 -> 10").
	// A failed unit lists what it changed before it failed.
	Corrections []string `json:"corrections,omitempty"`
	// Code classifies a failure.
	Code proto.Code `json:"code,omitempty"`
	// Terminal marks a failure that a later pass cannot cure without a new spec (or a
	// change of the host by hand): invalid settings, a unit bcd does not know, a host it
	// does not support.
	Terminal bool `json:"terminal,omitempty"`
}

// Applied reports whether a pass applied its spec: no unit failed. Skipped and
// rebootRequired units count as applied; a reboot is the operator's to schedule.
func Applied(results []UnitResult) bool {
	for _, r := range results {
		if r.Status == Failed {
			return false
		}
	}
	return true
}

// terminal reports the codes whose failure a later pass cannot cure by itself.
func terminal(code proto.Code) bool {
	return code == proto.InvalidConfig || code == proto.Unsupported
}

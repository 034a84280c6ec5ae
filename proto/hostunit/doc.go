// Package hostunit defines the host-config units: the settings of each unit a profile's
// hostConfig (and a pool's policy) may set, how they are checked, and the typed structs
// bcd's converger applies.
//
// The registry checks a profile's units with Check, prefixing each problem's path with
// hostConfig.<unit>; bcd decodes the units of its NodeSpec with Decode. Both sides share
// this package, so it depends on nothing under registry/.
//
// The units are fixed and applied in the order Order returns. A unit name this package
// does not know is refused when a profile is defined, so that a typo cannot silently
// leave a host unconfigured. Units added through configuration are an extension point for
// later: they will need their own checker registered here, and bcd reports a unit it has no
// converger for as a terminal failure after the units it knows had their turn.
//
// Every unit takes when, a label expression (package labelexpr): the unit applies only to
// nodes whose labels satisfy it. Unknown settings are refused. docs/host-units.md describes
// each unit field by field and what is refused.
package hostunit

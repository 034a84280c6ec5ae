package userdata

import (
	"errors"
	"strings"
	"unicode/utf8"

	"github.com/better-compute/better-compute/proto"
	"github.com/better-compute/better-compute/proto/joinwire"
)

// Vars are the variables a template renders with.
type Vars struct {
	NodeID string
	// Hostname is the node id with "_" turned into "-".
	Hostname        string
	JoinToken       string
	ControlPlaneURL string
	BcdURL          string
	BcdSHA256       string
	// Pins are the zero Pins when none are configured.
	Pins joinwire.Pins
}

// VarNames are the names templates use for the variables, in the order of Vars.
var VarNames = []string{"nodeId", "hostname", "joinToken", "controlPlaneUrl", "bcdUrl", "bcdSha256",
	"servingCaPin", "joinSigningPin", "joinEncryptionPin"}

// Lookup returns the value of the variable a template names, "" when it has none, and
// false for a name that is no variable.
func (v Vars) Lookup(name string) (string, bool) {
	if f := v.field(name); f != nil {
		return *f, true
	}
	return "", false
}

// field is the field of v that holds the variable a template names, nil for a name that
// is no variable.
func (v *Vars) field(name string) *string {
	switch name {
	case "nodeId":
		return &v.NodeID
	case "hostname":
		return &v.Hostname
	case "joinToken":
		return &v.JoinToken
	case "controlPlaneUrl":
		return &v.ControlPlaneURL
	case "bcdUrl":
		return &v.BcdURL
	case "bcdSha256":
		return &v.BcdSHA256
	case "servingCaPin":
		return &v.Pins.ServingCA
	case "joinSigningPin":
		return &v.Pins.JoinSigning
	case "joinEncryptionPin":
		return &v.Pins.JoinEncryption
	}
	return nil
}

// hostnameOf is the hostname of a node: its id with "_" turned into "-".
func hostnameOf(nodeID string) string { return strings.ReplaceAll(nodeID, "_", "-") }

// check refuses a value that could add lines to a document or be read as a placeholder:
// every value is one line of valid UTF-8 without control characters, Unicode line or
// paragraph separators, or "{{". The path names the variable.
func (v Vars) check() error {
	for _, name := range VarNames {
		value, _ := v.Lookup(name)
		if err := checkValue(value); err != nil {
			return proto.Errorf(proto.InvalidConfig, "%s: %v", name, err).WithPath(name)
		}
	}
	return nil
}

func checkValue(s string) error {
	if !utf8.ValidString(s) {
		return errors.New("the value is not valid UTF-8")
	}
	if strings.Contains(s, "{{") {
		return errors.New(`a value may not hold "{{"`)
	}
	if strings.ContainsFunc(s, breaksLine) {
		return errors.New("a value is a single line: it may not hold control characters or line separators")
	}
	return nil
}

// breaksLine is true for control characters (C0, DEL, C1, which holds NEL) and the
// Unicode line and paragraph separators.
func breaksLine(r rune) bool {
	return r < 0x20 || r >= 0x7f && r <= 0x9f || r == '\u2028' || r == '\u2029'
}

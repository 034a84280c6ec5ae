package profile

import (
	"bytes"
	"encoding/json"
	"slices"
	"time"

	"github.com/better-compute/better-compute/labelexpr"
)

// Profile is a defined profile. It cannot be changed: every accessor returns a copy.
type Profile struct {
	id          string
	version     int
	target      string
	description string
	role        string
	entry       string
	drivers     map[string]Driver
	image       *Image
	userData    *UserData
	hostConfig  []HostUnit
	steps       []Step
	acceptance  []Step
	cleanup     []Step
	document    []byte
}

// Targets of a profile.
const (
	TargetMetal = "metal"
	TargetVPS   = "vps"
)

// Driver is the driver bound to one concern, with its configuration (nil when none).
type Driver struct {
	Driver string
	Config json.RawMessage
}

// Image is the image a profile deploys: a catalog reference and the format and
// compression that override the catalog's ("" when not overridden).
type Image struct {
	Ref         string
	Format      string
	Compression string
}

// UserData is what userdata.render renders: a kind and a registered template.
type UserData struct {
	Kind     string
	Template string
}

// HostUnit is one host-config unit and its settings, as proto/hostunit decodes them.
type HostUnit struct {
	Name     string
	Settings json.RawMessage
}

// Step is one step as the document writes it: fields left out are zero.
type Step struct {
	Use string
	// On is where the step runs, "" when left to the step (see Render).
	On string
	// With is the step's input, nil when left out.
	With json.RawMessage
	// Timeout is 0 when left to the step's default.
	Timeout time.Duration
	Retries int
	// Await is "rejoin" or "".
	Await string
	// OnFailure is "fail", "continue" or "" (fail).
	OnFailure string
	// Fallback runs when the step fails after its retries; nil when none.
	Fallback *Step
	When     labelexpr.Expr
}

func (s Step) clone() Step {
	s.With = bytes.Clone(s.With)
	if s.Fallback != nil {
		f := s.Fallback.clone()
		s.Fallback = &f
	}
	return s
}

func cloneSteps(steps []Step) []Step {
	if steps == nil {
		return nil
	}
	out := make([]Step, len(steps))
	for i, s := range steps {
		out[i] = s.clone()
	}
	return out
}

// ID is the profile's id.
func (p *Profile) ID() string { return p.id }

// Version is the profile's version, a positive whole number.
func (p *Profile) Version() int { return p.version }

// Target is metal or vps.
func (p *Profile) Target() string { return p.target }

// Description is the profile's description, "" when none.
func (p *Profile) Description() string { return p.description }

// Role is the role a metal node takes when a deploy of the profile completes: host (the
// default) or dedicated. It is "" for a vps profile.
func (p *Profile) Role() string { return p.role }

// Entry is how a metal node enters with the profile: deploy (the default) or adopt. It is
// "" for a vps profile.
func (p *Profile) Entry() string { return p.entry }

// Drivers returns the drivers by concern.
func (p *Profile) Drivers() map[string]Driver {
	if p.drivers == nil {
		return nil
	}
	out := make(map[string]Driver, len(p.drivers))
	for concern, d := range p.drivers {
		d.Config = bytes.Clone(d.Config)
		out[concern] = d
	}
	return out
}

// Image returns the profile's image, false when it has none.
func (p *Profile) Image() (Image, bool) {
	if p.image == nil {
		return Image{}, false
	}
	return *p.image, true
}

// UserData returns the profile's user data, false when it has none.
func (p *Profile) UserData() (UserData, bool) {
	if p.userData == nil {
		return UserData{}, false
	}
	return *p.userData, true
}

// HostConfig returns the host-config units in the order bcd applies them.
func (p *Profile) HostConfig() []HostUnit {
	out := slices.Clone(p.hostConfig)
	for i := range out {
		out[i].Settings = bytes.Clone(out[i].Settings)
	}
	return out
}

// Steps returns the main steps.
func (p *Profile) Steps() []Step { return cloneSteps(p.steps) }

// Acceptance returns the acceptance steps, run after the main steps in the main phase.
func (p *Profile) Acceptance() []Step { return cloneSteps(p.acceptance) }

// Cleanup returns the cleanup steps, run last whatever the outcome.
func (p *Profile) Cleanup() []Step { return cloneSteps(p.cleanup) }

// Document returns the profile document as defined, without insignificant white space.
func (p *Profile) Document() []byte { return bytes.Clone(p.document) }

// MarshalJSON writes the document.
func (p *Profile) MarshalJSON() ([]byte, error) { return p.Document(), nil }

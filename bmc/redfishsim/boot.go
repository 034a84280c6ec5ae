package redfishsim

import (
	"bytes"
	"encoding/json"
	"net/http"
	"slices"
	"time"
)

// BootOverride is the system's boot source override.
type BootOverride struct {
	Target  string `json:"BootSourceOverrideTarget"`
	Enabled string `json:"BootSourceOverrideEnabled"`
	Mode    string `json:"BootSourceOverrideMode"`
}

// consume boots the system: from the override's target while one is enabled, else
// from its disk; a Once override is then disabled.
func (b *BootOverride) consume(s *Server) {
	from := "Hdd"
	if b.Enabled != "Disabled" && b.Target != "None" {
		from = b.Target
	}
	if b.Enabled == "Once" {
		b.Enabled = "Disabled"
	}
	s.boots = append(s.boots, from)
}

// Boot returns the boot override as it stands.
func (s *Server) Boot() BootOverride {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.settle(time.Now())
	return s.boot
}

// patchSystem changes the boot override, the one writable part of the system here.
func (s *Server) patchSystem(w http.ResponseWriter, r *http.Request) {
	var body map[string]json.RawMessage
	if err := json.NewDecoder(r.Body).Decode(&body); err != nil {
		writeError(w, http.StatusBadRequest, "Base.1.8.MalformedJSON", "The request body submitted was malformed JSON and could not be parsed by the receiving service.")
		return
	}
	for k := range body {
		if k != "Boot" {
			writeError(w, http.StatusBadRequest, "Base.1.8.PropertyNotWritable", "The property "+k+" is a read only property and cannot be assigned a value.")
			return
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	next := s.boot
	dec := json.NewDecoder(bytes.NewReader(body["Boot"]))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&next); err != nil {
		writeError(w, http.StatusBadRequest, "Base.1.8.PropertyUnknown", "The property in the Boot object is not a known property: "+err.Error())
		return
	}
	checks := []struct {
		name, value string
		allowed     []string
	}{
		{"BootSourceOverrideTarget", next.Target, s.cfg.BootTargets},
		{"BootSourceOverrideEnabled", next.Enabled, []string{"Disabled", "Once", "Continuous"}},
		{"BootSourceOverrideMode", next.Mode, []string{"UEFI", "Legacy"}},
	}
	for _, c := range checks {
		if !slices.Contains(c.allowed, c.value) {
			writeError(w, http.StatusBadRequest, "Base.1.8.PropertyValueNotInList", "The value '"+c.value+"' for the property "+c.name+" is not in the list of acceptable values.")
			return
		}
	}
	if next.Target == "UefiHttp" && next.Mode != "UEFI" {
		writeError(w, http.StatusBadRequest, "Base.1.8.PropertyValueConflict", "The property BootSourceOverrideTarget could not be written because its value 'UefiHttp' conflicts with the value 'Legacy' of the property BootSourceOverrideMode.")
		return
	}
	s.boot = next
	w.WriteHeader(http.StatusNoContent)
}

package redfishsim

import (
	"encoding/json"
	"net/http"
	"slices"
	"time"
)

// power is the system's power: a settled state, or a transition to another that ends
// at a time.
type power struct {
	state string
	via   string // PoweringOn or PoweringOff while moving
	to    string
	at    time.Time
}

// settle ends a transition whose time has come; reaching On boots the system.
func (s *Server) settle(now time.Time) {
	if s.power.via == "" || now.Before(s.power.at) {
		return
	}
	s.power.state, s.power.via = s.power.to, ""
	if s.power.state == "On" {
		s.boot.consume(s)
	}
}

// powerState is what the system reports now.
func (s *Server) powerState() string {
	s.settle(time.Now())
	if s.power.via != "" {
		return s.power.via
	}
	return s.power.state
}

// move starts a transition to state to (On again for a restart).
func (s *Server) move(to string) {
	s.power.via, s.power.to, s.power.at = "PoweringOff", to, time.Now().Add(s.cfg.Delay)
	if to == "On" {
		s.power.via = "PoweringOn"
	}
	s.settle(time.Now())
}

// PowerState returns the system's PowerState as a client would read it.
func (s *Server) PowerState() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.powerState()
}

// reset performs ComputerSystem.Reset.
func (s *Server) reset(w http.ResponseWriter, r *http.Request) {
	var body struct{ ResetType string }
	if err := json.NewDecoder(r.Body).Decode(&body); err != nil || body.ResetType == "" {
		writeError(w, http.StatusBadRequest, "Base.1.8.ActionParameterMissing", "The action ComputerSystem.Reset requires the parameter ResetType to be present in the request body.")
		return
	}
	rt := body.ResetType
	if !slices.Contains(s.cfg.ResetTypes, rt) {
		writeError(w, http.StatusBadRequest, "Base.1.8.ActionParameterValueNotInList", "The value '"+rt+"' for the parameter ResetType in the action ComputerSystem.Reset is not in the list of acceptable values.")
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.powerState() != s.power.state {
		writeError(w, http.StatusConflict, "Base.1.8.ResourceInUse", "The change to the requested resource failed because the resource is in use or in transition.")
		return
	}
	s.resets = append(s.resets, rt)
	on := s.power.state == "On"
	switch rt {
	case "On":
		if !on {
			s.move("On")
		}
	case "ForceOff":
		if on {
			s.move("Off")
		}
	case "GracefulShutdown":
		if on && !s.cfg.IgnoreGracefulShutdown {
			s.move("Off")
		}
	case "ForceRestart", "GracefulRestart", "PowerCycle":
		s.move("On")
	}
	w.WriteHeader(http.StatusNoContent)
}

// resetAction is the Reset action as the system resource lists it.
func (s *Server) resetAction() map[string]any {
	a := map[string]any{"target": systemPath + "/Actions/ComputerSystem.Reset"}
	switch s.cfg.Advertise {
	case InAllowableValues:
		a["ResetType@Redfish.AllowableValues"] = s.cfg.ResetTypes
	case InActionInfo:
		a["@Redfish.ActionInfo"] = systemPath + "/ResetActionInfo"
	}
	return a
}

// resetActionInfo lists the reset types, when the service advertises them that way.
func (s *Server) resetActionInfo(w http.ResponseWriter, r *http.Request) {
	if s.cfg.Advertise != InActionInfo {
		writeError(w, http.StatusNotFound, "Base.1.8.ResourceMissingAtURI", "The resource at the URI '"+r.URL.Path+"' was not found.")
		return
	}
	write(w, http.StatusOK, map[string]any{
		"@odata.id": systemPath + "/ResetActionInfo",
		"Id":        "ResetActionInfo",
		"Name":      "Reset Action Info",
		"Parameters": []any{map[string]any{
			"Name": "ResetType", "Required": true, "DataType": "String", "AllowableValues": s.cfg.ResetTypes,
		}},
	})
}

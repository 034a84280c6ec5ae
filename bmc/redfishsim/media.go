package redfishsim

import (
	"encoding/json"
	"net/http"
	"net/url"
)

const (
	managerPath = "/redfish/v1/Managers/1"
	floppyPath  = managerPath + "/VirtualMedia/Floppy1"
	cdPath      = managerPath + "/VirtualMedia/CD1"
)

// Media is the state of the manager's virtual CD.
type Media struct {
	Image          string
	Inserted       bool
	WriteProtected bool
}

// Media returns the virtual CD as it stands.
func (s *Server) Media() Media {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.media
}

// withMedia answers 404 for every virtual media resource of a BMC without any.
func (s *Server) withMedia(next http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if s.cfg.NoVirtualMedia {
			writeError(w, http.StatusNotFound, "Base.1.8.ResourceMissingAtURI", "The resource at the URI '"+r.URL.Path+"' was not found.")
			return
		}
		next(w, r)
	}
}

// mediaCollection lists a virtual floppy before the CD, as many BMCs do.
func (s *Server) mediaCollection() any {
	return collection(managerPath+"/VirtualMedia", floppyPath, cdPath)
}

func (s *Server) mediaResource(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch r.PathValue("id") {
	case "Floppy1":
		write(w, http.StatusOK, map[string]any{
			"@odata.id": floppyPath, "@odata.type": "#VirtualMedia.v1_3_0.VirtualMedia", "Id": "Floppy1", "Name": "Virtual Removable Media",
			"MediaTypes": []string{"Floppy", "USBStick"}, "Inserted": false, "Image": nil,
		})
	case "CD1":
		var image any
		if s.media.Image != "" {
			image = s.media.Image
		}
		write(w, http.StatusOK, map[string]any{
			"@odata.id": cdPath, "@odata.type": "#VirtualMedia.v1_3_0.VirtualMedia", "Id": "CD1", "Name": "Virtual CD",
			"MediaTypes": []string{"CD", "DVD"}, "Image": image, "Inserted": s.media.Inserted, "WriteProtected": s.media.WriteProtected,
			"ConnectedVia": map[bool]string{true: "URI", false: "NotConnected"}[s.media.Inserted],
			"Actions": map[string]any{
				"#VirtualMedia.InsertMedia": map[string]any{"target": cdPath + "/Actions/VirtualMedia.InsertMedia"},
				"#VirtualMedia.EjectMedia":  map[string]any{"target": cdPath + "/Actions/VirtualMedia.EjectMedia"},
			},
		})
	default:
		writeError(w, http.StatusNotFound, "Base.1.8.ResourceMissingAtURI", "The resource at the URI '"+r.URL.Path+"' was not found.")
	}
}

// insertMedia mounts an http or https image; a CD that holds one must be ejected first.
func (s *Server) insertMedia(w http.ResponseWriter, r *http.Request) {
	var body struct {
		Image          string
		Inserted       *bool
		WriteProtected *bool
	}
	if err := json.NewDecoder(r.Body).Decode(&body); err != nil || body.Image == "" {
		writeError(w, http.StatusBadRequest, "Base.1.8.ActionParameterMissing", "The action VirtualMedia.InsertMedia requires the parameter Image to be present in the request body.")
		return
	}
	if u, err := url.Parse(body.Image); err != nil || (u.Scheme != "http" && u.Scheme != "https") {
		writeError(w, http.StatusBadRequest, "Base.1.8.ActionParameterValueFormatError", "The value '"+body.Image+"' for the parameter Image in the action VirtualMedia.InsertMedia is of a different format than the parameter can accept.")
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.media.Inserted {
		writeError(w, http.StatusConflict, "Base.1.8.ResourceInUse", "The change to the requested resource failed because the resource is in use or in transition.")
		return
	}
	s.media = Media{Image: body.Image, Inserted: body.Inserted == nil || *body.Inserted, WriteProtected: body.WriteProtected == nil || *body.WriteProtected}
	w.WriteHeader(http.StatusNoContent)
}

func (s *Server) ejectMedia(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.media = Media{}
	w.WriteHeader(http.StatusNoContent)
}

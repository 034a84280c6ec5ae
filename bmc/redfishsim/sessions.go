package redfishsim

import (
	"crypto/rand"
	"crypto/subtle"
	"encoding/json"
	"fmt"
	"net/http"
)

const sessionsPath = "/redfish/v1/SessionService/Sessions"

// login opens a session for the configured user: 201, X-Auth-Token and Location.
func (s *Server) login(w http.ResponseWriter, r *http.Request) {
	var body struct{ UserName, Password string }
	if err := json.NewDecoder(r.Body).Decode(&body); err != nil {
		writeError(w, http.StatusBadRequest, "Base.1.8.MalformedJSON", "The request body submitted was malformed JSON and could not be parsed by the receiving service.")
		return
	}
	if !s.credentialOK(body.UserName, body.Password) {
		writeError(w, http.StatusUnauthorized, "Base.1.8.AccessDenied", "While attempting to establish a connection to '"+sessionsPath+"', the service denied access.")
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.nextID++
	id := fmt.Sprint(s.nextID)
	token := rand.Text()
	s.sessions[token] = id
	w.Header().Set("X-Auth-Token", token)
	w.Header().Set("Location", sessionsPath+"/"+id)
	write(w, http.StatusCreated, map[string]any{"@odata.id": sessionsPath + "/" + id, "Id": id, "Name": "User Session", "UserName": body.UserName})
}

// logout closes the session the path names.
func (s *Server) logout(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for token, id := range s.sessions {
		if id == r.PathValue("id") {
			delete(s.sessions, token)
			w.WriteHeader(http.StatusNoContent)
			return
		}
	}
	writeError(w, http.StatusNotFound, "Base.1.8.ResourceMissingAtURI", "The resource at the URI '"+r.URL.Path+"' was not found.")
}

// authed lets through a request with a live session's token or the user's basic
// credentials, and answers 401 to any other.
func (s *Server) authed(next http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		ok := false
		if token := r.Header.Get("X-Auth-Token"); token != "" {
			s.mu.Lock()
			_, ok = s.sessions[token]
			s.mu.Unlock()
		} else if user, password, basic := r.BasicAuth(); basic {
			ok = s.credentialOK(user, password)
		}
		if !ok {
			writeError(w, http.StatusUnauthorized, "Base.1.8.NoValidSession", "There is no valid session established with the implementation.")
			return
		}
		next(w, r)
	}
}

func (s *Server) credentialOK(user, password string) bool {
	u := subtle.ConstantTimeCompare([]byte(user), []byte(s.cfg.Username))
	p := subtle.ConstantTimeCompare([]byte(password), []byte(s.cfg.Password))
	return u&p == 1
}

package site

import (
	"net/http"
	"strings"
)

// kickServices are the API services whose writes can change a site's cache plan.
var kickServices = []string{"/v1/pools.", "/v1/images.", "/v1/signers.", "/v1/sites."}

// KickAfter wraps an API handler so that every call of a method of pools, images,
// signers or sites kicks a recomputation of the site agents' NodeSpecs once it is answered
// (reads too: a recomputation that changes nothing pushes nothing).
func (s *Service) KickAfter(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		next.ServeHTTP(w, r)
		for _, p := range kickServices {
			if strings.HasPrefix(r.URL.Path, p) {
				s.Kick()
				return
			}
		}
	})
}

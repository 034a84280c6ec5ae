package redfish

import (
	"net/http"

	"github.com/better-compute/better-compute/proto"
)

// oneHost sends requests to the BMC's own host only. gofish joins a link the BMC answers
// (an @odata.id) to the endpoint as text, so "@other:443/x" names another host, and
// http.Client follows a redirect anywhere keeping the X-Auth-Token header: either would
// carry the session token, or with basic authentication the BMC's password, to another
// host that holds a certificate the driver trusts.
type oneHost struct {
	host string
	next *http.Transport
}

// RoundTrip refuses a request for another host, scheme or with a login in its URL.
func (o oneHost) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.URL.Scheme != "https" || r.URL.Host != o.host || r.URL.User != nil {
		if r.Body != nil {
			r.Body.Close()
		}
		return nil, proto.Errorf(proto.DriverError, "redfish %s: the BMC linked %s://%s, not its own host: refused (a BMC that names other hosts may be compromised)", o.host, r.URL.Scheme, r.URL.Host)
	}
	return o.next.RoundTrip(r)
}

// CloseIdleConnections closes the transport's idle connections (http.Client's own
// CloseIdleConnections reaches it through this).
func (o oneHost) CloseIdleConnections() { o.next.CloseIdleConnections() }

package redfish

import (
	"bufio"
	"fmt"
	"io"
	"net/http"

	"github.com/better-compute/better-compute/proto"
)

// oneHost is the transport the driver talks to its BMC through. It sends requests to the
// BMC's own host only: gofish joins a link the BMC answers (an @odata.id) to the endpoint
// as text, so "@other:443/x" names another host, and http.Client follows a redirect
// anywhere keeping the X-Auth-Token header; either would carry the session token, or with
// basic authentication the BMC's password, to another host that holds a certificate the
// driver trusts. And it passes on only the resources gofish can read: a Redfish resource
// is a JSON object, and gofish dereferences a collection answered as null.
type oneHost struct {
	host string
	next *http.Transport
}

// RoundTrip refuses a request for another host, scheme or with a login in its URL, and a
// successful GET whose body is not a JSON object.
func (o oneHost) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.URL.Scheme != "https" || r.URL.Host != o.host || r.URL.User != nil {
		if r.Body != nil {
			r.Body.Close()
		}
		return nil, proto.Errorf(proto.DriverError, "redfish %s: the BMC linked %s://%s, not its own host: refused (a BMC that names other hosts may be compromised)", o.host, r.URL.Scheme, r.URL.Host)
	}
	resp, err := o.next.RoundTrip(r)
	if err != nil || r.Method != http.MethodGet || resp.StatusCode/100 != 2 {
		return resp, err
	}
	body := bufio.NewReader(resp.Body)
	if first, err := firstJSONByte(body); first != '{' {
		resp.Body.Close()
		what := fmt.Sprintf("a body beginning %q", first)
		if err != nil {
			what = "no JSON value"
		}
		return nil, proto.Errorf(proto.DriverError, "redfish %s: GET %s answered %s, not a Redfish resource (a JSON object): refused; check the BMC's firmware", o.host, r.URL.Path, what)
	}
	resp.Body = struct {
		io.Reader
		io.Closer
	}{body, resp.Body}
	return resp, nil
}

// firstJSONByte peeks at the first byte of a JSON text past its leading whitespace,
// leaving it to be read.
func firstJSONByte(r *bufio.Reader) (byte, error) {
	for {
		b, err := r.ReadByte()
		if err != nil {
			return 0, err
		}
		switch b {
		case ' ', '\t', '\r', '\n':
			continue
		}
		return b, r.UnreadByte()
	}
}

// CloseIdleConnections closes the transport's idle connections (http.Client's own
// CloseIdleConnections reaches it through this).
func (o oneHost) CloseIdleConnections() { o.next.CloseIdleConnections() }

package redfish

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"sync"

	"github.com/better-compute/better-compute/proto"
)

// The bounds of what a BMC answers, which the site agent would otherwise hold in memory
// or act on without end: the site agent also answers DHCP, TFTP and HTTP boot for the
// whole rack, and a compromised BMC or broken firmware must not take it down.
const (
	// maxBody bounds every body the driver reads, of any method and status. The
	// resources the driver reads are a few KiB each (a ComputerSystem of a large server
	// is under 64 KiB; a collection lists links of under 100 bytes a member), and a
	// collection answered with its members expanded, hundreds of drives, is a few MiB:
	// 16 MiB leaves room for any of them and bounds what one BMC can make the agent hold.
	maxBody = 16 << 20
	// maxMembers bounds the members of the collections one read of the driver reads,
	// over all their pages: gofish reads each member by a request of its own, a
	// goroutine each. A server has at most a few hundred DIMMs, drives or interfaces.
	maxMembers = 4096
	// maxPages bounds the pages one read follows (Members@odata.nextLink), which gofish
	// follows as long as a BMC links another, by a recursion in its own stack.
	maxPages = 64
	// maxRead bounds the bodies the driver takes in for one read of the BMC (a call, or
	// one poll of a call that waits), which it may hold all at once: gofish keeps each
	// member of a collection whole with its body, and each failure with its body, until
	// the collection's last member is read, and reads the bodies of the failures side
	// by side. Far over what a server answers (hundreds of members of a few KiB each),
	// it keeps what one BMC makes the site agent hold to a few of maxBody, not
	// maxMembers of them.
	maxRead = 64 << 20
)

// oneHost is the transport the driver talks to its BMC through. It sends requests to the
// BMC's own host only: gofish joins a link the BMC answers (an @odata.id) to the endpoint
// as text, so "@other:443/x" names another host, and http.Client follows a redirect
// anywhere keeping the X-Auth-Token header; either would carry the session token, or with
// basic authentication the BMC's password, to another host that holds a certificate the
// driver trusts. It passes on only the resources gofish can read: a Redfish resource
// is a JSON object, and gofish dereferences a collection answered as null. And it bounds
// what a BMC answers: every body at maxBody, the bodies of one read of the BMC at
// maxRead, and the collections one read reads at maxMembers over maxPages. A read is the
// call's (the driver and its transport live for one call), or one poll of a call that
// waits, counted again only when the driver starts one (newRead), never on anything the
// BMC answers: a BMC that links a collection's next page under another spelling of its
// path cannot start the count again, and a wait of many polls, each listing the
// systems, is not cut short.
type oneHost struct {
	host string
	next *http.Transport

	mu sync.Mutex
	// pages and members count the pages linked and the members listed by the
	// collections of the read.
	pages, members int
	// read is the bytes of the bodies read since the driver's last newRead.
	read int64
}

// newRead starts one read of the BMC: the call's own, or one poll of a call that
// waits, which holds nothing of the polls before it and reads the same collections.
func (o *oneHost) newRead() {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.read, o.pages, o.members = 0, 0, 0
}

// take counts n bytes of a body of r against maxRead.
func (o *oneHost) take(r *http.Request, n int) error {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.read += int64(n)
	if o.read > maxRead {
		return proto.Errorf(proto.DriverError, "redfish %s: %s %s: the answers to one read passed %d MiB: refused (no server's resources are near that; a BMC that answers so much is broken or hostile); check or update the BMC's firmware", o.host, r.Method, clipName(r.URL.Path), maxRead>>20)
	}
	return nil
}

// RoundTrip refuses a request for another host, scheme or with a login in its URL, a
// body over maxBody, bodies of one read over maxRead, a successful GET whose body is not a JSON object, and a collection
// over maxMembers or maxPages.
func (o *oneHost) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.URL.Scheme != "https" || r.URL.Host != o.host || r.URL.User != nil {
		if r.Body != nil {
			r.Body.Close()
		}
		return nil, proto.Errorf(proto.DriverError, "redfish %s: the BMC linked %s://%s, not its own host: refused (a BMC that names other hosts may be compromised)", o.host, r.URL.Scheme, r.URL.Host)
	}
	resp, err := o.next.RoundTrip(r)
	if err != nil {
		return resp, err
	}
	tooLong := func() error {
		return proto.Errorf(proto.DriverError, "redfish %s: %s %s answered more than %d MiB: refused (no Redfish resource is near that; a BMC that answers so much is broken or hostile); check or update the BMC's firmware", o.host, r.Method, clipName(r.URL.Path), maxBody>>20)
	}
	if resp.ContentLength > maxBody {
		resp.Body.Close()
		return nil, tooLong()
	}
	take := func(n int) error { return o.take(r, n) }
	if r.Method != http.MethodGet || resp.StatusCode/100 != 2 {
		resp.Body = &bounded{ReadCloser: resp.Body, left: maxBody, tooLong: tooLong, take: take}
		return resp, nil
	}
	body, err := readBody(&bounded{ReadCloser: resp.Body, left: maxBody, tooLong: tooLong, take: take}, resp.ContentLength)
	resp.Body.Close()
	if err != nil {
		return nil, err
	}
	if first := bytes.TrimLeft(body, " \t\r\n"); len(first) == 0 || first[0] != '{' {
		what := "no JSON value"
		if len(first) > 0 {
			what = fmt.Sprintf("a body beginning %q", first[0])
		}
		return nil, proto.Errorf(proto.DriverError, "redfish %s: GET %s answered %s, not a Redfish resource (a JSON object): refused; check the BMC's firmware", o.host, clipName(r.URL.Path), what)
	}
	if err := o.checkCollection(r, body); err != nil {
		return nil, err
	}
	resp.Body = io.NopCloser(bytes.NewReader(body))
	resp.ContentLength = int64(len(body))
	return resp, nil
}

// checkCollection counts a collection's page, and refuses it when it takes the
// collections read over maxMembers, or links a page past maxPages; a page refused is
// not counted, so the collections read after it are held to the same bounds.
func (o *oneHost) checkCollection(r *http.Request, body []byte) error {
	var page struct {
		Members []struct{}
		Next    string `json:"Members@odata.nextLink"`
	}
	// A body of another shape leaves page as far as it fits (nothing, for what is not
	// JSON): gofish tells of the rest.
	_ = json.Unmarshal(body, &page)
	if page.Members == nil && page.Next == "" {
		return nil
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	members, pages := o.members+len(page.Members), o.pages
	if page.Next != "" {
		pages++
	}
	switch {
	case members > maxMembers:
		return proto.Errorf(proto.DriverError, "redfish %s: GET %s: the collection lists over %d members with those read before it: refused (no server has that many parts); check or update the BMC's firmware", o.host, clipName(r.URL.Path), maxMembers)
	case pages > maxPages:
		return proto.Errorf(proto.DriverError, "redfish %s: GET %s: the collection links a page after %d pages: refused (a BMC whose pages do not end is broken or hostile); check or update the BMC's firmware", o.host, clipName(r.URL.Path), maxPages)
	}
	// Counted once passed: a page refused leaves the count to the other collections.
	o.members, o.pages = members, pages
	return nil
}

// readBody reads a body of at most maxBody bytes whole, in a buffer of length's size
// when it is known, else one that doubles up to maxBody: holding at most maxBody, and
// allocating at most twice that on the way.
func readBody(r io.Reader, length int64) ([]byte, error) {
	buf := make([]byte, 0, min(max(length, 512), maxBody)+1) // +1: EOF read without a growth
	for {
		if len(buf) == cap(buf) {
			buf = slices.Grow(buf, min(cap(buf), maxBody+1-cap(buf)))
		}
		n, err := r.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		switch {
		case err == io.EOF:
			return buf, nil
		case err != nil:
			return nil, err
		}
	}
}

// bounded is a body that fails with tooLong past left bytes, and with take's error once
// the bytes it read take the read over its bound.
type bounded struct {
	io.ReadCloser
	left    int64
	tooLong func() error
	take    func(n int) error
}

func (b *bounded) Read(p []byte) (int, error) {
	if b.left <= 0 {
		// One byte more tells a body of exactly the bound from one over it.
		var one [1]byte
		if n, err := b.ReadCloser.Read(one[:]); n == 0 {
			return 0, err
		}
		return 0, b.tooLong()
	}
	if int64(len(p)) > b.left {
		p = p[:b.left]
	}
	n, err := b.ReadCloser.Read(p)
	b.left -= int64(n)
	if over := b.take(n); over != nil {
		return 0, over
	}
	return n, err
}

// CloseIdleConnections closes the transport's idle connections (http.Client's own
// CloseIdleConnections reaches it through this).
func (o *oneHost) CloseIdleConnections() { o.next.CloseIdleConnections() }

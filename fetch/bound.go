package fetch

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"syscall"
	"time"

	"github.com/better-compute/better-compute/proto"
)

// Bound keeps a client's fetches where an image may be fetched from, whatever the hosts
// it is sent to answer: the site's cache and a machine's ramdisk fetch on the platform's
// side of its networks, from sources a tenant wrote.
type Bound struct {
	// Sources is the rule. Every request's host and port (the source's, each redirect's, a
	// token realm's) must be allowed by it, and every address dialed too: an address of
	// the fetching machine or its link (proto.InternalAddr) only when Sources name that
	// address itself, never through a name (proto.SourceBound.AddrRefused).
	Sources proto.SourceBound
	// Resolver looks host names up; nil is the system's. Tests hand in one that asks a DNS
	// server of theirs.
	Resolver *net.Resolver
}

// What a refused request was for.
const (
	HopSource   = "source"
	HopRedirect = "redirect"
	HopRealm    = "token realm"
	HopAddress  = "address"
)

// RefusedError is a request or a connection a bounded client did not make: nothing was
// sent to the host, and no connection opened to the address.
type RefusedError struct {
	// Hop is what led there: HopSource, HopRedirect, HopRealm, or HopAddress for an
	// address refused as it was about to be dialed.
	Hop string
	// Host and Port are the request's host (a name, or an address) and port; for an
	// address, the host of the request that would have been sent over it.
	Host, Port string
	// Addr and Kind are the address refused and what it is (proto.InternalAddr), for
	// HopAddress.
	Addr netip.AddrPort
	Kind string
	// ByPool says the pool's policy.imageSources refused it where the site's allowed it.
	ByPool bool
}

func (e *RefusedError) Error() string {
	list := "the site's image sources: the platform lists it with `better-compute sites update SITE --image-sources ...`"
	if e.ByPool {
		list = "the pool's policy.imageSources: add it with `better-compute pools update POOL --policy POLICY.json`"
	}
	hostPort := net.JoinHostPort(e.Host, e.Port)
	switch e.Hop {
	case HopRedirect:
		return fmt.Sprintf("refused to follow a redirect to host %s, which is not among %s (a registry that sends its blobs to storage or a CDN needs that host listed too)", hostPort, list)
	case HopRealm:
		return fmt.Sprintf("refused to ask the registry's token realm on host %s, which is not among %s (the registry's token server needs its host listed too)", hostPort, list)
	case HopAddress:
		name := "a name"
		if e.Host != "" {
			name = "host " + e.Host
		}
		return fmt.Sprintf("refused to connect to %s, a %s address %s resolves to: such an address is dialed only when the image sources name it (%s), never through a name",
			e.Addr, e.Kind, name, e.Addr)
	}
	return fmt.Sprintf("refused to fetch from host %s, which is not among %s", hostPort, list)
}

// Refused is the host and port the bound refused, as a site's cache reports it: the
// request's, or, for an address refused as it was about to be dialed, that address,
// which only a pattern naming it allows (proto.SourceBound.AddrRefused). Either is what
// the image sources lack for the fetch to go on; neither carries the request's URL.
func (e *RefusedError) Refused() string {
	if e.Hop == HopAddress {
		return e.Addr.String()
	}
	return net.JoinHostPort(e.Host, e.Port)
}

// Is makes a RefusedError match ErrNotAllowed.
func (e *RefusedError) Is(target error) bool { return target == ErrNotAllowed }

// ErrNotAllowed is matched (errors.Is) by every refusal of a bounded client.
var ErrNotAllowed = errors.New("not among the image sources")

// NewBoundClient returns a client like NewClient's that fetches only where b allows. It
// uses a copy of t (nil: one with no overall timeout and no transparent decompression),
// never a proxy, and dials with a dialer of its own that checks each address as it is
// about to connect to it (net.Dialer.Control), so the address checked is the address
// dialed. Each request (the source's, a redirect's, a token realm's) is checked before it
// is sent; a refusal is a *RefusedError.
func NewBoundClient(t *http.Transport, b Bound) *Client {
	if t == nil {
		t = &http.Transport{DisableCompression: true}
	}
	t = t.Clone()
	t.Proxy = nil
	// Any dial function of t's would connect past the check.
	t.DialTLSContext, t.DialTLS, t.Dial = nil, nil, nil
	t.DialContext = (&net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second, Resolver: b.Resolver,
		Control: func(_, address string, _ syscall.RawConn) error { return b.checkAddr(address) }}).DialContext
	c := NewClient(&http.Client{Transport: t})
	c.bound = &b
	c.http.CheckRedirect = func(req *http.Request, via []*http.Request) error {
		if len(via) >= 10 {
			return errors.New("stopped after 10 redirects")
		}
		return b.check(req.URL, HopRedirect)
	}
	return c
}

// check refuses a request to u that b does not allow.
func (b *Bound) check(u *url.URL, hop string) error {
	host, port := proto.URLHostPort(u)
	if refused, byPool := b.Sources.HostRefused(host, port); refused {
		return &RefusedError{Hop: hop, Host: host, Port: port, ByPool: byPool}
	}
	return nil
}

// checkAddr refuses to connect to an address ("IP:PORT", as net.Dialer.Control is given
// it) that b does not allow.
func (b *Bound) checkAddr(address string) error {
	ap, err := netip.ParseAddrPort(address)
	if err != nil {
		return fmt.Errorf("refused to connect to %q, which is not an address and port", address)
	}
	if kind := b.Sources.AddrRefused(ap); kind != "" {
		return &RefusedError{Hop: HopAddress, Addr: ap, Kind: kind}
	}
	return nil
}

// refusal is err's *RefusedError alone when it holds one, so that what was refused is
// told without the URL the request would have gone to (a redirect's may carry a
// presigned secret); an address refused is told with the host it was dialed for.
// Otherwise it is err with the URL of the hop that failed (http.Client names it whole,
// a redirect's presigned query and user information too) redacted.
func refusal(err error) error {
	var r *RefusedError
	if !errors.As(err, &r) {
		if ue, ok := err.(*url.Error); ok {
			return &url.Error{Op: ue.Op, URL: Redact(ue.URL), Err: ue.Err}
		}
		return err
	}
	if r.Hop == HopAddress && r.Host == "" {
		var ue *url.Error
		if errors.As(err, &ue) {
			if u, perr := url.Parse(ue.URL); perr == nil {
				c := *r
				c.Host, c.Port = proto.URLHostPort(u)
				return &c
			}
		}
	}
	return r
}

package proto

import (
	"fmt"
	"net/netip"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// MaxImageSources bounds a list of image source patterns.
const MaxImageSources = 64

// dnsName is a lower-case host name: labels of letters, digits and inner hyphens.
var dnsName = regexp.MustCompile(`^(?:[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?\.)*[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?$`)

// sourcePattern is one parsed image source pattern.
type sourcePattern struct {
	// suffix is set for *.DOMAIN: the host must end in "."+suffix.
	suffix string
	// name is a host name matched exactly; addr an IP address.
	name string
	addr netip.Addr
	// port is the port, "443" when the pattern names none.
	port string
}

// IsPort reports whether s is a TCP port as a URL writes it: 1 to 65535 in decimal,
// without sign or leading zero. A port is held to it alike where an image source is
// registered (registry/image), fetched (fetch) and allowed (a site's image sources): a
// port the catalog took and the fetch refused ("0443") made an image that registered
// and never fetched.
func IsPort(s string) bool {
	n, err := strconv.Atoi(s)
	return err == nil && n >= 1 && n <= 65535 && strconv.Itoa(n) == s
}

// parseSourcePattern reads HOST, HOST:PORT, *.DOMAIN or *.DOMAIN:PORT, where HOST is a
// lower-case host name, an IPv4 address or a bracketed IPv6 address.
func parseSourcePattern(s string) (sourcePattern, error) {
	bad := fmt.Errorf("write HOST, HOST:PORT, *.DOMAIN or *.DOMAIN:PORT: a lower-case host name, an IPv4 address or an IPv6 address in brackets, and a port from 1 to 65535 (443 when left out)")
	if len(s) > 260 {
		return sourcePattern{}, bad
	}
	host, port := s, ""
	if strings.HasPrefix(s, "[") {
		end := strings.IndexByte(s, ']')
		if end < 0 {
			return sourcePattern{}, bad
		}
		host, port = s[1:end], s[end+1:]
		if port != "" && !strings.HasPrefix(port, ":") {
			return sourcePattern{}, bad
		}
		port = strings.TrimPrefix(port, ":")
	} else if i := strings.LastIndexByte(s, ':'); i >= 0 {
		host, port = s[:i], s[i+1:]
	}
	p := sourcePattern{port: "443"}
	if port != "" || strings.HasSuffix(s, ":") {
		if !IsPort(port) {
			return sourcePattern{}, bad
		}
		p.port = port
	}
	switch {
	case strings.HasPrefix(s, "["):
		addr, err := netip.ParseAddr(host)
		if err != nil || !addr.Is6() || addr.Zone() != "" {
			return sourcePattern{}, bad
		}
		p.addr = addr.Unmap()
	case strings.HasPrefix(host, "*."):
		if !dnsName.MatchString(host[2:]) || len(host) > 255 {
			return sourcePattern{}, bad
		}
		p.suffix = host[2:]
	default:
		if addr, err := netip.ParseAddr(host); err == nil {
			if !addr.Is4() {
				return sourcePattern{}, bad
			}
			p.addr = addr
		} else if dnsName.MatchString(host) && len(host) <= 253 {
			p.name = host
		} else {
			return sourcePattern{}, bad
		}
	}
	return p, nil
}

// CheckImageSources refuses a list of image source patterns that is too long, holds a
// pattern twice or one that is not HOST[:PORT] or *.DOMAIN[:PORT], with INVALID_INPUT at
// path[i] (at path for the length).
func CheckImageSources(patterns []string, path string) error {
	if len(patterns) > MaxImageSources {
		return Errorf(InvalidInput, "at most %d image source patterns", MaxImageSources).WithPath(path)
	}
	for i, s := range patterns {
		at := fmt.Sprintf("%s[%d]", path, i)
		if _, err := parseSourcePattern(s); err != nil {
			return Errorf(InvalidInput, "image source pattern %d: %v", i, err).WithPath(at)
		}
		if slices.Contains(patterns[:i], s) {
			return Errorf(InvalidInput, "image source pattern %d is listed twice", i).WithPath(at)
		}
	}
	return nil
}

// SourceBound is where a fetch of an image may go: the hosts and ports the site's image
// sources allow and, when the pool has any, its policy.imageSources too (a pool narrows
// its site's list, never widens it). It is the one rule of every fetch a tenant's input
// can cause on the site's provisioning side: the registry applies it to the sources it
// hands out (registry/image), and the site's cache and a machine's ramdisk apply it again
// to every request of a fetch (its redirects and token realms) and every address it
// dials (fetch.Bound).
type SourceBound struct {
	// Site are the site's image source patterns; none allows nothing.
	Site []string `json:"site"`
	// Pool are the pool's policy.imageSources; none narrows nothing.
	Pool []string `json:"pool,omitempty"`
}

// Refused reports whether source (an https:// or oci:// URL, port 443 when it names
// none) may not be fetched under b, and whether the pool's list refused it (byPool) where
// the site's allowed it.
func (b SourceBound) Refused(source string) (refused, byPool bool) {
	host, port, ok := SourceHost(source)
	if !ok {
		return true, false
	}
	return b.HostRefused(host, port)
}

// HostRefused is Refused for a lower-case host (a name, or an address without brackets)
// and a port: what a request of a fetch, the source's or a redirect's or a token realm's,
// is checked by.
func (b SourceBound) HostRefused(host, port string) (refused, byPool bool) {
	switch {
	case !hostAllowed(b.Site, host, port):
		return true, false
	case len(b.Pool) > 0 && !hostAllowed(b.Pool, host, port):
		return true, true
	}
	return false, false
}

// AddrRefused says why a fetch under b may not connect to addr, or "" when it may. An
// address of the fetching machine itself or of its link (InternalAddr: loopback,
// link-local such as the cloud metadata service's 169.254.169.254, unspecified, 0.0.0.0/8
// and multicast) is dialed only when b allows that address as a host itself, so a name
// among the patterns never leads there, whatever DNS answers for it. Every other address
// a name resolves to is allowed: internal mirrors in private ranges are normal.
func (b SourceBound) AddrRefused(addr netip.AddrPort) string {
	a := addr.Addr().Unmap()
	kind := InternalAddr(a)
	if kind == "" {
		return ""
	}
	if refused, _ := b.HostRefused(a.String(), strconv.Itoa(int(addr.Port()))); !refused {
		return ""
	}
	return kind
}

// InternalAddr names the kind of a, when a fetch may reach it only by its address
// (SourceBound.AddrRefused): "loopback", "link-local", "unspecified", "this-network"
// (0.0.0.0/8) or "multicast"; else "".
func InternalAddr(a netip.Addr) string {
	a = a.Unmap()
	switch {
	case a.IsLoopback():
		return "loopback"
	case a.IsLinkLocalUnicast():
		return "link-local"
	case a.IsUnspecified():
		return "unspecified"
	case a.Is4() && a.As4()[0] == 0:
		return "this-network"
	case a.IsMulticast():
		return "multicast"
	}
	return ""
}

// hostAllowed reports whether one of patterns matches host and port. Addresses compare
// as addresses; a name matches a name pattern of its own spelling, or a *.DOMAIN pattern
// it is below.
func hostAllowed(patterns []string, host, port string) bool {
	addr, err := netip.ParseAddr(host)
	isAddr := err == nil
	for _, s := range patterns {
		p, err := parseSourcePattern(s)
		if err != nil || p.port != port {
			continue
		}
		switch {
		case p.addr.IsValid():
			if isAddr && addr.Unmap() == p.addr {
				return true
			}
		case p.suffix != "":
			if !isAddr && strings.HasSuffix(host, "."+p.suffix) && len(host) > len(p.suffix)+1 {
				return true
			}
		case !isAddr && host == p.name:
			return true
		}
	}
	return false
}

// SourceHost is the lower-case host (without brackets) and the port (443 when none is
// given) an https:// or oci:// source is fetched from.
func SourceHost(source string) (host, port string, ok bool) {
	u, err := url.Parse(source)
	if err != nil || u.Scheme != "https" && u.Scheme != "oci" || u.Hostname() == "" {
		return "", "", false
	}
	host, port = URLHostPort(u)
	return host, port, true
}

// URLHostPort is u's lower-case host, without brackets, and its port, the scheme's when
// it names none (80 for http, 443 otherwise): what the image sources check a source, and
// each request of a fetch (a redirect's, a token realm's), by.
func URLHostPort(u *url.URL) (host, port string) {
	port = u.Port()
	if port == "" {
		port = "443"
		if u.Scheme == "http" {
			port = "80"
		}
	}
	return strings.ToLower(u.Hostname()), port
}

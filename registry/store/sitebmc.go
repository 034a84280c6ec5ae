package store

import (
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"path"
	"strings"

	"github.com/better-compute/better-compute/proto"
)

// MaxBMCNetworks bounds a site's BMC networks.
const MaxBMCNetworks = 64

// CheckBMCNetworks refuses a list of BMC networks that is not at most MaxBMCNetworks
// CIDRs in their canonical form (10.20.0.0/16, fd00:20::/48; no address bits past the
// prefix), none twice, as INVALID_INPUT at bmcNetworks[i].
func CheckBMCNetworks(networks []string) error {
	if len(networks) > MaxBMCNetworks {
		return proto.Errorf(proto.InvalidInput, "%d BMC networks; a site has at most %d", len(networks), MaxBMCNetworks).WithPath("bmcNetworks")
	}
	seen := map[netip.Prefix]bool{}
	for i, n := range networks {
		path := fmt.Sprintf("bmcNetworks[%d]", i)
		p, err := netip.ParsePrefix(n)
		if err != nil || p.Addr().Zone() != "" {
			return proto.Errorf(proto.InvalidInput, "BMC network %q: write a CIDR such as 10.20.0.0/16", short(n)).WithPath(path)
		}
		if p.Masked() != p || p.Addr().Is4In6() {
			return proto.Errorf(proto.InvalidInput, "BMC network %s: write it as %s", n, p.Masked()).WithPath(path)
		}
		if seen[p] {
			return proto.Errorf(proto.InvalidInput, "BMC network %s is listed twice", n).WithPath(path)
		}
		seen[p] = true
	}
	return nil
}

// SetSiteBMCNetworks replaces the BMC networks of a site (empty: none); a bad list is
// INVALID_INPUT (CheckBMCNetworks) and changes nothing, an unknown site NOT_FOUND.
func (t *Tx) SetSiteBMCNetworks(id string, networks []string) (Site, error) {
	s, err := t.Site(id)
	if err != nil {
		return s, proto.AsError(err).WithPath("siteId")
	}
	if err := CheckBMCNetworks(networks); err != nil {
		return s, err
	}
	s.BMCNetworks = nil
	if len(networks) > 0 {
		s.BMCNetworks = networks
	}
	return s, t.put(bucketSites, []byte(id), s)
}

// CheckBMCAddress refuses a BMC address the site does not admit, as INVALID_INPUT at
// bmc.address with reason bmc-address-not-allowed:
//
//   - a socket of the site host (/PATH or unix:/PATH, a qmp VM's) unless platform, that
//     is, unless a root-tenant credential enrolled the node;
//   - a network address whose host is not an IP literal: a name would be resolved on the
//     site, where the registry cannot check what it resolves to;
//   - an IP address outside every one of the site's BMC networks. A site with none admits
//     no network address.
func (s Site) CheckBMCAddress(address string, platform bool) error {
	refuse := func(format string, args ...any) error {
		return proto.Errorf(proto.InvalidInput, format, args...).WithPath("bmc.address").WithReason(proto.ReasonBMCAddressNotAllowed)
	}
	a, err := parseBMCAddress(address)
	switch {
	case err != nil:
		return refuse("BMC address %q is not a URL", short(address))
	case a.socket != "" && platform:
		return nil
	case a.socket != "":
		return refuse("a BMC address that is a socket of the site host is the platform's to bind: give the BMC's IP address")
	case !a.ip.IsValid():
		return refuse("BMC address %q: its host must be an IP address, not a name", short(address))
	}
	for _, n := range s.BMCNetworks {
		if p, err := netip.ParsePrefix(n); err == nil && p.Contains(a.ip) {
			return nil
		}
	}
	if len(s.BMCNetworks) == 0 {
		return refuse("site %s admits no BMC on the network yet: the platform's operator lists its BMC networks with `better-compute sites update %s --bmc-networks CIDR[,CIDR]`", s.ID, s.ID)
	}
	return refuse("BMC address %s is outside the BMC networks of site %s", a.ip, s.ID)
}

// bmcAddress is what a BMC address reaches: a socket of the site host, or a host on the
// network.
type bmcAddress struct {
	// socket is the socket's cleaned path; "" for a network address.
	socket string
	// host is a network address's host (a URL's, or a host:port's), without brackets.
	host string
	// ip is host as an IP address without a zone, unmapped; invalid when host is no such
	// address.
	ip netip.Addr
}

// parseBMCAddress reads a BMC address: /PATH and unix:/PATH are sockets of the site
// host; a URL (scheme://host[:port]/...), host:port or a bare host a network address.
func parseBMCAddress(address string) (bmcAddress, error) {
	if strings.HasPrefix(address, "/") || strings.HasPrefix(address, "unix:") {
		return bmcAddress{socket: path.Clean(strings.TrimPrefix(address, "unix:"))}, nil
	}
	host := address
	if strings.Contains(address, "://") {
		u, err := url.Parse(address)
		if err != nil {
			return bmcAddress{}, err
		}
		host = u.Hostname()
	} else if h, _, err := net.SplitHostPort(address); err == nil {
		host = h
	}
	a := bmcAddress{host: strings.TrimSuffix(strings.TrimPrefix(host, "["), "]")}
	if ip, err := netip.ParseAddr(a.host); err == nil && ip.Zone() == "" {
		a.ip = ip.Unmap()
	}
	return a, nil
}

// bmcHost is the BMC an address reaches, as its site knows it: its IP address
// (10.20.0.5, 10.20.0.5:443, https://10.20.0.5 and https://[::ffff:10.20.0.5]:8443 are
// one BMC) or, for a socket of the site host, unix: and its cleaned path. An address
// that is neither (a name, which no binding admits now) is itself, lower-case.
func bmcHost(address string) string {
	a, err := parseBMCAddress(address)
	switch {
	case err != nil:
		return strings.ToLower(address)
	case a.socket != "":
		return "unix:" + a.socket
	case a.ip.IsValid():
		return a.ip.String()
	}
	return strings.ToLower(a.host)
}

// short is at most the first 64 bytes of an input, for a message quoting it.
func short(s string) string {
	if len(s) > 64 {
		return s[:64] + "..."
	}
	return s
}

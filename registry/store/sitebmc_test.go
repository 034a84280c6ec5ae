package store

import (
	"testing"

	"github.com/better-compute/better-compute/proto"
)

func TestSiteBMCNetworks(t *testing.T) {
	eachBackend(t, func(t *testing.T, open opener) {
		s := openTest(t, open)
		bad := map[string]struct {
			networks []string
			path     string
		}{
			"not a CIDR":        {[]string{"10.20.0.0/16", "10.30.0.1"}, "bmcNetworks[1]"},
			"host bits set":     {[]string{"10.20.0.1/16"}, "bmcNetworks[0]"},
			"listed twice":      {[]string{"10.20.0.0/16", "10.20.0.0/16"}, "bmcNetworks[1]"},
			"a zone":            {[]string{"fe80::%eth0/64"}, "bmcNetworks[0]"},
			"mapped IPv4":       {[]string{"::ffff:10.0.0.0/104"}, "bmcNetworks[0]"},
			"too many networks": {make([]string, MaxBMCNetworks+1), "bmcNetworks"},
		}
		err := s.Update(func(tx *Tx) error {
			if _, err := tx.CreateSite("rack-a"); err != nil {
				return err
			}
			for name, tc := range bad {
				if _, err := tx.SetSiteBMCNetworks("rack-a", tc.networks); proto.CodeOf(err) != proto.InvalidInput || proto.AsError(err).Details.Path != tc.path {
					t.Errorf("%s: %v, want INVALID_INPUT at %s", name, err, tc.path)
				}
			}
			if _, err := tx.SetSiteBMCNetworks("rack-b", nil); proto.CodeOf(err) != proto.NotFound {
				t.Errorf("an unknown site: %v, want NOT_FOUND", err)
			}
			_, err := tx.SetSiteBMCNetworks("rack-a", []string{"10.20.0.0/16", "fd00:20::/48"})
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		var site Site
		s.View(func(tx *Tx) (err error) { site, err = tx.Site("rack-a"); return err })
		cases := map[string]struct {
			address  string
			platform bool
			ok       bool
		}{
			"an address in a network":         {address: "10.20.3.4", ok: true},
			"host:port":                       {address: "10.20.3.4:8443", ok: true},
			"an https URL":                    {address: "https://10.20.3.4", ok: true},
			"IPv6 in brackets":                {address: "https://[fd00:20::5]:443", ok: true},
			"IPv6 bare":                       {address: "fd00:20::5", ok: true},
			"IPv4 mapped into IPv6":           {address: "https://[::ffff:10.20.3.4]", ok: true},
			"outside every network":           {address: "https://10.21.0.1"},
			"loopback":                        {address: "127.0.0.1:443"},
			"a host name":                     {address: "https://bmc-7.rack-a.example"},
			"a name that looks like a prefix": {address: "10.20.3.4.nip.io"},
			"a zone":                          {address: "https://[fd00:20::5%25eth0]"},
			"a tenant's socket":               {address: "unix:/var/run/docker.sock"},
			"a tenant's socket path":          {address: "/run/qmp/n1.sock"},
			"the platform's socket":           {address: "unix:/run/qmp/n1.sock", platform: true, ok: true},
			"the platform's outside address":  {address: "https://192.0.2.1", platform: true},
		}
		for name, tc := range cases {
			err := site.CheckBMCAddress(tc.address, tc.platform)
			if tc.ok != (err == nil) {
				t.Errorf("%s: CheckBMCAddress(%q) = %v, want ok %v", name, tc.address, err, tc.ok)
			}
			if err == nil {
				continue
			}
			if e := proto.AsError(err); e.Code != proto.InvalidInput || e.Details.Path != "bmc.address" || e.Details.Reason != proto.ReasonBMCAddressNotAllowed {
				t.Errorf("%s: %v, want INVALID_INPUT at bmc.address, reason %s", name, err, proto.ReasonBMCAddressNotAllowed)
			}
		}
		if err := (Site{ID: "rack-c"}).CheckBMCAddress("10.20.3.4", true); err == nil {
			t.Error("a site without BMC networks admits a network address")
		}
	})
}

// FuzzCheckBMCAddress: any address a tenant writes is admitted or refused as
// INVALID_INPUT quoting a short prefix of it at most, and any network an operator writes
// likewise, never a panic.
func FuzzCheckBMCAddress(f *testing.F) {
	for _, a := range []string{"10.20.3.4", "https://10.20.3.4:443", "https://[fd00:20::5]", "unix:/x", "https://a@10.20.3.4/x", "%", "[", "http://[::1"} {
		f.Add(a)
	}
	site := Site{ID: "rack-a", BMCNetworks: []string{"10.20.0.0/16", "fd00:20::/48"}}
	f.Fuzz(func(t *testing.T, address string) {
		if err := CheckBMCNetworks([]string{address}); err != nil && proto.CodeOf(err) != proto.InvalidInput {
			t.Fatalf("network %q: %v, want INVALID_INPUT", address, err)
		}
		err := site.CheckBMCAddress(address, false)
		if err == nil {
			return
		}
		if proto.CodeOf(err) != proto.InvalidInput {
			t.Fatalf("%q: %v, want INVALID_INPUT", address, err)
		}
		if n := len(err.Error()); n > 512 {
			t.Fatalf("the refusal quotes too much: %d bytes", n)
		}
	})
}

package agents

import (
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"testing"

	"github.com/better-compute/better-compute/proto"
	"github.com/google/go-cmp/cmp"
)

func TestIdentify(t *testing.T) {
	state := func(cn string, ou ...string) tls.ConnectionState {
		leaf := &x509.Certificate{Subject: pkix.Name{CommonName: cn, OrganizationalUnit: ou}}
		return tls.ConnectionState{PeerCertificates: []*x509.Certificate{leaf}, VerifiedChains: [][]*x509.Certificate{{leaf}}}
	}
	cases := map[string]struct {
		cs   tls.ConnectionState
		want identity
		ok   bool
	}{
		"node":         {cs: state("gpu-01", "node"), want: identity{node: "gpu-01", role: proto.RoleNode}, ok: true},
		"site":         {cs: state("rack-7", "site"), want: identity{node: "rack-7", role: proto.RoleSite}, ok: true},
		"ramdisk":      {cs: state("gpu-01", "ramdisk"), want: identity{node: "gpu-01", role: proto.RoleRamdisk}, ok: true},
		"no role":      {cs: state("gpu-01")},
		"two roles":    {cs: state("gpu-01", "node", "site")},
		"unknown role": {cs: state("gpu-01", "operator")},
		"bad node id":  {cs: state("../etc", "node")},
		"empty":        {cs: state("", "node")},
		"unverified":   {cs: tls.ConnectionState{PeerCertificates: state("gpu-01", "node").PeerCertificates}},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got, _, err := identify(tc.cs)
			if tc.ok != (err == nil) {
				t.Fatalf("got %v, want ok %v", err, tc.ok)
			}
			if err != nil && proto.CodeOf(err) != proto.Unauthenticated {
				t.Fatalf("code %s, want UNAUTHENTICATED", proto.CodeOf(err))
			}
			if diff := cmp.Diff(tc.want, got, cmp.AllowUnexported(identity{})); diff != "" {
				t.Errorf("identity (-want +got):\n%s", diff)
			}
		})
	}
}

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
		leaf := &x509.Certificate{Subject: pkix.Name{CommonName: cn, OrganizationalUnit: ou, SerialNumber: "3"}}
		return tls.ConnectionState{PeerCertificates: []*x509.Certificate{leaf}, VerifiedChains: [][]*x509.Certificate{{leaf}}}
	}
	ofRun := state("gpu-01", "ramdisk")
	ofRun.PeerCertificates[0].Subject.Names = proto.AgentRunName("wf_0123")
	cases := map[string]struct {
		cs   tls.ConnectionState
		want proto.AgentCredential
		ok   bool
	}{
		"node":           {cs: state("gpu-01", "node"), want: proto.AgentCredential{Node: "gpu-01", Role: proto.RoleNode, Epoch: 3}, ok: true},
		"site":           {cs: state("rack-7", "site"), want: proto.AgentCredential{Node: "rack-7", Role: proto.RoleSite, Epoch: 3}, ok: true},
		"ramdisk":        {cs: state("gpu-01", "ramdisk"), want: proto.AgentCredential{Node: "gpu-01", Role: proto.RoleRamdisk, Epoch: 3}, ok: true},
		"ramdisk of run": {cs: ofRun, want: proto.AgentCredential{Node: "gpu-01", Role: proto.RoleRamdisk, Epoch: 3, Run: "wf_0123"}, ok: true},
		"no role":        {cs: state("gpu-01")},
		"two roles":      {cs: state("gpu-01", "node", "site")},
		"unknown role":   {cs: state("gpu-01", "operator")},
		"bad node id":    {cs: state("../etc", "node")},
		"empty":          {cs: state("", "node")},
		"unverified":     {cs: tls.ConnectionState{PeerCertificates: state("gpu-01", "node").PeerCertificates}},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got, err := identify(tc.cs)
			if tc.ok != (err == nil) {
				t.Fatalf("got %v, want ok %v", err, tc.ok)
			}
			if err != nil && proto.CodeOf(err) != proto.Unauthenticated {
				t.Fatalf("code %s, want UNAUTHENTICATED", proto.CodeOf(err))
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("credential (-want +got):\n%s", diff)
			}
		})
	}
}

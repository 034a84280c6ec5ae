package registry

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/better-compute/better-compute/proto"
	"github.com/better-compute/better-compute/registry/store"
	"github.com/better-compute/better-compute/registry/store/etcdtest"
)

// TestEtcdStoreTLS opens the etcd store of a cluster that serves TLS and requires client
// certificates: with the CA and the client certificate it opens; a registry that does not
// present the certificate, or does not trust the members' CA, is refused; half a client
// certificate is INVALID_INPUT before anything is dialled.
func TestEtcdStoreTLS(t *testing.T) {
	cluster, files := etcdtest.StartTLS(t)
	good := StoreConfig{Backend: "etcd", EtcdEndpoints: cluster.Endpoints, EtcdCA: files.CA, EtcdCert: files.ClientCert, EtcdKey: files.ClientKey}
	st, err := good.openStore("", store.Options{})
	if err != nil {
		t.Fatalf("with the CA and a client certificate: %v", err)
	}
	if err := st.Update(func(tx *store.Tx) error { _, err := tx.CreateTenant("acme"); return err }); err != nil {
		t.Fatal(err)
	}
	st.Close()

	_, stranger := etcdtest.StartTLS(t)
	refused := map[string]StoreConfig{
		"no client certificate": {Backend: "etcd", EtcdEndpoints: cluster.Endpoints, EtcdCA: files.CA},
		"a certificate of another CA": {Backend: "etcd", EtcdEndpoints: cluster.Endpoints, EtcdCA: files.CA,
			EtcdCert: stranger.ClientCert, EtcdKey: stranger.ClientKey},
		"members not trusted": {Backend: "etcd", EtcdEndpoints: cluster.Endpoints, EtcdCA: stranger.CA,
			EtcdCert: files.ClientCert, EtcdKey: files.ClientKey},
		"no TLS": {Backend: "etcd", EtcdEndpoints: cluster.Endpoints},
	}
	for name, sc := range refused {
		t.Run(name, func(t *testing.T) {
			t.Parallel() // each waits out the dial timeout
			if st, err := sc.openStore("", store.Options{}); err == nil {
				st.Close()
				t.Fatal("opened; want the cluster refused")
			}
		})
	}

	bad := filepath.Join(t.TempDir(), "ca.pem")
	os.WriteFile(bad, []byte("not pem"), 0o600)
	invalid := map[string]struct {
		sc   StoreConfig
		path string
	}{
		"cert without key": {StoreConfig{Backend: "etcd", EtcdEndpoints: cluster.Endpoints, EtcdCert: files.ClientCert}, "--etcd-key"},
		"CA not PEM":       {StoreConfig{Backend: "etcd", EtcdEndpoints: cluster.Endpoints, EtcdCA: bad}, "--etcd-ca"},
		"no endpoints":     {StoreConfig{Backend: "etcd"}, "--etcd-endpoints"},
		"unknown backend":  {StoreConfig{Backend: "sqlite"}, "--store"},
	}
	for name, tc := range invalid {
		t.Run(name, func(t *testing.T) {
			_, err := tc.sc.openStore(t.TempDir(), store.Options{})
			if e := proto.AsError(err); e.Code != proto.InvalidInput || e.Details.Path != tc.path {
				t.Fatalf("got %v, want INVALID_INPUT at %s", err, tc.path)
			}
		})
	}
}

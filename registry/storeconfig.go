package registry

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"os"
	"path/filepath"

	"github.com/better-compute/better-compute/proto"
	"github.com/better-compute/better-compute/registry/store"
)

// StoreConfig says where the registry's records are: the bbolt file DATA_DIR/registry.db
// (the zero value), or an etcd cluster several replicas share (docs/store.md).
type StoreConfig struct {
	// Backend is "bbolt" (or "") or "etcd".
	Backend string
	// EtcdEndpoints are the etcd cluster's client URLs.
	EtcdEndpoints []string
	// EtcdPrefix is the key prefix the records live under (store.DefaultEtcdPrefix when "").
	EtcdPrefix string
	// EtcdCA, EtcdCert and EtcdKey are PEM files: the CA the members' certificates are
	// checked against, and the client's certificate and key; all optional.
	EtcdCA, EtcdCert, EtcdKey string
}

// TenantBounds bound the objects of each kind a tenant may hold in the store
// (store.TenantBounds).
type TenantBounds = store.TenantBounds

// The defaults of TenantBounds.
const (
	DefaultTenantSecrets         = store.DefaultTenantSecrets
	DefaultTenantImages          = store.DefaultTenantImages
	DefaultTenantProfileVersions = store.DefaultTenantProfileVersions
	DefaultTenantCredentials     = store.DefaultTenantCredentials
	DefaultTenantPools           = store.DefaultTenantPools
	DefaultTenantNodes           = store.DefaultTenantNodes
)

// openStore opens the store sc names, the bbolt one in dataDir by default. A store of a
// format this release cannot read is INVALID_CONFIG at the flag naming it, and a bbolt
// file a running registry holds INVALID_STATE at --data-dir.
func (sc StoreConfig) openStore(dataDir string, opts store.Options) (*store.Store, error) {
	switch sc.Backend {
	case "", "bbolt":
		s, err := store.Open(dataDir, opts)
		return s, storeAt(err, "--data-dir")
	case "etcd":
		cfg, err := sc.etcd()
		if err != nil {
			return nil, err
		}
		cfg.CheckLimits = !opts.ReadOnly // the probe writes
		s, err := store.OpenEtcd(cfg, opts)
		return s, storeAt(err, "--etcd-prefix")
	}
	return nil, proto.Errorf(proto.InvalidInput, "store %q is neither bbolt nor etcd", sc.Backend).WithPath("--store")
}

// storeAt names flag as the path of err when err refuses a store of a format this
// release cannot read (store.FormatError) or a bbolt file another process holds
// (store.ErrLocked), and returns any other err as it is.
func storeAt(err error, flag string) error {
	if _, ok := errors.AsType[*store.FormatError](err); !ok && !errors.Is(err, store.ErrLocked) {
		return err
	}
	if pe, ok := errors.AsType[*proto.Error](err); ok {
		return pe.WithPath(flag)
	}
	return err
}

// etcd is the etcd store's configuration, its TLS files read.
func (sc StoreConfig) etcd() (store.EtcdConfig, error) {
	cfg := store.EtcdConfig{Endpoints: sc.EtcdEndpoints, Prefix: sc.EtcdPrefix, CheckLimits: true}
	if len(cfg.Endpoints) == 0 {
		return cfg, proto.Errorf(proto.InvalidInput, "the etcd store needs its cluster's client URLs: give --etcd-endpoints URL,URL,URL").WithPath("--etcd-endpoints")
	}
	if sc.EtcdCA == "" && sc.EtcdCert == "" && sc.EtcdKey == "" {
		return cfg, nil
	}
	cfg.TLS = &tls.Config{MinVersion: tls.VersionTLS12}
	if sc.EtcdCA != "" {
		pem, err := os.ReadFile(sc.EtcdCA)
		if err != nil {
			return cfg, proto.Errorf(proto.InvalidInput, "etcd CA: %v", err).WithPath("--etcd-ca")
		}
		cfg.TLS.RootCAs = x509.NewCertPool()
		if !cfg.TLS.RootCAs.AppendCertsFromPEM(pem) {
			return cfg, proto.Errorf(proto.InvalidInput, "etcd CA %s holds no PEM certificate", sc.EtcdCA).WithPath("--etcd-ca")
		}
	}
	if (sc.EtcdCert == "") != (sc.EtcdKey == "") {
		return cfg, proto.Errorf(proto.InvalidInput, "give both --etcd-cert and --etcd-key, or neither").WithPath("--etcd-key")
	}
	if sc.EtcdCert != "" {
		pair, err := tls.LoadX509KeyPair(sc.EtcdCert, sc.EtcdKey)
		if err != nil {
			return cfg, proto.Errorf(proto.InvalidInput, "etcd client certificate: %v", err).WithPath("--etcd-cert")
		}
		cfg.TLS.Certificates = []tls.Certificate{pair}
	}
	return cfg, nil
}

// CopySummary is what CopyStore copied and read back equal, as `store copy` prints it.
type CopySummary struct {
	Buckets int   `json:"buckets"`
	Records int   `json:"records"`
	Bytes   int64 `json:"bytes"`
}

// CopyStore copies the bbolt store of a stopped registry's data directory into an empty
// etcd prefix, reads every record back and compares it; progress is told of each
// bucket copied, then of each read back (store.CopyCopied, store.CopyReadBack).
func CopyStore(dataDir string, to StoreConfig, progress func(phase, bucket string, records int)) (CopySummary, error) {
	if _, err := os.Stat(filepath.Join(dataDir, store.FileName)); err != nil {
		return CopySummary{}, proto.Errorf(proto.InvalidInput, "no store in %s: %v", dataDir, err).WithPath("--from-data-dir")
	}
	src, err := store.Open(dataDir, store.Options{})
	if err != nil {
		return CopySummary{}, storeAt(err, "--from-data-dir")
	}
	defer src.Close()
	to.Backend = "etcd"
	dst, err := to.openStore("", store.Options{})
	if err != nil {
		return CopySummary{}, storeAt(err, "--to-etcd-prefix")
	}
	defer dst.Close()
	stats, err := src.CopyTo(dst, progress)
	return CopySummary{Buckets: stats.Buckets, Records: stats.Records, Bytes: stats.Bytes}, err
}

// CheckSummary is what CheckStore found, as `store check` prints it.
type CheckSummary struct {
	// Problems are the inconsistencies found, one sentence each; none when the store is
	// whole.
	Problems []string `json:"problems"`
}

// CheckStore opens the store sc names (the bbolt file in dataDir by default) read-only,
// repairing nothing, and checks it whole (store.Store.Check). A store it cannot open, or
// cannot finish reading, is an error; a store it read whole returns every problem found,
// none when it is consistent.
func CheckStore(dataDir string, sc StoreConfig) (CheckSummary, error) {
	if sc.Backend == "" || sc.Backend == "bbolt" {
		if _, err := os.Stat(filepath.Join(dataDir, store.FileName)); err != nil {
			return CheckSummary{}, proto.Errorf(proto.InvalidInput, "no store in %s: %v", dataDir, err).WithPath("--data-dir")
		}
	}
	s, err := sc.openStore(dataDir, store.Options{ReadOnly: true})
	if err != nil {
		return CheckSummary{}, err
	}
	defer s.Close()
	sum := CheckSummary{Problems: []string{}}
	for _, e := range proto.Joined(s.Check()) {
		sum.Problems = append(sum.Problems, e.Error())
	}
	return sum, nil
}

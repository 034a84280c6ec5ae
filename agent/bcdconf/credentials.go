package bcdconf

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"

	"github.com/better-compute/better-compute/fsutil"
	"github.com/better-compute/better-compute/proto/bcdargv"
)

// Agent is what an agent mode runs its session with: the config, the agent's client
// certificate and the CA its registry's certificates chain to.
type Agent struct {
	Config      Config
	Certificate tls.Certificate
	ServingCAs  *x509.CertPool
}

// LoadAgent reads a joined configuration directory. A private key its group or others
// may use is refused (fsutil.ReadPrivate), as ssh refuses one. A directory with a key
// and no config.toml, or a key and certificate that are no pair, is a join cut short
// (Write): the refusal says to join again, with a new token, since the registry spent
// the one the join sent.
func LoadAgent(dir string) (Agent, error) {
	c, err := Load(dir)
	if errors.Is(err, os.ErrNotExist) {
		if _, keyErr := os.Stat(filepath.Join(dir, KeyFile)); keyErr == nil {
			return Agent{}, fmt.Errorf("%w: %s holds an agent key but no %s, so a `bcd join` into it was cut short: %s", err, dir, bcdargv.ConfigFile, joinAgain)
		}
		return Agent{}, fmt.Errorf("%w (run `bcd join` first)", err)
	}
	if err != nil {
		return Agent{}, err
	}
	if c.AgentEndpoint == "" {
		return Agent{}, fmt.Errorf("%s names no agentEndpoint: join again with a registry that runs the agent endpoint", filepath.Join(dir, bcdargv.ConfigFile))
	}
	certFile, keyFile := filepath.Join(dir, CertFile), filepath.Join(dir, KeyFile)
	if _, err := os.Stat(filepath.Join(dir, RenewedFile)); err == nil {
		certFile, keyFile = filepath.Join(dir, RenewedFile), filepath.Join(dir, RenewedFile) // a renewal's save was cut short
	}
	keyPEM, err := fsutil.ReadPrivate(keyFile) // refused when others may read the key
	if err != nil {
		return Agent{}, err
	}
	certPEM, err := os.ReadFile(certFile)
	if err != nil {
		return Agent{}, err
	}
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return Agent{}, fmt.Errorf("agent certificate in %s: %w: %s and %s are not a key and its certificate: %s", dir, err, keyFile, certFile, joinAgain)
	}
	caPEM, err := os.ReadFile(filepath.Join(dir, ServingCAFile))
	if err != nil {
		return Agent{}, err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		return Agent{}, fmt.Errorf("%s holds no certificate", filepath.Join(dir, ServingCAFile))
	}
	return Agent{Config: c, Certificate: cert, ServingCAs: pool}, nil
}

// joinAgain is what to do about a configuration directory a join or its files' changes
// left unusable.
const joinAgain = "mint a new join token for the node and run `bcd join` again"

// SaveRenewed keeps a renewed certificate and its key in dir in place of previous, the
// certificate the agent ran with, which a join or an earlier renewal wrote. A crash at
// any point leaves a key and certificate that match: both go first into RenewedFile in
// one atomic write, which LoadAgent prefers while it exists, then over KeyFile and
// CertFile, and RenewedFile goes last. It runs under the directory's lock (lockDir), and
// saves nothing when dir no longer holds previous: a `bcd join` into the directory since
// the agent started holds another identity there, and the renewal of the one it replaced
// must not go beside its config (ErrJoinedSince).
func SaveRenewed(dir string, previous, renewed tls.Certificate) error {
	unlock, err := lockDir(dir)
	if err != nil {
		return err
	}
	defer unlock()
	if held, err := heldCertificate(dir); err != nil {
		return err
	} else if len(previous.Certificate) == 0 || !bytes.Equal(held, previous.Certificate[0]) {
		return fmt.Errorf("%w: %s holds another certificate than the one this agent runs with; the renewed one is not saved there: restart bcd to run as the node joined there", ErrJoinedSince, dir)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(renewed.PrivateKey)
	if err != nil {
		return fmt.Errorf("renewed key: %w", err)
	}
	keyPEM := pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER})
	certPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: renewed.Certificate[0]})
	path := filepath.Join(dir, RenewedFile)
	if err := fsutil.WriteFileAtomic(path, append(slices.Clone(keyPEM), certPEM...), 0o600); err != nil {
		return err
	}
	if err := fsutil.WriteFileAtomic(filepath.Join(dir, KeyFile), keyPEM, 0o600); err != nil {
		return err
	}
	if err := fsutil.WriteFileAtomic(filepath.Join(dir, CertFile), certPEM, 0o644); err != nil {
		return err
	}
	return os.Remove(path)
}

// ErrJoinedSince is SaveRenewed's refusal of a directory another join wrote since the
// agent started.
var ErrJoinedSince = errors.New("the configuration directory was joined again since this agent started")

// heldCertificate is the DER of the certificate LoadAgent would load from dir: a cut-short
// renewal's (RenewedFile) while it exists, else CertFile's.
func heldCertificate(dir string) ([]byte, error) {
	path := filepath.Join(dir, RenewedFile)
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		path = filepath.Join(dir, CertFile)
		data, err = os.ReadFile(path)
	}
	if err != nil {
		return nil, err
	}
	for block, rest := pem.Decode(data); block != nil; block, rest = pem.Decode(rest) {
		if block.Type == "CERTIFICATE" {
			return block.Bytes, nil
		}
	}
	return nil, fmt.Errorf("%s holds no certificate", path)
}

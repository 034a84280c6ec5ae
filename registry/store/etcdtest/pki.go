package etcdtest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"
)

// pkiFiles are a TLS cluster's files: the client's, and the members' certificate (for
// serving, and for the members' own gateway connecting to them).
type pkiFiles struct {
	TLSFiles
	serverCert, serverKey string
}

func (p *pkiFiles) clientTLS() (*tls.Config, error) {
	pair, err := tls.LoadX509KeyPair(p.ClientCert, p.ClientKey)
	if err != nil {
		return nil, err
	}
	ca, err := os.ReadFile(p.CA)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(ca)
	return &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{pair}}, nil
}

// writePKI makes a CA, a server certificate for 127.0.0.1 and a client certificate in dir.
func writePKI(dir string) (pkiFiles, error) {
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return pkiFiles{}, err
	}
	now := time.Now()
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "etcdtest CA"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour), IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		return pkiFiles{}, err
	}
	ca, _ := x509.ParseCertificate(caDER)
	f := pkiFiles{TLSFiles: TLSFiles{CA: filepath.Join(dir, "ca.crt")}}
	if err := writePEM(f.CA, "CERTIFICATE", caDER); err != nil {
		return f, err
	}
	issue := func(name string, serial int64, ips []net.IP, usage ...x509.ExtKeyUsage) (string, string, error) {
		key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			return "", "", err
		}
		tmpl := &x509.Certificate{SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: name},
			NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour), IPAddresses: ips,
			KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: usage}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
		if err != nil {
			return "", "", err
		}
		keyDER, err := x509.MarshalPKCS8PrivateKey(key)
		if err != nil {
			return "", "", err
		}
		cert, keyFile := filepath.Join(dir, name+".crt"), filepath.Join(dir, name+".key")
		if err := writePEM(cert, "CERTIFICATE", der); err != nil {
			return "", "", err
		}
		return cert, keyFile, writePEM(keyFile, "PRIVATE KEY", keyDER)
	}
	if f.serverCert, f.serverKey, err = issue("server", 2, []net.IP{net.IPv4(127, 0, 0, 1)}, x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth); err != nil {
		return f, err
	}
	f.ClientCert, f.ClientKey, err = issue("client", 3, nil, x509.ExtKeyUsageClientAuth)
	return f, err
}

func writePEM(path, kind string, der []byte) error {
	return os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: kind, Bytes: der}), 0o600)
}

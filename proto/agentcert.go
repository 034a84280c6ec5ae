package proto

import (
	"crypto/x509"
	"strconv"
)

// IdentityEpoch is the identity epoch an agent certificate belongs to: the Subject's
// serialNumber attribute, a decimal count the registry moves so that the certificates
// issued before stop working. A machine's (roles node and ramdisk) moves each time a
// workflow takes the machine away from its installed OS (a deploy, a release, a retire)
// and when an operator revokes its agents' certificates; a site agent's when an
// operator revokes its certificates. A certificate without it (one issued before
// epochs, or a site agent's before they had them) is of epoch 0.
func IdentityEpoch(cert *x509.Certificate) (int64, error) {
	s := cert.Subject.SerialNumber
	if s == "" {
		return 0, nil
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n < 0 || strconv.FormatInt(n, 10) != s {
		return 0, Errorf(Unauthenticated, "agent certificate of %q: identity epoch %q is not a count", cert.Subject.CommonName, s)
	}
	return n, nil
}

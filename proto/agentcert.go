package proto

import (
	"crypto/x509"
	"strconv"
)

// IdentityEpoch is the installation of its machine an agent certificate of role node or
// ramdisk belongs to: the Subject's serialNumber attribute, a decimal count the registry moves
// each time a workflow takes the machine away from its installed OS (a deploy, a release,
// a retire), so that the certificates of an earlier installation stop working. A
// certificate without it (a site agent's, or one issued before epochs) is of epoch 0.
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

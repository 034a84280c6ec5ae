package proto

import (
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/asn1"
	"strconv"
)

// AgentCredential is what an agent certificate names that the registry checks it by
// (store.Tx.CheckAgent): the node it is for (its Subject's CommonName; a site agent's
// site), its role (its one OrganizationalUnit), the identity epoch it belongs to
// (IdentityEpoch) and, for a ramdisk, the workflow run that minted the join token it
// joined with (AgentRun).
type AgentCredential struct {
	Node  string
	Role  Role
	Epoch int64
	Run   string
}

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

// oidAgentRun is the Subject attribute an agent certificate names its workflow run in
// (AgentRun): X.520's description.
var oidAgentRun = asn1.ObjectIdentifier{2, 5, 4, 13}

// AgentRunName is the Subject attribute of an agent certificate that names run, the
// workflow run that minted the join token its agent joined with (AgentRun); none for
// "".
func AgentRunName(run string) []pkix.AttributeTypeAndValue {
	if run == "" {
		return nil
	}
	return []pkix.AttributeTypeAndValue{{Type: oidAgentRun, Value: run}}
}

// AgentRun is the workflow run an agent certificate names (AgentRunName): for a
// ramdisk, the run that minted the join token it joined with (boot.prepareRamdisk's,
// metal.ensureRamdisk's), whose end ends the certificate (store.Tx.CheckAgent). "" for
// none: a token an operator minted, another role's, or a certificate issued before
// certificates named their run.
func AgentRun(cert *x509.Certificate) string {
	for _, a := range cert.Subject.Names {
		if s, ok := a.Value.(string); ok && a.Type.Equal(oidAgentRun) {
			return s
		}
	}
	return ""
}

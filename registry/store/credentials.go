package store

import (
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"strings"
	"time"

	"github.com/better-compute/better-compute/proto"
)

// Credential is a bearer secret of one tenant with the actions it may perform. Only the
// SHA-256 of its secret is kept: the secret itself is shown once, when it is made.
type Credential struct {
	ID         string    `json:"id"`
	Tenant     string    `json:"tenant"`
	Actions    []string  `json:"actions"`
	SecretHash string    `json:"secretHash"`
	CreatedAt  time.Time `json:"createdAt"`
}

const (
	bucketCredentials = "credentials"
	// credentialPrefix starts every bearer secret, so a leaked one is easy to find.
	credentialPrefix = "bcc_"
)

// CreateCredential makes a credential for an existing tenant and returns it with the
// bearer secret, which is not stored and cannot be recovered.
func (t *Tx) CreateCredential(tenant string, actions []string) (Credential, string, error) {
	if _, err := t.Tenant(tenant); err != nil {
		return Credential{}, "", err
	}
	id := randomHex(8)
	secret := make([]byte, 32)
	rand.Read(secret)
	c := Credential{
		ID:         id,
		Tenant:     tenant,
		Actions:    actions,
		SecretHash: hashSecret(secret),
		CreatedAt:  t.now,
	}
	bearer := credentialPrefix + id + "." + base64.RawURLEncoding.EncodeToString(secret)
	return c, bearer, t.put(bucketCredentials, []byte(id), c)
}

// Authenticate returns the credential a bearer secret names. Anything malformed,
// unknown or not matching is UNAUTHENTICATED, with the same message.
func (t *Tx) Authenticate(bearer string) (Credential, error) {
	denied := proto.Errorf(proto.Unauthenticated, "the credential is not valid: check the config file the CLI uses (--config or BC_CONFIG)")
	rest, ok := strings.CutPrefix(bearer, credentialPrefix)
	if !ok {
		return Credential{}, denied
	}
	id, enc, ok := strings.Cut(rest, ".")
	secret, err := base64.RawURLEncoding.DecodeString(enc)
	if !ok || err != nil {
		return Credential{}, denied
	}
	var c Credential
	found, err := t.get(bucketCredentials, []byte(id), &c)
	if err != nil {
		return Credential{}, err
	}
	if !found || subtle.ConstantTimeCompare([]byte(hashSecret(secret)), []byte(c.SecretHash)) != 1 {
		return Credential{}, denied
	}
	return c, nil
}

func hashSecret(secret []byte) string {
	sum := sha256.Sum256(secret)
	return hex.EncodeToString(sum[:])
}

// randomHex returns n random bytes as hex, for ids.
func randomHex(n int) string {
	b := make([]byte, n)
	rand.Read(b)
	return hex.EncodeToString(b)
}

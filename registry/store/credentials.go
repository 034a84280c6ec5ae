package store

import (
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"slices"
	"strings"
	"time"

	"github.com/better-compute/better-compute/proto"
)

// Credential is a bearer secret of one tenant with the actions it may perform. Only the
// SHA-256 of its secret is kept: the secret itself is shown once, when it is made. A
// credential that expired or was revoked authenticates nobody; its record stays for
// CredentialRetention, so lists show when and the logs' credential ids keep meaning
// something.
type Credential struct {
	ID         string    `json:"id"`
	Tenant     string    `json:"tenant"`
	Actions    []string  `json:"actions"`
	SecretHash string    `json:"secretHash"`
	CreatedAt  time.Time `json:"createdAt"`
	// ExpiresAt is when the credential stops working; zero for never.
	ExpiresAt time.Time `json:"expiresAt,omitzero"`
	// RevokedAt is when it was revoked; zero while it is not.
	RevokedAt time.Time `json:"revokedAt,omitzero"`
}

// Usable reports whether the credential authenticates at now: not revoked, not expired.
func (c Credential) Usable(now time.Time) bool {
	return c.RevokedAt.IsZero() && (c.ExpiresAt.IsZero() || now.Before(c.ExpiresAt))
}

const (
	bucketCredentials = "credentials"
	// credentialPrefix starts every bearer secret, so a leaked one is easy to find.
	credentialPrefix = "bcc_"
)

// secretEncoding spells the secret of a bearer credential and of a join token, and reads
// it back strictly: each secret has one spelling, so a presented one whose last character
// differs from it only in the bits padding leaves out is refused, not taken for the same.
var secretEncoding = base64.RawURLEncoding.Strict()

// CreateCredential makes a credential for an existing tenant, expiring at expiresAt
// (zero for never, else a time after now), and returns it with the bearer secret, which
// is not stored and cannot be recovered. A credential past the tenant's bound
// (TenantBounds.Credentials, revoked and expired ones counted until they are pruned) is
// INVALID_STATE, reason quota, at tenantId.
func (t *Tx) CreateCredential(tenant string, actions []string, expiresAt time.Time) (Credential, string, error) {
	if _, err := t.Tenant(tenant); err != nil {
		return Credential{}, "", err
	}
	if !expiresAt.IsZero() && !expiresAt.After(t.now) {
		return Credential{}, "", proto.Errorf(proto.InvalidInput, "the expiry %s is not in the future (now %s): give a later time or a duration",
			expiresAt.UTC().Format(time.RFC3339), t.now.UTC().Format(time.RFC3339)).WithPath("expiresAt")
	}
	if err := t.admit(countCredentials, tenant, "tenantId"); err != nil {
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
		ExpiresAt:  expiresAt,
	}
	bearer := credentialPrefix + id + "." + secretEncoding.EncodeToString(secret)
	return c, bearer, t.put(bucketCredentials, []byte(id), c)
}

// Credential returns one credential, NOT_FOUND when there is none of that id.
func (t *Tx) Credential(id string) (Credential, error) {
	var c Credential
	ok, err := t.get(bucketCredentials, []byte(id), &c)
	if err == nil && !ok {
		err = notFound("credential", id)
	}
	return c, err
}

// Credentials lists the tenant's credentials, revoked and expired ones too, in id order,
// one page at a time. It reads past other tenants' credentials: there are few. A page
// offers a next one only when the tenant has a credential after it: the bucket holds
// every tenant's, and a cursor whenever any credential followed would tell the tenant of
// other tenants' credentials, by the ids of its own.
func (t *Tx) Credentials(tenant string, p Page) ([]Credential, string, error) {
	var after []byte
	if p.Cursor != "" {
		var err error
		if after, err = DecodeCursor(p.Cursor, nil); err != nil {
			return nil, "", err
		}
	}
	var out []Credential
	more := false
	_, _, err := t.walk(bucketCredentials, nil, after, func() bool { return more }, func(k, v []byte) error {
		var c Credential
		if err := decode(bucketCredentials, k, v, &c); err != nil || c.Tenant != tenant {
			return err
		}
		if len(out) == p.limit() {
			more = true
			return nil
		}
		out = append(out, c)
		return nil
	})
	if err != nil || !more {
		return out, "", err
	}
	return out, EncodeCursor([]byte(out[len(out)-1].ID)), nil
}

// UsableHolding lists the tenant's usable credentials that carry action itself, in id
// order.
func (t *Tx) UsableHolding(tenant, action string) ([]Credential, error) {
	var out []Credential
	_, _, err := t.walk(bucketCredentials, nil, nil, func() bool { return false }, func(k, v []byte) error {
		var c Credential
		if err := decode(bucketCredentials, k, v, &c); err != nil {
			return err
		}
		if c.Tenant == tenant && c.Usable(t.now) && slices.Contains(c.Actions, action) {
			out = append(out, c)
		}
		return nil
	})
	return out, err
}

// RevokeCredential revokes a credential at once: it authenticates nobody from this
// transaction on. Revoking a revoked one changes nothing.
func (t *Tx) RevokeCredential(id string) (Credential, error) {
	c, err := t.Credential(id)
	if err != nil || !c.RevokedAt.IsZero() {
		return c, err
	}
	c.RevokedAt = t.now
	return c, t.put(bucketCredentials, []byte(id), c)
}

// CredentialRetention is how long a credential is kept once it was revoked or expired,
// for `credentials list` to show it and the logs' credential ids to keep meaning
// something; PruneCredentials deletes it then. Its secret is refused as before, as one
// the registry does not know.
const CredentialRetention = 90 * 24 * time.Hour

// PruneCredentials deletes the credentials revoked or expired more than
// CredentialRetention before the transaction's time, of those after the id after (all
// when nil), at most MaxPruned of them, and returns how many and where the next
// transaction goes on from (nil once it read the last; Store.PruneOnward). A usable
// credential, or one revoked or expired within its retention, stays.
func (t *Tx) PruneCredentials(after []byte) (int, []byte, error) {
	cutoff := t.now.Add(-CredentialRetention)
	return pruneBucket(t, bucketCredentials, after, func(_ []byte, c Credential) bool {
		revoked := !c.RevokedAt.IsZero() && c.RevokedAt.Before(cutoff)
		return revoked || !c.ExpiresAt.IsZero() && c.ExpiresAt.Before(cutoff)
	}, func(k []byte, c Credential) error {
		if err := t.release(countCredentials, c.Tenant); err != nil {
			return err
		}
		return t.del(bucketCredentials, k)
	})
}

// Authenticate returns the credential a bearer secret names. Anything malformed,
// unknown or not matching is UNAUTHENTICATED, with the same message; the holder of a
// revoked or expired credential's secret is told which, and when.
func (t *Tx) Authenticate(bearer string) (Credential, error) {
	denied := proto.Errorf(proto.Unauthenticated, "the credential is not valid: check the config file the CLI uses (--config or BC_CONFIG)")
	rest, ok := strings.CutPrefix(bearer, credentialPrefix)
	if !ok {
		return Credential{}, denied
	}
	id, enc, ok := strings.Cut(rest, ".")
	secret, err := secretEncoding.DecodeString(enc)
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
	switch {
	case !c.RevokedAt.IsZero():
		return Credential{}, proto.Errorf(proto.Unauthenticated, "credential %s was revoked at %s: ask for a new one", c.ID, c.RevokedAt.UTC().Format(time.RFC3339))
	case !c.Usable(t.now):
		return Credential{}, proto.Errorf(proto.Unauthenticated, "credential %s expired at %s: ask for a new one", c.ID, c.ExpiresAt.UTC().Format(time.RFC3339))
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

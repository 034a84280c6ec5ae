package store

import (
	"bytes"
	"crypto/rand"
	"crypto/subtle"
	"slices"
	"strings"
	"time"

	"github.com/better-compute/better-compute/proto"
)

// The kinds of join token.
const (
	// TokenProvisioned joins one installed node; userdata.render mints it.
	TokenProvisioned = "provisioned"
	// TokenRamdisk joins one node's ramdisk (proto.RoleRamdisk); one is minted per
	// ramdisk boot.
	TokenRamdisk = string(proto.RoleRamdisk)
	// TokenSite joins one site (rack) agent (proto.RoleSite); an operator makes it.
	TokenSite = string(proto.RoleSite)
)

// TokenKinds lists the kinds of join token.
var TokenKinds = []string{TokenProvisioned, TokenRamdisk, TokenSite}

// JoinToken is a single-use secret that lets one agent join as one node. Only the
// SHA-256 of its secret is kept; the secret is shown once, when it is minted.
type JoinToken struct {
	ID         string    `json:"id"`
	Kind       string    `json:"kind"`
	NodeID     string    `json:"nodeId"`
	Site       string    `json:"site,omitempty"`
	SecretHash string    `json:"secretHash"`
	CreatedAt  time.Time `json:"createdAt"`
	ExpiresAt  time.Time `json:"expiresAt"`
	// UsedAt is when the token was consumed; zero while it is unused.
	UsedAt time.Time `json:"usedAt,omitzero"`
	// UsedFrom is the source address of the join that consumed it, so that the token
	// presented again can be told apart by where it comes from; "" while it is unused,
	// for a join made in-process, and for a token used before it was recorded.
	UsedFrom string `json:"usedFrom,omitempty"`
	// UsedEpoch is the identity epoch the certificate its join issued names (Tx.AgentEpoch:
	// its node's, or for a site token its site's), recorded by that join (JoinedAt), so
	// that whether the agent it admitted still holds its identity is told by the epoch, a
	// logical clock, and not by comparing UsedAt with the time the epoch last moved, which
	// another replica's clock may have written. Nil while it is unused, and for a token
	// used before tokens recorded it.
	UsedEpoch *int64 `json:"usedEpoch,omitempty"`
	// UsedKey is the digest of the agent key its join certified (joinwire.KeyDigest),
	// recorded by that join (JoinedAt): the token presented again beside that key is the
	// join's own request sent again, which whoever saw that request can send without the
	// token's secret. "" while it is unused, and for a token used before tokens recorded
	// it.
	UsedKey string `json:"usedKey,omitempty"`
	// Workflow is the run id of the workflow that minted the token (boot.prepareRamdisk,
	// metal.ensureRamdisk, userdata.render), so that the token presented again fails that
	// run and no other; "" for a token an operator minted, and for one minted before
	// tokens recorded it.
	Workflow string `json:"workflow,omitempty"`
}

// TokenFor is what a join token is minted for: its kind, the node it admits and that
// node's site, and the run id of the workflow minting it ("" when an operator does).
type TokenFor struct {
	Kind, NodeID, Site, Workflow string
}

// How the address a used join token is presented again from compares with its join's
// (JoinToken.ReusedFrom).
const (
	// ReusedFromSameAddress: the address of its join.
	ReusedFromSameAddress = "same"
	// ReusedFromOtherAddress: another address than its join's.
	ReusedFromOtherAddress = "other"
	// ReusedFromUnknownAddress: either address is unknown (a join made in-process, or
	// one before joins recorded their address).
	ReusedFromUnknownAddress = "unknown"
)

// ReusedFrom compares from, the address the used token tok is presented again from, with
// the address of its join: ReusedFromSameAddress, ReusedFromOtherAddress or
// ReusedFromUnknownAddress.
func (tok JoinToken) ReusedFrom(from string) string {
	switch {
	case tok.UsedFrom == "" || from == "":
		return ReusedFromUnknownAddress
	case tok.UsedFrom == from:
		return ReusedFromSameAddress
	}
	return ReusedFromOtherAddress
}

const (
	bucketJoinTokens = "join_tokens"
	// bucketJoinTokensByNode indexes the join tokens by the node they admit: node id NUL
	// token id -> nothing, one entry per token, used or not, written and deleted with
	// it (format 3 on). Deleting a node's unused tokens reads its entries alone: it
	// walked every token of the store, whose count grows with the fleet (a token for
	// every ramdisk boot and installation, kept 30 days past its expiry), in the
	// transaction of every deploy, release, retire, user data render and revocation, and
	// on etcd that walk's range conflicted with every token any replica minted or
	// consumed meanwhile.
	bucketJoinTokensByNode = "join_tokens_by_node"
	// joinTokenPrefix starts every join token secret, so a leaked one is easy to find.
	joinTokenPrefix = "bcj_"
)

// CreateJoinToken stores a new unused token for f and returns it with its secret, which
// is not stored and cannot be recovered. The kind must be known, the node id set and the
// expiry in the future.
func (t *Tx) CreateJoinToken(f TokenFor, expiresAt time.Time) (JoinToken, string, error) {
	if !slices.Contains(TokenKinds, f.Kind) {
		return JoinToken{}, "", proto.Errorf(proto.InvalidInput, "token kind %q: the kinds are %v", f.Kind, TokenKinds).WithPath("kind")
	}
	if f.NodeID == "" {
		return JoinToken{}, "", proto.Errorf(proto.InvalidInput, "a join token is for one node: name it").WithPath("nodeId")
	}
	if !expiresAt.After(t.now) {
		return JoinToken{}, "", proto.Errorf(proto.InvalidInput, "a join token must expire in the future").WithPath("ttlSeconds")
	}
	secret := make([]byte, 32)
	rand.Read(secret)
	tok := JoinToken{
		ID:         randomHex(8),
		Kind:       f.Kind,
		NodeID:     f.NodeID,
		Site:       f.Site,
		SecretHash: hashSecret(secret),
		CreatedAt:  t.now,
		ExpiresAt:  expiresAt,
		Workflow:   f.Workflow,
	}
	bearer := joinTokenPrefix + tok.ID + "." + secretEncoding.EncodeToString(secret)
	if err := t.putRaw(bucketJoinTokensByNode, tokenNodeKey(tok), nil); err != nil {
		return JoinToken{}, "", err
	}
	return tok, bearer, t.put(bucketJoinTokens, []byte(tok.ID), tok)
}

// tokenNodeKey is tok's entry in bucketJoinTokensByNode.
func tokenNodeKey(tok JoinToken) []byte { return []byte(tok.NodeID + "\x00" + tok.ID) }

// deleteJoinToken deletes tok and its entry in bucketJoinTokensByNode.
func (t *Tx) deleteJoinToken(tok JoinToken) error {
	if err := t.del(bucketJoinTokensByNode, tokenNodeKey(tok)); err != nil {
		return err
	}
	return t.del(bucketJoinTokens, []byte(tok.ID))
}

// ConsumeJoinToken marks the token a secret names as used by a join from the source
// address from ("" when it has none) and returns it. A secret that is malformed, unknown
// or wrong is UNAUTHENTICATED; so is a used or expired token, with the reason token-used
// or token-expired. A used token is returned beside its token-used error: its secret
// matched, so whoever presents it again holds it, and the caller tells on that reuse
// (join.Service). Within one transaction nothing else can consume it, so of any number
// of racing joins exactly one gets the token; a caller that refuses the token afterwards
// fails its transaction and leaves it unused.
func (t *Tx) ConsumeJoinToken(secret, from string) (JoinToken, error) {
	tok, err := t.JoinTokenOf(secret)
	if err != nil {
		return JoinToken{}, err
	}
	if !tok.UsedAt.IsZero() {
		return tok, proto.Errorf(proto.Unauthenticated, "join token %s was already used at %s: a token works once, mint a new one", tok.ID, tok.UsedAt.Format(time.RFC3339)).WithReason(proto.ReasonTokenUsed)
	}
	if tok.Expired(t.now) {
		return JoinToken{}, proto.Errorf(proto.Unauthenticated, "join token %s expired at %s: mint a new one", tok.ID, tok.ExpiresAt.Format(time.RFC3339)).WithReason(proto.ReasonTokenExpired)
	}
	tok.UsedAt, tok.UsedFrom = t.now, from
	return tok, t.put(bucketJoinTokens, []byte(tok.ID), tok)
}

// JoinedAt records on tok, which a join consumed in this transaction
// (ConsumeJoinToken), the identity epoch of the certificate that join issues and the
// digest of the key it certifies, and returns it.
func (t *Tx) JoinedAt(tok JoinToken, epoch int64, key string) (JoinToken, error) {
	tok.UsedEpoch, tok.UsedKey = &epoch, key
	return tok, t.put(bucketJoinTokens, []byte(tok.ID), tok)
}

// JoinTokenOf returns the token a secret names, used or not, expired or not, without
// changing it. A secret that is malformed, unknown (never minted, revoked, pruned) or
// wrong is UNAUTHENTICATED, reason token-invalid.
func (t *Tx) JoinTokenOf(secret string) (JoinToken, error) {
	denied := proto.Errorf(proto.Unauthenticated, "the join token is not valid: mint a new one").WithReason(proto.ReasonTokenInvalid)
	rest, ok := strings.CutPrefix(strings.TrimSpace(secret), joinTokenPrefix)
	if !ok {
		return JoinToken{}, denied
	}
	id, enc, ok := strings.Cut(rest, ".")
	raw, err := secretEncoding.DecodeString(enc)
	if !ok || err != nil {
		return JoinToken{}, denied
	}
	var tok JoinToken
	found, err := t.get(bucketJoinTokens, []byte(id), &tok)
	if err != nil {
		return JoinToken{}, err
	}
	if !found || subtle.ConstantTimeCompare([]byte(hashSecret(raw)), []byte(tok.SecretHash)) != 1 {
		return JoinToken{}, denied
	}
	return tok, nil
}

// Expired says whether the token has expired at now.
func (tok JoinToken) Expired(now time.Time) bool { return !now.Before(tok.ExpiresAt) }

// RevokeJoinToken deletes the unused join token id, so no agent joins with it, and
// returns it. An unknown id is NOT_FOUND; a used token stays, as the record of its join,
// and is INVALID_STATE.
func (t *Tx) RevokeJoinToken(id string) (JoinToken, error) {
	var tok JoinToken
	found, err := t.get(bucketJoinTokens, []byte(id), &tok)
	switch {
	case err != nil:
		return tok, err
	case !found:
		return tok, proto.Errorf(proto.NotFound, "join token %q not found: `tokens list` shows them", id).WithPath("id")
	case !tok.UsedAt.IsZero():
		return tok, proto.Errorf(proto.InvalidState, "join token %s was used at %s: its agent joined; revoke that agent's identity instead", tok.ID, tok.UsedAt.Format(time.RFC3339)).WithPath("id")
	}
	return tok, t.deleteJoinToken(tok)
}

// DeleteUnusedJoinTokens deletes the unused join tokens minted for node and returns how
// many; used ones stay, as the record of its joins. It reads node's tokens alone
// (nodeJoinTokens).
func (t *Tx) DeleteUnusedJoinTokens(node string) (int, error) {
	return t.deleteNodeJoinTokens(node, func(tok JoinToken) bool { return tok.UsedAt.IsZero() })
}

// DeleteUnusedJoinTokensFor deletes the unused join tokens of f's kind minted for f's
// node by f's workflow and returns how many; used ones stay, as the record of their
// joins. A workflow that mints a node's token again (a step run anew) calls it first, so
// that only the token it mints last admits the node.
func (t *Tx) DeleteUnusedJoinTokensFor(f TokenFor) (int, error) {
	return t.deleteNodeJoinTokens(f.NodeID, func(tok JoinToken) bool {
		return tok.UsedAt.IsZero() && tok.Kind == f.Kind && tok.Workflow == f.Workflow
	})
}

// deleteNodeJoinTokens deletes the join tokens of node doomed says so of, found by its
// entries in bucketJoinTokensByNode, and returns how many. An entry whose token is gone
// or admits another node (none in a store only this release wrote: Check reports one)
// is left as it is.
func (t *Tx) deleteNodeJoinTokens(node string, doomed func(JoinToken) bool) (int, error) {
	prefix := []byte(node + "\x00")
	var toks []JoinToken
	c := t.kv.cursor(bucketJoinTokensByNode)
	for k, _ := c.Seek(prefix); k != nil && bytes.HasPrefix(k, prefix); k, _ = c.Next() {
		var tok JoinToken
		found, err := t.get(bucketJoinTokens, k[len(prefix):], &tok)
		if err != nil {
			return 0, err
		}
		if found && tok.NodeID == node && doomed(tok) {
			toks = append(toks, tok)
		}
	}
	for _, tok := range toks {
		if err := t.deleteJoinToken(tok); err != nil {
			return 0, err
		}
	}
	return len(toks), nil
}

// MaxPruned is the most records PruneJoinTokens, ExpireAgentCommands or PruneRuns
// deletes in one transaction, which keeps it within etcd's bounds (docs/store.md): a
// caller told MaxPruned calls again, in a new transaction, for the rest (Prune).
const MaxPruned = 1000

// Prune runs prune (ExpireAgentCommands, PruneRuns...) in transactions of its own until
// one deletes fewer than MaxPruned records, and returns how many it deleted in all.
func (s *Store) Prune(prune func(*Tx) (int, error)) (total int, err error) {
	return s.PruneOnward(func(tx *Tx, _ []byte) (int, []byte, error) {
		n, err := prune(tx)
		if n < MaxPruned {
			return n, nil, err
		}
		return n, []byte{}, err // from the start again: what it deleted is gone
	})
}

// PruneOnward runs prune (PruneJoinTokens, PruneEvents, PruneCredentials...) in
// transactions of its own, each walking on after the key where the one before stopped
// (nil for the first: from the start), until one returns a nil key (it reached the end),
// and returns how many records they deleted in all. The key moves on only once its
// transaction committed, so a pass read each key of its walk about once, however many
// transactions it takes: before, each walked from the bucket's start to where it found
// MaxPruned to delete, past every record the ones before kept, and a day's work grew with
// the square of its transactions.
func (s *Store) PruneOnward(prune func(tx *Tx, after []byte) (n int, next []byte, err error)) (total int, err error) {
	var after []byte
	for {
		var n int
		var next []byte
		if err := s.Update(func(tx *Tx) (err error) { n, next, err = prune(tx, after); return err }); err != nil {
			return total, err
		}
		if total += n; next == nil {
			return total, nil
		}
		after = next
	}
}

// PruneJoinTokens deletes the join tokens, used or not, that expired before cutoff, of
// those after the id after (all when nil), at most MaxPruned of them, and returns how
// many, and the last id it read when tokens remain after it (nil at the bucket's end):
// Store.PruneOnward calls it again from there.
func (t *Tx) PruneJoinTokens(cutoff time.Time, after []byte) (int, []byte, error) {
	return pruneBucket(t, bucketJoinTokens, after, func(_ []byte, tok JoinToken) bool { return tok.ExpiresAt.Before(cutoff) },
		func(_ []byte, tok JoinToken) error { return t.deleteJoinToken(tok) })
}

// pruneBucket deletes, with del, the records of bucket after the key after (all when
// nil) that doomed says so of (given each key and record), at most MaxPruned of them, reading each record once, and
// returns how many, and the last key it read when records remain after it (nil at the
// bucket's end), for Store.PruneOnward.
func pruneBucket[T any](t *Tx, bucket string, after []byte, doomed func(key []byte, rec T) bool, del func(key []byte, rec T) error) (int, []byte, error) {
	type found struct {
		key []byte
		rec T
	}
	var fs []found
	last, more, err := t.walk(bucket, nil, after, func() bool { return len(fs) == MaxPruned }, func(k, v []byte) error {
		var rec T
		if err := decode(bucket, k, v, &rec); err != nil {
			return err
		}
		if doomed(k, rec) {
			fs = append(fs, found{bytes.Clone(k), rec})
		}
		return nil
	})
	if err != nil {
		return 0, nil, err
	}
	for _, f := range fs {
		if err := del(f.key, f.rec); err != nil {
			return 0, nil, err
		}
	}
	if !more {
		last = nil
	}
	return len(fs), last, nil
}

// JoinTokens lists the join tokens, one page at a time.
func (t *Tx) JoinTokens(p Page) ([]JoinToken, string, error) {
	var out []JoinToken
	next, err := t.scan(bucketJoinTokens, nil, p, func(k, v []byte) (func(), error) {
		var tok JoinToken
		if err := decode(bucketJoinTokens, k, v, &tok); err != nil {
			return nil, err
		}
		return func() { out = append(out, tok) }, nil
	})
	return out, next, err
}

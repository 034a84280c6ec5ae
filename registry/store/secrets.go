package store

import (
	"time"

	"github.com/better-compute/better-compute/proto"
)

// Secret is one sealed secret, such as a node's user data. The store holds only its
// ciphertext: sealing and opening happen before and after the store (registry/secret).
type Secret struct {
	// Ref names the secret; it is what a workflow passes around instead of the secret.
	Ref string `json:"ref"`
	// Purpose says what the secret is for ("userdata"); a node has at most one secret of
	// each purpose.
	Purpose string `json:"purpose"`
	// NodeID is the node the secret belongs to.
	NodeID string `json:"nodeId"`
	// Sealed is the ciphertext.
	Sealed    []byte    `json:"sealed"`
	CreatedAt time.Time `json:"createdAt"`
}

const (
	bucketSecrets = "secrets"
	// bucketNodeSecrets indexes the current secret of each purpose and node: purpose,
	// node id -> ref.
	bucketNodeSecrets = "secrets_by_node"
)

func nodeSecretKey(purpose, nodeID string) []byte { return []byte(purpose + "\x00" + nodeID) }

// PutSecret stores a new secret and drops the node's earlier secret of the same
// purpose, so a node never has more than one (a re-rendered user data replaces the
// last). The ref must be new, the purpose and node set.
func (t *Tx) PutSecret(s Secret) error {
	if s.Ref == "" || s.Purpose == "" || s.NodeID == "" {
		return proto.Errorf(proto.Internal, "a secret needs a ref, a purpose and a node")
	}
	if t.getRaw(bucketSecrets, []byte(s.Ref)) != nil {
		return proto.Errorf(proto.Conflict, "secret %s exists already", s.Ref)
	}
	idx := nodeSecretKey(s.Purpose, s.NodeID)
	if old := t.getRaw(bucketNodeSecrets, idx); old != nil {
		if err := t.del(bucketSecrets, old); err != nil {
			return err
		}
	}
	s.CreatedAt = t.now
	if err := t.put(bucketSecrets, []byte(s.Ref), s); err != nil {
		return err
	}
	return t.putRaw(bucketNodeSecrets, idx, []byte(s.Ref))
}

// Secret returns the secret ref names, false when there is none (never was, or it was
// replaced).
func (t *Tx) Secret(ref string) (Secret, bool, error) {
	var s Secret
	ok, err := t.get(bucketSecrets, []byte(ref), &s)
	return s, ok, err
}

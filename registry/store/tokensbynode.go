package store

import (
	"bytes"
	"fmt"
)

// tokenIndexDiff compares bucketJoinTokensByNode with every join token, as tx reads
// them: the entries of tokens without theirs, then the entries no token has (it is gone,
// or admits another node), each in key order, and why each token it cannot read was
// left out (damaged: its entry, if any, is stray). Both are empty in a store of Format 3
// or later that only this release wrote.
func (t *Tx) tokenIndexDiff() (missing, stray [][]byte, damaged []error) {
	return entriesDiff(t, bucketJoinTokens, bucketJoinTokensByNode, tokenNodeKey)
}

// reindexTokens makes each of entries (keys of bucketJoinTokensByNode) say what the
// token it names says, as tx reads it: written when that token admits that node,
// dropped otherwise. So a list read in another transaction is applied safely.
func (t *Tx) reindexTokens(entries [][]byte) error {
	for _, k := range entries {
		node, id, _ := bytes.Cut(k, []byte{0})
		var tok JoinToken
		found, err := t.get(bucketJoinTokens, id, &tok)
		switch {
		case err != nil:
		case found && tok.NodeID == string(node):
			if t.getRaw(bucketJoinTokensByNode, k) == nil {
				err = t.putRaw(bucketJoinTokensByNode, k, nil)
			}
		default:
			err = t.del(bucketJoinTokensByNode, k)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// indexJoinTokens gives every join token its entry in bucketJoinTokensByNode and drops
// the entries no token has, as a store of a format before 3 is raised (a token it
// cannot read keeps none, and Check reports it): it reads every token once and writes
// what differs, MaxPruned entries a transaction, each read again there. The transaction
// that raises the format then does it again (finalTokenIndex), so that no token a
// replica of an earlier release minted meanwhile is left without its entry, which the
// deletion of its node's unused tokens would miss.
func (s *Store) indexJoinTokens() error { return s.fill(tokenIndex) }

// tokenIndex is bucketJoinTokensByNode as a format raise fills it.
var tokenIndex = derivedIndex{diff: (*Tx).tokenIndexDiff, reindex: (*Tx).reindexTokens}

// finalTokenIndex is indexJoinTokens in the transaction that raises the format
// (fillLast), so that no token a replica of an earlier release minted meanwhile is left
// without its entry.
func (t *Tx) finalTokenIndex() error { return t.fillLast(tokenIndex) }

// checkJoinTokensByNode is Check's report of bucketJoinTokensByNode: each token without
// its entry, which the deletion of its node's unused tokens (a revocation, a
// reinstall) misses, and each entry no token has.
func (t *Tx) checkJoinTokensByNode() []error {
	missing, stray, errs := t.tokenIndexDiff()
	for _, k := range missing {
		_, id, _ := bytes.Cut(k, []byte{0})
		errs = append(errs, fmt.Errorf("store: %s/%q has no entry in %s (%q), so deleting its node's unused tokens misses it: a write path missed it; report it with this line, and revoke the token (tokens revoke) if it is unused",
			bucketJoinTokens, id, bucketJoinTokensByNode, k))
	}
	for _, k := range stray {
		errs = append(errs, fmt.Errorf("store: %s/%q names no token of %s for that node: a write path left it behind; delete it",
			bucketJoinTokensByNode, k, bucketJoinTokens))
	}
	return errs
}

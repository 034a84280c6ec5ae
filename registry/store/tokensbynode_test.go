package store

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"
)

// mintFor stores a token for node in tx, unused, of the ramdisk kind, minted by run.
func mintFor(tx *Tx, node, run string) (JoinToken, error) {
	tok, _, err := tx.CreateJoinToken(TokenFor{Kind: TokenRamdisk, NodeID: node, Workflow: run}, tx.Now().Add(time.Hour))
	return tok, err
}

// nodeTokens is the ids of node's tokens as s reads them, unused ones only when unused.
func nodeTokens(t *testing.T, s *Store, node string, unused bool) []string {
	t.Helper()
	var ids []string
	err := s.View(func(tx *Tx) error {
		c := tx.kv.cursor(bucketJoinTokens)
		for k, v := c.First(); k != nil; k, v = c.Next() {
			var tok JoinToken
			if err := decode(bucketJoinTokens, k, v, &tok); err != nil {
				return err
			}
			if tok.NodeID == node && (!unused || tok.UsedAt.IsZero()) {
				ids = append(ids, tok.ID)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(ids)
	return ids
}

// TestDeletingANodesTokensReadsOnlyItsOwn: on etcd, the transactions that delete one
// node's unused join tokens (a workflow minting its token again, a reinstall's start, a
// revocation) commit at their first run although other replicas mint and consume other
// nodes' tokens meanwhile, and delete that node's unused tokens alone (not node-10's
// for node-1). Before, each walked every token of the store: its range, the whole
// bucket, conflicted with any token minted or consumed anywhere, and ran again, reading
// every token again, whose number grows with the fleet (30 days of every node's ramdisk
// boots and installations). A fleet's deploys took turns: three replicas minting 150
// tokens beside 30,000 took 171 s.
func TestDeletingANodesTokensReadsOnlyItsOwn(t *testing.T) {
	stores := replicas(t, 2)
	a, b := stores[0], stores[1]
	var secret string
	mustUpdate(t, a, func(tx *Tx) error {
		for _, node := range []string{"node-1", "node-1", "node-10", "node-2"} {
			if _, err := mintFor(tx, node, "wf_old"); err != nil {
				return err
			}
		}
		var err error
		_, secret, err = tx.CreateJoinToken(TokenFor{Kind: TokenRamdisk, NodeID: "node-2"}, tx.Now().Add(time.Hour))
		return err
	})
	used, _, _ := strings.Cut(strings.TrimPrefix(secret, joinTokenPrefix), ".")
	elsewhere := []func(tx *Tx) error{
		func(tx *Tx) error { _, err := mintFor(tx, "node-3", "wf_other"); return err },
		func(tx *Tx) error { _, err := tx.ConsumeJoinToken(secret, "192.0.2.9"); return err },
	}
	for i, deletion := range []struct {
		name string
		fn   func(tx *Tx) (int, error)
		want int
	}{
		{"a workflow minting again", func(tx *Tx) (int, error) {
			n, err := tx.DeleteUnusedJoinTokensFor(TokenFor{Kind: TokenRamdisk, NodeID: "node-1", Workflow: "wf_old"})
			if err == nil {
				_, err = mintFor(tx, "node-1", "wf_old")
			}
			return n, err
		}, 2},
		{"a revocation", func(tx *Tx) (int, error) { return tx.DeleteUnusedJoinTokens("node-1") }, 1},
	} {
		t.Run(deletion.name, func(t *testing.T) {
			runs, deleted := 0, 0
			mustUpdate(t, a, func(tx *Tx) (err error) {
				runs++
				if deleted, err = deletion.fn(tx); err != nil || runs > 1 {
					return err
				}
				// Another replica writes another node's token before this commits.
				return b.Update(elsewhere[i])
			})
			if runs != 1 || deleted != deletion.want {
				t.Errorf("ran %d times, deleting %d tokens; want once, %d: another node's token written meanwhile conflicted", runs, deleted, deletion.want)
			}
		})
	}
	if got := nodeTokens(t, a, "node-1", true); len(got) != 0 {
		t.Errorf("node-1's unused tokens left: %v", got)
	}
	for node, want := range map[string]int{"node-10": 1, "node-2": 2, "node-3": 1} {
		if got := nodeTokens(t, a, node, false); len(got) != want {
			t.Errorf("%s's tokens: %v, want %d", node, got, want)
		}
	}
	if got := nodeTokens(t, a, "node-2", false); !slices.Contains(got, used) {
		t.Errorf("node-2's used token %s is gone: %v", used, got)
	}
}

// TestAStoreOfFormat2IsIndexedByNodeAsItIsRaised: a store of format 2 (its join tokens
// without entries in join_tokens_by_node, more than one transaction indexes, and an
// entry naming no token) opened read-only is checked as it is; opened, it is raised to
// Format with every token indexed and the stray entry dropped, and the deletion of a
// node's unused tokens then deletes those minted before the raise: a revocation leaves
// none of them working. Each write path keeps the index (Check after each).
func TestAStoreOfFormat2IsIndexedByNodeAsItIsRaised(t *testing.T) {
	eachPlace(t, func(t *testing.T, open opener) {
		s, clk := openOnFakeClock(t, open)
		const tokens = MaxPruned + 300
		for i := 0; i < tokens; i += 500 {
			mustUpdate(t, s, func(tx *Tx) error {
				for j := i; j < min(i+500, tokens); j++ {
					if _, err := mintFor(tx, fmt.Sprintf("node-%d", j%13), fmt.Sprintf("wf_%d", j)); err != nil {
						return err
					}
				}
				return nil
			})
		}
		mustCheck(t, s, "minting")
		// As a release of format 2 left it: no entries, and one left behind.
		for {
			var n int
			mustUpdate(t, s, func(tx *Tx) error {
				c := tx.kv.cursor(bucketJoinTokensByNode)
				var keys [][]byte
				for k, _ := c.First(); k != nil && len(keys) < 500; k, _ = c.Next() {
					keys = append(keys, slices.Clone(k))
				}
				n = len(keys)
				for _, k := range keys {
					if err := tx.del(bucketJoinTokensByNode, k); err != nil {
						return err
					}
				}
				return nil
			})
			if n == 0 {
				break
			}
		}
		mustUpdate(t, s, func(tx *Tx) error { return tx.putRaw(bucketJoinTokensByNode, []byte("node-1\x00gone"), nil) })
		setFormat(t, s, []byte("2"))
		s.Close()

		ro := mustOpen(t, open, Options{ReadOnly: true})
		if err := ro.Check(); err != nil {
			t.Errorf("Check of a store of format 2, not indexed yet: %v", err)
		}
		ro.Close()

		s = mustOpen(t, open, Options{Now: clk.Now})
		if got := storedFormat(t, s); got != fmt.Sprint(Format) {
			t.Fatalf("format key %q after the open, want %d", got, Format)
		}
		mustCheck(t, s, "the raise")
		var deleted int
		mustUpdate(t, s, func(tx *Tx) (err error) { deleted, err = tx.DeleteUnusedJoinTokens("node-1"); return err })
		if want := (tokens + 11) / 13; deleted != want {
			t.Errorf("deleted %d of node-1's unused tokens minted before the raise, want all %d", deleted, want)
		}
		if got := nodeTokens(t, s, "node-1", false); len(got) != 0 {
			t.Errorf("node-1's tokens left: %v", got)
		}
		mustCheck(t, s, "a revocation")
		var tok JoinToken
		mustUpdate(t, s, func(tx *Tx) (err error) { tok, err = mintFor(tx, "node-1", "wf_new"); return err })
		mustUpdate(t, s, func(tx *Tx) (err error) { _, err = tx.RevokeJoinToken(tok.ID); return err })
		mustCheck(t, s, "tokens revoke")
		clk.Advance(2 * time.Hour)
		total, err := s.PruneOnward(func(tx *Tx, after []byte) (int, []byte, error) { return tx.PruneJoinTokens(tx.Now(), after) })
		if err != nil || total != tokens-deleted {
			t.Errorf("pruned %d tokens (%v), want the %d left", total, err, tokens-deleted)
		}
		mustCheck(t, s, "pruning")
	})
}

package store

import (
	"fmt"
	"testing"
	"time"
)

// countingKV counts the keys a transaction reads: each get, and each cursor move that
// lands on a key.
type countingKV struct {
	kvTx
	reads *int
}

func (c countingKV) get(bucket string, key []byte) []byte {
	*c.reads++
	return c.kvTx.get(bucket, key)
}

func (c countingKV) cursor(bucket string) cursor {
	return countingCursor{c.kvTx.cursor(bucket), c.reads}
}

type countingCursor struct {
	cursor
	reads *int
}

func (c countingCursor) landed(k, v []byte) ([]byte, []byte) {
	if k != nil {
		*c.reads++
	}
	return k, v
}

func (c countingCursor) First() ([]byte, []byte)        { return c.landed(c.cursor.First()) }
func (c countingCursor) Last() ([]byte, []byte)         { return c.landed(c.cursor.Last()) }
func (c countingCursor) Seek(k []byte) ([]byte, []byte) { return c.landed(c.cursor.Seek(k)) }
func (c countingCursor) Next() ([]byte, []byte)         { return c.landed(c.cursor.Next()) }
func (c countingCursor) Prev() ([]byte, []byte)         { return c.landed(c.cursor.Prev()) }

// TestJoinTokenPruneReadsEachTokenOnce: a day's prune of 2,800 expired join tokens among
// 2,000 kept ones takes three transactions, each going on from where the one before
// stopped, and reads each token about once in all (here 4,800 and a few keys a
// transaction). Before, each transaction walked the bucket from its start until it had
// 1,000 to delete, past every kept token before them again: 7,000 reads or so here, and a
// day's reads grew with the square of its transactions.
func TestJoinTokenPruneReadsEachTokenOnce(t *testing.T) {
	eachBackend(t, func(t *testing.T, open opener) {
		s, clk := openOnFakeClock(t, open)
		mint := func(n int) {
			for i := 0; i < n; i += 500 {
				mustUpdate(t, s, func(tx *Tx) error {
					for j := range min(500, n-i) {
						if _, _, err := tx.CreateJoinToken(TokenFor{Kind: TokenRamdisk, NodeID: fmt.Sprintf("n%d", i+j)}, tx.Now().Add(time.Hour)); err != nil {
							return err
						}
					}
					return nil
				})
			}
		}
		const expired, kept = 3*MaxPruned - 200, 2000
		mint(expired)
		clk.Advance(2 * time.Hour)
		mint(kept)
		reads, txns := 0, 0
		total, err := s.PruneOnward(func(tx *Tx, after []byte) (int, []byte, error) {
			txns++
			tx.kv = countingKV{tx.kv, &reads}
			return tx.PruneJoinTokens(tx.Now(), after)
		})
		if err != nil || total != expired || txns != 3 {
			t.Fatalf("pruned %d in %d transactions (%v), want %d in 3", total, txns, err, expired)
		}
		if most := expired + kept + 10*txns; reads > most {
			t.Errorf("the prune read %d keys, want at most %d: each token once, and a few keys a transaction", reads, most)
		}
		var left int
		s.View(func(tx *Tx) error {
			c := tx.kv.cursor(bucketJoinTokens)
			for k, _ := c.First(); k != nil; k, _ = c.Next() {
				left++
			}
			return nil
		})
		if left != kept {
			t.Errorf("%d tokens left, want the %d not expired", left, kept)
		}
	})
}

package store

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/better-compute/better-compute/proto"
	"github.com/google/go-cmp/cmp"
)

func TestJoinTokenConsumedOnceUntilExpiry(t *testing.T) {
	eachBackend(t, func(t *testing.T, open opener) {
		now := time.Date(2026, 9, 1, 12, 0, 0, 0, time.UTC)
		var mu sync.Mutex
		clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
		s, err := open(t, Options{Now: clock})
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		mint := func() (tok JoinToken, secret string) {
			t.Helper()
			if err := s.Update(func(tx *Tx) (err error) {
				tok, secret, err = tx.CreateJoinToken(TokenFor{Kind: TokenProvisioned, NodeID: "node-1"}, now.Add(time.Hour))
				return err
			}); err != nil {
				t.Fatal(err)
			}
			return tok, secret
		}
		consume := func(secret, from string) (tok JoinToken, err error) {
			err = s.Update(func(tx *Tx) (err error) { tok, err = tx.ConsumeJoinToken(secret, from); return err })
			return tok, err
		}
		made, secret := mint()
		got, err := consume(secret, "192.0.2.7")
		if err != nil {
			t.Fatal(err)
		}
		made.UsedAt, made.UsedFrom = now, "192.0.2.7"
		if diff := cmp.Diff(made, got); diff != "" {
			t.Errorf("consumed token (-want +got):\n%s", diff)
		}
		// Presented again, from another address, the token is refused and returned as
		// its join left it: who used it first, and when.
		again, err := consume(secret, "192.0.2.8")
		if proto.AsError(err).Details.Reason != proto.ReasonTokenUsed {
			t.Fatalf("presented again: %v, want token-used", err)
		}
		if diff := cmp.Diff(made, again); diff != "" {
			t.Errorf("the used token returned with token-used (-want +got):\n%s", diff)
		}
		_, expiring := mint()
		cases := map[string]struct {
			secret string
			reason string
			later  time.Duration
		}{
			"used":         {secret, "token-used", 0},
			"wrong secret": {forged(secret), "token-invalid", 0},
			"no prefix":    {secret[4:], "token-invalid", 0},
			"unknown id":   {"bcj_0000000000000000.AAAA", "token-invalid", 0},
			"expired":      {expiring, "token-expired", time.Hour},
		}
		for name, tc := range cases {
			t.Run(name, func(t *testing.T) {
				mu.Lock()
				now = now.Add(tc.later)
				mu.Unlock()
				_, err := consume(tc.secret, "")
				if e := proto.AsError(err); e.Code != proto.Unauthenticated || e.Details.Reason != tc.reason {
					t.Fatalf("got %v (reason %q), want UNAUTHENTICATED %s", err, e.Details.Reason, tc.reason)
				}
			})
		}
	})
}

// TestJoinTokenKeepsTheWorkflowThatMintedIt: a token a workflow mints reads back naming
// that run, through its join too; one an operator mints, and one stored before tokens
// recorded their workflow, name none, so that presenting it again fails no workflow as
// its minter (metal.Service.TokenReused).
func TestJoinTokenKeepsTheWorkflowThatMintedIt(t *testing.T) {
	eachBackend(t, func(t *testing.T, open opener) {
		s := openTest(t, open)
		var secret string
		mustUpdate(t, s, func(tx *Tx) (err error) {
			if _, secret, err = tx.CreateJoinToken(TokenFor{Kind: TokenProvisioned, NodeID: "node-1", Workflow: "run_deploy"}, tx.Now().Add(time.Hour)); err != nil {
				return err
			}
			if _, _, err = tx.CreateJoinToken(TokenFor{Kind: TokenProvisioned, NodeID: "node-1"}, tx.Now().Add(time.Hour)); err != nil {
				return err
			}
			// A record as a registry wrote it before tokens recorded their workflow, with
			// the entry the raise to format 3 gives it.
			if err := tx.putRaw(bucketJoinTokensByNode, []byte("node-1\x000000000000000000"), nil); err != nil {
				return err
			}
			return tx.putRaw(bucketJoinTokens, []byte("0000000000000000"), []byte("\x01"+`{"id":"0000000000000000","kind":"ramdisk","nodeId":"node-1",`+
				`"secretHash":"x","createdAt":"2026-09-01T12:00:00Z","expiresAt":"2126-09-01T12:00:00Z"}`))
		})
		mustUpdate(t, s, func(tx *Tx) error { _, err := tx.ConsumeJoinToken(secret, "192.0.2.7"); return err })
		got := map[string]string{}
		s.View(func(tx *Tx) error {
			toks, _, err := tx.JoinTokens(Page{})
			for _, tok := range toks {
				got[fmt.Sprintf("%s used=%v", tok.Kind, !tok.UsedAt.IsZero())] = tok.Workflow
			}
			return err
		})
		want := map[string]string{"provisioned used=true": "run_deploy", "provisioned used=false": "", "ramdisk used=false": ""}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("the tokens' workflows (-want +got):\n%s", diff)
		}
	})
}

func TestCreateJoinTokenInvariants(t *testing.T) {
	eachBackend(t, func(t *testing.T, open opener) {
		s := openTest(t, open)
		cases := map[string]struct {
			kind, node string
			expires    time.Duration
			path       string
		}{
			"unknown kind": {"admin", "n1", time.Hour, "kind"},
			"no node":      {TokenSite, "", time.Hour, "nodeId"},
			"past expiry":  {TokenRamdisk, "n1", -time.Second, "ttlSeconds"},
		}
		for name, tc := range cases {
			t.Run(name, func(t *testing.T) {
				err := s.Update(func(tx *Tx) error {
					_, _, err := tx.CreateJoinToken(TokenFor{Kind: tc.kind, NodeID: tc.node}, tx.Now().Add(tc.expires))
					return err
				})
				if e := proto.AsError(err); e.Code != proto.InvalidInput || e.Details.Path != tc.path {
					t.Fatalf("got %v, want INVALID_INPUT at %s", err, tc.path)
				}
			})
		}
	})
}

// TestPruneJoinTokensBounded checks that one prune deletes at most MaxPruned tokens, so
// its transaction fits etcd's bounds, and that calling again deletes the rest and keeps
// the tokens still within their retention.
func TestPruneJoinTokensBounded(t *testing.T) {
	eachBackend(t, func(t *testing.T, open opener) {
		now := time.Date(2026, 9, 1, 12, 0, 0, 0, time.UTC)
		s, err := open(t, Options{Now: func() time.Time { return now }})
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		for batch := range 3 {
			mustUpdate(t, s, func(tx *Tx) error {
				for i := range MaxPruned/2 + 3 {
					if _, _, err := tx.CreateJoinToken(TokenFor{Kind: TokenRamdisk, NodeID: fmt.Sprintf("n%d-%d", batch, i)}, now.Add(time.Hour)); err != nil {
						return err
					}
				}
				return nil
			})
		}
		mustUpdate(t, s, func(tx *Tx) error {
			_, _, err := tx.CreateJoinToken(TokenFor{Kind: TokenRamdisk, NodeID: "late"}, now.Add(3*time.Hour))
			return err
		})
		var after []byte
		prune := func() (n int) {
			mustUpdate(t, s, func(tx *Tx) (err error) { n, after, err = tx.PruneJoinTokens(now.Add(2*time.Hour), after); return err })
			return n
		}
		total := 3 * (MaxPruned/2 + 3)
		if n := prune(); n != MaxPruned || after == nil {
			t.Fatalf("first prune deleted %d, going on from %q; want %d, and where it stopped", n, after, MaxPruned)
		}
		if n := prune(); n != total-MaxPruned || after != nil {
			t.Fatalf("second prune deleted %d, going on from %q; want the %d left, at the bucket's end", n, after, total-MaxPruned)
		}
		s.View(func(tx *Tx) error {
			toks, _, err := tx.JoinTokens(Page{})
			if err != nil || len(toks) != 1 || toks[0].NodeID != "late" {
				t.Fatalf("tokens left: %v, %v; want only the one within retention", toks, err)
			}
			return nil
		})
	})
}

// TestRevokeJoinToken: a revoked token no longer joins; a used one stays, the record of
// its join; an unknown id is NOT_FOUND.
func TestRevokeJoinToken(t *testing.T) {
	eachBackend(t, func(t *testing.T, open opener) {
		s := openTest(t, open)
		now := time.Now()
		var unused, used JoinToken
		var unusedSecret, usedSecret string
		if err := s.Update(func(tx *Tx) (err error) {
			if unused, unusedSecret, err = tx.CreateJoinToken(TokenFor{Kind: TokenSite, NodeID: "rack-a", Site: "rack-a"}, now.Add(time.Hour)); err != nil {
				return err
			}
			if used, usedSecret, err = tx.CreateJoinToken(TokenFor{Kind: TokenProvisioned, NodeID: "node-1"}, now.Add(time.Hour)); err != nil {
				return err
			}
			_, err = tx.ConsumeJoinToken(usedSecret, "")
			return err
		}); err != nil {
			t.Fatal(err)
		}
		revoke := func(id string) error {
			return s.Update(func(tx *Tx) error { _, err := tx.RevokeJoinToken(id); return err })
		}
		if err := revoke(unused.ID); err != nil {
			t.Fatal(err)
		}
		if err := s.Update(func(tx *Tx) error { _, err := tx.ConsumeJoinToken(unusedSecret, ""); return err }); proto.CodeOf(err) != proto.Unauthenticated {
			t.Errorf("joining with a revoked token: %v, want UNAUTHENTICATED", err)
		}
		if err := revoke(unused.ID); proto.CodeOf(err) != proto.NotFound {
			t.Errorf("revoking it again: %v, want NOT_FOUND", err)
		}
		if err := revoke(used.ID); proto.CodeOf(err) != proto.InvalidState {
			t.Errorf("revoking a used token: %v, want INVALID_STATE", err)
		}
		var left []JoinToken
		s.View(func(tx *Tx) (err error) { left, _, err = tx.JoinTokens(Page{Limit: 10}); return err })
		if len(left) != 1 || left[0].ID != used.ID {
			t.Errorf("tokens left: %+v, want the used one only", left)
		}
	})
}

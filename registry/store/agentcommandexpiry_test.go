package store

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/better-compute/better-compute/proto"
)

// expiryEntries is every key of agent-commands-by-expiry, as strings.
func expiryEntries(t *testing.T, s *Store) []string {
	t.Helper()
	var out []string
	err := s.kv.view(func(tx kvTx) error {
		c := tx.cursor(bucketAgentCommandsByExpiry)
		for k, _ := c.First(); k != nil; k, _ = c.Next() {
			out = append(out, string(k))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// mustCheck fails t, naming step, when the store is not consistent.
func mustCheck(t *testing.T, s *Store, step string) {
	t.Helper()
	if err := s.Check(); err != nil {
		t.Fatalf("after %s: %v", step, err)
	}
}

// TestEveryCommandWritePathKeepsItsExpiryEntry drives a command through every write path
// of the relayed commands (enqueue, a role given to one stored without, answer, trim to
// its digest, drop pending, expire, and a walk's delete) and checks after each that every
// command has its entry in agent-commands-by-expiry and no entry is left without its
// command (Check), and that expiry forgets each command by its entry: a path that
// misses an entry fails here, on both backends.
func TestEveryCommandWritePathKeepsItsExpiryEntry(t *testing.T) {
	eachBackend(t, func(t *testing.T, open opener) {
		s, clk := openOnFakeClock(t, open)
		start := clk.Now()
		run := "wf_0123456789abcdef"
		enqueue := func(agent, id string) {
			t.Helper()
			mustUpdate(t, s, func(tx *Tx) error {
				_, err := tx.EnqueueAgentCommand(agent, proto.RoleRamdisk, proto.Command{ID: id, Kind: "echo", Payload: json.RawMessage(`{"a":1}`)}, nil)
				return err
			})
		}
		enqueue("n1", run+":main.0:a1")
		enqueue("n1", run+":main.1:a1")
		enqueue("n2", run+":main.0:a1")
		mustCheck(t, s, "enqueue")
		if n := len(expiryEntries(t, s)); n != 3 {
			t.Fatalf("%d expiry entries after three commands, want 3", n)
		}
		enqueue("n1", run+":main.0:a1") // asked again: stored as it is
		mustCheck(t, s, "enqueue again")

		old := AgentCommand{Node: "n1", ID: "older", Kind: "echo", CreatedAt: start}
		mustUpdate(t, s, func(tx *Tx) error { return storeAsEarlier(tx, old) })
		mustUpdate(t, s, func(tx *Tx) error {
			_, err := tx.EnqueueAgentCommand("n1", proto.RoleRamdisk, proto.Command{ID: "older", Kind: "echo"}, nil)
			return err
		})
		mustCheck(t, s, "a role given to a command stored without")

		clk.Advance(time.Minute)
		mustUpdate(t, s, func(tx *Tx) error {
			_, err := tx.CompleteAgentCommand("n1", proto.Result{ID: run + ":main.0:a1", Result: json.RawMessage(`{}`)})
			return err
		})
		mustCheck(t, s, "answer")
		mustUpdate(t, s, func(tx *Tx) error {
			_, err := tx.RecordAgentCommands("n1", run+":main.0:a1", run, "steps[0]")
			return err
		})
		mustCheck(t, s, "record")
		mustUpdate(t, s, func(tx *Tx) error {
			c, err := tx.AgentCommand("n1", run+":main.0:a1")
			if err == nil && c.Recorded == nil {
				err = fmt.Errorf("the answered command was not trimmed to its digest")
			}
			return err
		})

		var n int
		mustUpdate(t, s, func(tx *Tx) (err error) { n, err = tx.DropPendingAgentCommands("n1", run+":"); return err })
		if n != 1 {
			t.Fatalf("dropped %d pending commands of n1, want 1", n)
		}
		mustCheck(t, s, "drop pending")

		// A command made after the others: the cutoff between them expires every one
		// but it, by its entry.
		clk.Advance(time.Hour)
		enqueue("n3", "later")
		mustUpdate(t, s, func(tx *Tx) (err error) { n, err = tx.ExpireAgentCommands(start.Add(time.Minute)); return err })
		if n != 3 {
			t.Errorf("expired %d commands, want the 3 made before the cutoff", n)
		}
		mustCheck(t, s, "expire")
		if got := expiryEntries(t, s); len(got) != 1 || !strings.HasSuffix(got[0], "n3/later") {
			t.Errorf("expiry entries left: %q, want n3/later's alone", got)
		}
		mustUpdate(t, s, func(tx *Tx) (err error) {
			n, err = tx.dropAgentCommands(nil, func(AgentCommand) bool { return true })
			return err
		})
		mustCheck(t, s, "delete")
		if got := expiryEntries(t, s); n != 1 || len(got) != 0 {
			t.Errorf("deleted %d, entries left %q; want 1 and none", n, got)
		}
	})
}

// TestExpiryReadsOnlyExpiredEntries: expiry forgets the commands older than the cutoff
// in the order of their time, at most MaxPruned a transaction, and never reads a younger
// command's record (one a younger entry names is damaged here: a walk of the bucket
// would fail on it); an entry whose command is gone, or says another time, is dropped
// when its time expires, and the command it names kept.
func TestExpiryReadsOnlyExpiredEntries(t *testing.T) {
	eachBackend(t, func(t *testing.T, open opener) {
		s, clk := openOnFakeClock(t, open)
		start := clk.Now()
		for i := range MaxPruned + 5 {
			mustUpdate(t, s, func(tx *Tx) error {
				_, err := tx.EnqueueAgentCommand(fmt.Sprintf("n%d", i%7), proto.RoleRamdisk, proto.Command{ID: fmt.Sprintf("c%04d", i), Kind: "echo"}, nil)
				return err
			})
			clk.Advance(time.Second)
		}
		young := AgentCommand{Node: "n0", ID: "young", CreatedAt: start.Add(time.Hour)}
		stale := AgentCommand{Node: "n0", ID: "c0001", CreatedAt: start.Add(-time.Hour)} // n1's c0001 is not n0's
		moved := AgentCommand{Node: fmt.Sprintf("n%d", (MaxPruned+3)%7), ID: fmt.Sprintf("c%04d", MaxPruned+3), CreatedAt: start.Add(-time.Minute)}
		mustUpdate(t, s, func(tx *Tx) error {
			for _, c := range []AgentCommand{young, stale, moved} {
				if err := tx.putRaw(bucketAgentCommandsByExpiry, expiryKey(c), nil); err != nil {
					return err
				}
			}
			return tx.kv.put(bucketAgentCommands, commandKey(young.Node, young.ID), []byte("not a record"))
		})
		cutoff := start.Add((MaxPruned + 2) * time.Second)
		var total int
		for _, want := range []int{MaxPruned, 4} {
			var n int
			mustUpdate(t, s, func(tx *Tx) (err error) { n, err = tx.ExpireAgentCommands(cutoff); return err })
			if n != want {
				t.Fatalf("expired %d, want %d", n, want)
			}
			total += n
		}
		mustUpdate(t, s, func(tx *Tx) error {
			for i := range MaxPruned + 5 {
				_, err := tx.AgentCommand(fmt.Sprintf("n%d", i%7), fmt.Sprintf("c%04d", i))
				if kept := i >= MaxPruned+2; kept != (err == nil) {
					t.Errorf("c%04d, made %ds after the start, cutoff at %ds: %v", i, i, MaxPruned+2, err)
				}
			}
			return nil
		})
		if got := len(expiryEntries(t, s)); got != 4 {
			t.Errorf("%d entries left, want the 3 commands' after the cutoff and the damaged one's", got)
		}
		mustUpdate(t, s, func(tx *Tx) error { return tx.kv.del(bucketAgentCommands, commandKey(young.Node, young.ID)) })
		mustUpdate(t, s, func(tx *Tx) error { return tx.del(bucketAgentCommandsByExpiry, expiryKey(young)) })
	})
}

// TestCheckReportsTheExpiryIndex: a command without its expiry entry, which would never
// be forgotten, and an entry naming no command of its time, are each reported by Check.
func TestCheckReportsTheExpiryIndex(t *testing.T) {
	eachBackend(t, func(t *testing.T, open opener) {
		s, err := open(t, Options{})
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		var c AgentCommand
		mustUpdate(t, s, func(tx *Tx) (err error) {
			c, err = tx.EnqueueAgentCommand("n1", proto.RoleRamdisk, proto.Command{ID: "c1", Kind: "echo"}, nil)
			return err
		})
		mustUpdate(t, s, func(tx *Tx) error { return tx.del(bucketAgentCommandsByExpiry, expiryKey(c)) })
		if err := s.Check(); err == nil || !strings.Contains(err.Error(), `agent-commands/"n1/c1" has no entry in agent-commands-by-expiry`) {
			t.Errorf("Check of a command without its entry: %v", err)
		}
		other := c
		other.CreatedAt = c.CreatedAt.Add(time.Second)
		mustUpdate(t, s, func(tx *Tx) error { return tx.putRaw(bucketAgentCommandsByExpiry, expiryKey(other), nil) })
		if err := s.Check(); err == nil || !strings.Contains(err.Error(), "names no command of agent-commands of that time") {
			t.Errorf("Check of an entry of another time: %v", err)
		}
	})
}

// TestAStoreOfFormat1IsIndexedAsItIsRaised: a store of format 1 (its commands without
// expiry entries, more than one transaction indexes, and one entry left behind) opened
// read-only is checked as it is; opened, it is raised to Format with every command
// indexed and the entry left behind dropped, and expiry then forgets the old commands.
func TestAStoreOfFormat1IsIndexedAsItIsRaised(t *testing.T) {
	eachPlace(t, func(t *testing.T, open opener) {
		s, clk := openOnFakeClock(t, open)
		start := clk.Now()
		const commands = MaxPruned + 300
		for i := 0; i < commands; i += 500 {
			mustUpdate(t, s, func(tx *Tx) error {
				for j := i; j < min(i+500, commands); j++ {
					if _, err := tx.EnqueueAgentCommand(fmt.Sprintf("n%d", j%11), proto.RoleRamdisk, proto.Command{ID: fmt.Sprintf("c%05d", j), Kind: "echo"}, nil); err != nil {
						return err
					}
				}
				return nil
			})
		}
		for _, chunk := range [][]string{expiryEntries(t, s)[:MaxPruned], expiryEntries(t, s)[MaxPruned:]} {
			mustUpdate(t, s, func(tx *Tx) error {
				for _, k := range chunk {
					if err := tx.del(bucketAgentCommandsByExpiry, []byte(k)); err != nil {
						return err
					}
				}
				return nil
			})
		}
		mustUpdate(t, s, func(tx *Tx) error {
			return tx.putRaw(bucketAgentCommandsByExpiry, expiryKey(AgentCommand{Node: "gone", ID: "c1", CreatedAt: start}), nil)
		})
		setFormat(t, s, []byte("1"))
		s.Close()

		ro := mustOpen(t, open, Options{ReadOnly: true})
		if err := ro.Check(); err != nil {
			t.Errorf("Check of a store of format 1, not indexed yet: %v", err)
		}
		ro.Close()

		s = mustOpen(t, open, Options{Now: clk.Now})
		if got := storedFormat(t, s); got != fmt.Sprint(Format) {
			t.Fatalf("format key %q after the open, want %d", got, Format)
		}
		mustCheck(t, s, "the raise")
		if got := len(expiryEntries(t, s)); got != commands {
			t.Fatalf("%d expiry entries after the raise, want one per command, %d", got, commands)
		}
		total, err := s.Prune(func(tx *Tx) (int, error) { return tx.ExpireAgentCommands(start.Add(time.Second)) })
		if err != nil || total != commands {
			t.Fatalf("expired %d commands after the raise (%v), want all %d", total, err, commands)
		}
		mustCheck(t, s, "expiry")
	})
}

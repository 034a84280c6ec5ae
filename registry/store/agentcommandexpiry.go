package store

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"time"
)

// bucketAgentCommandsByExpiry indexes the relayed commands by the time their expiry
// counts from (CreatedAt): one empty entry per command, keyed expiryKey, so that
// ExpireAgentCommands reads only the entries of the commands it forgets. Every write of
// a command keeps it (putAgentCommand, deleteAgentCommand); a store of a format before 2
// is indexed as it is raised (indexAgentCommands).
const bucketAgentCommandsByExpiry = "agent-commands-by-expiry"

// expiryTimeLen is the length of an expiry key's time: the Unix seconds, big-endian with
// the sign bit flipped (so that earlier sorts first, before 1970 too), then the
// nanoseconds, big-endian.
const expiryTimeLen = 12

// expiryKey is c's entry in bucketAgentCommandsByExpiry: the time its expiry counts from
// (expiryTimeLen bytes), then its key in bucketAgentCommands.
func expiryKey(c AgentCommand) []byte {
	k := expiryTime(c.CreatedAt)
	return append(k, commandKey(c.Node, c.ID)...)
}

// expiryTime is the expiryTimeLen bytes of an expiry key that say t.
func expiryTime(t time.Time) []byte {
	k := make([]byte, expiryTimeLen, expiryTimeLen+64)
	binary.BigEndian.PutUint64(k, uint64(t.Unix())^1<<63)
	binary.BigEndian.PutUint32(k[8:], uint32(t.Nanosecond()))
	return k
}

// expiringCommand is the key in bucketAgentCommands of the command an expiry key names;
// nil for a key too short to be one.
func expiringCommand(k []byte) []byte {
	if len(k) <= expiryTimeLen {
		return nil
	}
	return k[expiryTimeLen:]
}

// ExpireAgentCommands forgets the commands made before cutoff, pending or done, at most
// MaxPruned of them, and returns how many. It reads only their entries in
// bucketAgentCommandsByExpiry, oldest first, and their records, however many younger
// commands the store holds. An entry whose record is gone or says another time (none in
// a store only this release wrote: Check reports one) is dropped too, and counted.
func (t *Tx) ExpireAgentCommands(cutoff time.Time) (int, error) {
	end := expiryTime(cutoff)
	var entries [][]byte
	c := t.kv.cursor(bucketAgentCommandsByExpiry)
	for k, _ := c.First(); k != nil && len(entries) < MaxPruned && bytes.Compare(k, end) < 0; k, _ = c.Next() {
		entries = append(entries, slices.Clone(k))
	}
	for _, k := range entries {
		cmd, ok, err := t.commandOf(k)
		switch {
		case err != nil:
		case ok:
			err = t.deleteAgentCommand(cmd)
		default:
			err = t.del(bucketAgentCommandsByExpiry, k)
		}
		if err != nil {
			return 0, err
		}
	}
	return len(entries), nil
}

// commandOf is the command the expiry entry k names, as tx reads it, and whether it is
// stored with that time (false: the entry is stray).
func (t *Tx) commandOf(k []byte) (AgentCommand, bool, error) {
	var c AgentCommand
	key := expiringCommand(k)
	if key == nil {
		return c, false, nil
	}
	ok, err := t.get(bucketAgentCommands, key, &c)
	return c, ok && err == nil && bytes.Equal(expiryKey(c), k), err
}

// expiryDiff compares bucketAgentCommandsByExpiry with every command, as tx reads them:
// the entries of commands without theirs, then the entries no command has (its record
// gone, or of another time), each in key order, and why each command it cannot read was
// left out (damaged: its entry, if any, is stray). The first two are empty in a store
// of Format 2 or later that only this release wrote.
func (t *Tx) expiryDiff() (missing, stray [][]byte, damaged []error) {
	return entriesDiff(t, bucketAgentCommands, bucketAgentCommandsByExpiry, expiryKey)
}

// reindexExpiry makes each of entries (keys of bucketAgentCommandsByExpiry) say what
// the command it names says, as tx reads it: written when that command is stored with
// that time, dropped otherwise. So a list read in another transaction is applied
// safely.
func (t *Tx) reindexExpiry(entries [][]byte) error {
	for _, k := range entries {
		_, ok, err := t.commandOf(k)
		switch {
		case err != nil:
		case ok:
			if t.getRaw(bucketAgentCommandsByExpiry, k) == nil {
				err = t.putRaw(bucketAgentCommandsByExpiry, k, nil)
			}
		default:
			err = t.del(bucketAgentCommandsByExpiry, k)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// errMoreToIndex fails the transaction that raises the format when more commands than
// MaxPruned lack their expiry entry then (written meanwhile by a replica of an earlier
// release): indexAgentCommands runs again first.
var errMoreToIndex = errors.New("more commands to index than one transaction writes")

// indexAgentCommands gives every command its expiry entry and drops the entries no
// command has, as a store of a format before 2 is raised (a command it cannot read
// keeps none, and Check reports it): it reads every command once
// and writes what differs, MaxPruned entries a transaction, each read again there.
// The transaction that raises the format then does it again (finalExpiryIndex), so
// that no command written meanwhile is left without its entry.
func (s *Store) indexAgentCommands() error { return s.fill(expiryIndex) }

// expiryIndex is bucketAgentCommandsByExpiry as a format raise fills it.
var expiryIndex = derivedIndex{diff: (*Tx).expiryDiff, reindex: (*Tx).reindexExpiry}

// finalExpiryIndex is indexAgentCommands in the transaction that raises the format
// (fillLast), so that no command written meanwhile is left without its entry.
func (t *Tx) finalExpiryIndex() error { return t.fillLast(expiryIndex) }

// checkAgentCommandExpiry is Check's report of bucketAgentCommandsByExpiry: each command
// without its entry, which expiry never forgets, and each entry no command has.
func (t *Tx) checkAgentCommandExpiry() []error {
	missing, stray, errs := t.expiryDiff()
	for _, k := range missing {
		errs = append(errs, fmt.Errorf("store: %s/%q has no entry in %s (%q), so it is never forgotten: a write path missed it; report it with this line, and delete the command's record if it is older than a day",
			bucketAgentCommands, expiringCommand(k), bucketAgentCommandsByExpiry, k))
	}
	for _, k := range stray {
		errs = append(errs, fmt.Errorf("store: %s/%q names no command of %s of that time: a write path left it behind; it is dropped when it expires",
			bucketAgentCommandsByExpiry, k, bucketAgentCommands))
	}
	return errs
}

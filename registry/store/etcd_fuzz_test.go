package store

import (
	"bytes"
	"strings"
	"testing"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// FuzzDecodeCommit reads what an etcd watch delivers under the prefix, whatever another
// writer put there: keys in or out of the layout and any value. Decoding never panics, a
// commit marked with this replica's id is its own, the hooks decode the records of
// another's or log them (none, and the store is outdated, when the events leave a format
// key this release cannot read), and the mirror holds what the events left.
func FuzzDecodeCommit(f *testing.F) {
	f.Add([]byte("p/nodespecs/nd_1"), []byte("\x01{\"node\":\"nd_1\",\"generation\":2}"), []byte("p/nodespecs"), []byte("other"))
	f.Add([]byte("p/agent-commands/n1/c1"), []byte("\x01{}"), []byte("p/agent-commands"), []byte("me"))
	f.Add([]byte("p/nodes/nd_1"), []byte("\x01{\"id\":\"nd_1\",\"identityEpoch\":3}"), []byte("p/agent_joins/nd_1\x00node"),
		[]byte("\x01{\"node\":\"nd_1\",\"role\":\"node\",\"replica\":\"rg_a\"}"))
	f.Add([]byte("p/agent_sessions/site-a"), []byte("\x01{\"node\":\"site-a\",\"connected\":true}"), []byte("p/nodes"), []byte("other"))
	f.Add([]byte("q/x"), []byte{}, []byte("p"), []byte{})
	f.Add([]byte("p/"), []byte("\x02"), []byte("p/sites/"), []byte("me"))
	f.Add([]byte("p/store_format/format"), []byte("2"), []byte("p/store_format"), []byte("other"))
	f.Add([]byte("p/store_format/format"), []byte("1"), []byte("p/store_format/format"), []byte("+1"))
	f.Fuzz(func(t *testing.T, key, value, key2, value2 []byte) {
		b := &etcdBackend{prefix: "p/", id: []byte("me"), mirror: newMirror(), outdated: newOutdated()}
		events := []*clientv3.Event{
			{Type: clientv3.EventTypePut, Kv: &mvccpb.KeyValue{Key: key, Value: value, ModRevision: 7}},
			{Type: clientv3.EventTypePut, Kv: &mvccpb.KeyValue{Key: key2, Value: value2, ModRevision: 7}},
			{Type: clientv3.EventTypeDelete, Kv: &mvccpb.KeyValue{Key: key, ModRevision: 8}},
		}
		s := &Store{kv: b, outdated: b.outdated}
		s.OnNodeSpec(func(string, int64) {})
		s.OnAgentCommand(func(AgentCommand) {})
		s.OnNodeIdentity(func(NodeChange) {})
		s.OnSessionOpened(func(string, string, Holder) {})
		s.OnWrite(func() {}, BucketSites)
		commits := 0
		next := b.handleEvents(events, 1, func(c remoteCommit) { commits++; s.remoteCommit(c) })
		if next != 9 {
			t.Fatalf("next revision %d, want 9", next)
		}
		// Revision 7 is this replica's when one of its puts is a generation key
		// (P/<bucket>) holding its id; revision 8 (a delete) is always another's.
		// A format key this release cannot read, left by the events, outdates the store and
		// stops the hooks.
		own := ownGen(key, value) || ownGen(key2, value2)
		snap := b.mirror.snap.Load()
		format, _ := snap.get("p/" + bucketFormat + "/" + string(formatKey))
		unreadable := formatReadable(format.value) != nil
		if want := map[bool]int{true: 1, false: 2}[own]; unreadable {
			if commits != 0 || s.OutdatedErr() == nil {
				t.Fatalf("format %q: %d commits handed to the hooks, outdated %v; want none, outdated", format.value, commits, s.OutdatedErr())
			}
		} else if commits != want || s.OutdatedErr() != nil {
			t.Fatalf("%d commits handed to the hooks, want %d (own: %v); outdated %v", commits, want, own, s.OutdatedErr())
		}
		if snap.rev != 8 {
			t.Fatalf("the mirror is at revision %d, want 8", snap.rev)
		}
		if _, ok := snap.get(string(key)); ok {
			t.Fatalf("the mirror holds %q, deleted at revision 8", key)
		}
		if kv, ok := snap.get(string(key2)); !bytes.Equal(key, key2) && (!ok || !bytes.Equal(kv.value, value2) || kv.mod != 7) {
			t.Fatalf("the mirror holds %q as %q at %d (%v), want %q at 7", key2, kv.value, kv.mod, ok, value2)
		}
	})
}

func ownGen(key, value []byte) bool {
	rest, inPrefix := strings.CutPrefix(string(key), "p/")
	return inPrefix && !strings.Contains(rest, "/") && string(value) == "me"
}

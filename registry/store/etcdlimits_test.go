package store

import (
	crand "crypto/rand"
	"encoding/base64"
	"encoding/json"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/better-compute/better-compute/proto"
	"github.com/better-compute/better-compute/registry/store/etcdtest"
	"github.com/better-compute/better-compute/sectionpack"
)

// TestEtcdProbeCoversTheLargestSection: on a cluster whose --max-request-bytes is
// etcdProbeBytes, the largest request the store sends in normal work commits: a section
// whose record takes proto.MaxInventoryRecord, for the longest node id, in a transaction
// of its own as a hello writes it (the agent checked, then the section). etcd measures
// the request itself, so the probe's figure is at least what that transaction sends.
func TestEtcdProbeCoversTheLargestSection(t *testing.T) {
	cluster := etcdtest.Start(t, "--max-request-bytes", strconv.Itoa(etcdProbeBytes))
	now := time.Date(2026, 1, 2, 3, 4, 5, 123456789, time.UTC) // the longest timestamp
	s, err := OpenEtcd(EtcdConfig{Endpoints: cluster.Endpoints, Prefix: etcdtest.Prefix(t)}, Options{Now: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	node := "n" + strings.Repeat("0", 127)
	// A section whose record takes exactly proto.MaxInventoryRecord: base64 of random
	// bytes, which does not compress by the quarter it would need, so it is stored as
	// it is, padded until its record is as large as the store takes.
	raw := make([]byte, proto.MaxInventoryRecord)
	crand.Read(raw)
	text := base64.RawURLEncoding.EncodeToString(raw)
	section := func(n int) json.RawMessage { return json.RawMessage(`["` + text[:n] + `"]`) }
	data := section(sectionpack.MaxData - len(`{"data":[""]}`))
	rec, _ := json.Marshal(InventorySection{Node: node, Section: proto.SectionDiscoveries, Data: data, UpdatedAt: now}.record())
	data = section(len(data) - len(`[""]`) + proto.MaxInventoryRecord - 1 - len(rec))
	err = s.Batch(func(tx *Tx) error {
		if err := tx.CheckAgent(node, proto.RoleSite, 1); err != nil {
			return err
		}
		_, err := tx.PutInventory(node, proto.SectionDiscoveries, data)
		return err
	})
	if err != nil {
		t.Fatalf("the largest section on a cluster taking etcdProbeBytes (%d): %v", etcdProbeBytes, err)
	}
	s.View(func(tx *Tx) error {
		if got := len(tx.kv.get(bucketInventory, inventoryKey(node, proto.SectionDiscoveries))); got != proto.MaxInventoryRecord {
			t.Errorf("the section's record takes %d bytes, want the largest the store takes", got)
		}
		return nil
	})
	if _, err := OpenEtcd(EtcdConfig{Endpoints: cluster.Endpoints, Prefix: etcdtest.Prefix(t), CheckLimits: true}, Options{}); proto.CodeOf(err) != proto.InvalidConfig {
		t.Errorf("the probe on a cluster taking exactly etcdProbeBytes: %v, want INVALID_CONFIG (the probe sends etcdProbeBytes and etcd's header)", err)
	}
}

// TestEtcdProbeOnADefaultCluster: a store opened with CheckLimits on a cluster of etcd's
// defaults opens, and the probe's key was never written.
func TestEtcdProbeOnADefaultCluster(t *testing.T) {
	cluster := etcdtest.Shared(t)
	prefix := etcdtest.Prefix(t)
	s, err := OpenEtcd(EtcdConfig{Endpoints: cluster.Endpoints, Prefix: prefix, CheckLimits: true}, Options{})
	if err != nil {
		t.Fatalf("a store checking a cluster of etcd's defaults: %v", err)
	}
	s.Close()
	if n := cluster.Count(t, prefix+"/"+etcdProbeName); n != 0 {
		t.Fatalf("%d probe keys under %s, want none", n, prefix)
	}
}

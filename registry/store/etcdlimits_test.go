package store

import (
	"encoding/json"
	"math"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/better-compute/better-compute/proto"
	"github.com/better-compute/better-compute/registry/store/etcdtest"
)

// TestEtcdProbeCoversTheLargestSection: on a cluster whose --max-request-bytes is
// etcdProbeBytes, the largest requests the store sends in normal work commit, each in a
// transaction of its own as a hello writes it (the agent checked, then the section): the
// largest section it takes, for the longest node id and section name, and then the mark
// of its refusal, of the longest time and count, whose record takes exactly
// proto.MaxInventoryRecord. etcd measures the request itself, so the probe's figure is
// at least what those transactions send. Their number of operations does not come near
// --max-txn-ops: the store keeps at most the seven sections of an agent's role
// (proto.CheckInventorySection), each of a hello's larger than 64 KiB in a transaction
// of its own.
func TestEtcdProbeCoversTheLargestSection(t *testing.T) {
	cluster := etcdtest.Start(t, "--max-request-bytes", strconv.Itoa(etcdProbeBytes))
	s, err := OpenEtcd(EtcdConfig{Endpoints: cluster.Endpoints, Prefix: etcdtest.Prefix(t)}, Options{Now: func() time.Time { return longestNow }})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	node, section := "n"+strings.Repeat("0", 127), longestSection
	data := sectionWithRecord(node, section, longestNow, proto.MaxInventoryRecord-markRoom)
	for _, w := range []struct {
		what  string
		write func(tx *Tx) error
	}{
		{"the largest section", func(tx *Tx) error { _, err := tx.PutInventory(node, section, data); return err }},
		{"the mark of its refusal", func(tx *Tx) error { return tx.RefuseInventory(node, section, math.MinInt) }},
	} {
		err = s.Batch(func(tx *Tx) error {
			if err := tx.CheckAgent(proto.AgentCredential{Node: node, Role: proto.RoleSite, Epoch: 1}); err != nil {
				return err
			}
			return w.write(tx)
		})
		if err != nil {
			t.Fatalf("%s on a cluster taking etcdProbeBytes (%d): %v", w.what, etcdProbeBytes, err)
		}
	}
	s.View(func(tx *Tx) error {
		if got := len(tx.kv.get(bucketInventory, inventoryKey(node, section))); got != proto.MaxInventoryRecord {
			t.Errorf("the section's record takes %d bytes marked, want the largest the store takes", got)
		}
		return nil
	})
	if _, err := OpenEtcd(EtcdConfig{Endpoints: cluster.Endpoints, Prefix: etcdtest.Prefix(t), CheckLimits: true}, Options{}); proto.CodeOf(err) != proto.InvalidConfig {
		t.Errorf("the probe on a cluster taking exactly etcdProbeBytes: %v, want INVALID_CONFIG (the probe sends etcdProbeBytes and etcd's header)", err)
	}
}

// TestEtcdProbeCoversTheLargestProfile: on a cluster whose --max-request-bytes is
// etcdProbeBytes, a profile version of the largest document, for the longest tenant, id
// and version, is created public, used by a run of the most steps a profile has (one
// transaction, as a deploy starts), made private and hidden, each in a transaction of its
// own as the API sends them. Its text of <, >, & and U+2028 is written as it is: its record
// takes the document and under 400 bytes.
func TestEtcdProbeCoversTheLargestProfile(t *testing.T) {
	s := openOnAProbeSizedCluster(t, Options{})
	tenant, id, version := "t"+strings.Repeat("0", 62), "p"+strings.Repeat("0", 127), 1<<31-1
	doc := `{"id":"` + id + `","pad":"`
	pad := proto.MaxProfileDocument - len(doc) - len(`"}`)
	doc += strings.Repeat("<&>\u2028", pad/6) + strings.Repeat("a", pad%6) + `"}`
	run := Run{Kind: "deploy", Node: "n" + strings.Repeat("0", 127), Tenant: tenant, Profile: ProfileRef{Tenant: tenant, ID: id, Version: version}}
	for i := range 384 {
		run.Steps = append(run.Steps, RunStep{Phase: "acceptance", Index: i, Use: "management.setBootDevice", On: "ramdisk"})
	}
	for _, step := range []struct {
		name  string
		write func(tx *Tx) error
	}{
		{"created public", func(tx *Tx) error {
			_, err := tx.CreateProfile(ProfileRecord{Tenant: tenant, ID: id, Version: version, Visibility: Public, Document: json.RawMessage(doc)})
			return err
		}},
		{"used by a run", func(tx *Tx) error {
			if err := tx.MarkProfileUsed(tenant, id, version); err != nil {
				return err
			}
			_, err := tx.CreateRun(run)
			return err
		}},
		{"made private", func(tx *Tx) error { _, err := tx.SetProfileVisibility(tenant, id, version, 0, Private); return err }},
		{"hidden", func(tx *Tx) error { _, err := tx.DeleteProfile(tenant, id, version); return err }},
	} {
		if err := s.Update(step.write); err != nil {
			t.Fatalf("the largest profile %s, on a cluster taking etcdProbeBytes (%d): %v", step.name, etcdProbeBytes, err)
		}
	}
	s.View(func(tx *Tx) error {
		if got := len(tx.kv.get(bucketProfiles, profileKey(tenant, id, version))); got < len(doc) || got > len(doc)+400 {
			t.Errorf("the record of a document of %d bytes takes %d", len(doc), got)
		}
		return nil
	})
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

// openOnAProbeSizedCluster opens a store on a new etcd cluster that takes requests of
// no more than the probe's figure (etcdProbeBytes), closed when t ends.
func openOnAProbeSizedCluster(t *testing.T, opts Options) *Store {
	t.Helper()
	cluster := etcdtest.Start(t, "--max-request-bytes", strconv.Itoa(etcdProbeBytes))
	s, err := OpenEtcd(EtcdConfig{Endpoints: cluster.Endpoints, Prefix: etcdtest.Prefix(t)}, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// TestTheProbeRefusesAClusterBelowTheEndOfADeploy: a cluster whose --max-request-bytes
// is below the largest request the store sends (etcdProbeBytes: the end of a deploy
// whose run and host section take their whole room, etcdProbeBytes-endRoom, beside the
// rest of its transaction) is refused at start, INVALID_CONFIG at --etcd-endpoints
// saying the flag's value to set, and nothing is written under the prefix: one that
// takes just the run and the section, and one a byte short of the probe. A cluster of
// the defaults is not. Before, the probe sent 1 MiB and 8 KiB, so such a cluster
// started, and refused the end of the first deploy of a large host section.
func TestTheProbeRefusesAClusterBelowTheEndOfADeploy(t *testing.T) {
	for _, limit := range []int{etcdDefaultRequestBytes - endRoom, etcdProbeBytes - 1} {
		cluster := etcdtest.Start(t, "--max-request-bytes", strconv.Itoa(limit))
		prefix := etcdtest.Prefix(t)
		s, err := OpenEtcd(EtcdConfig{Endpoints: cluster.Endpoints, Prefix: prefix, CheckLimits: true}, Options{})
		if err == nil {
			s.Close()
			t.Errorf("a cluster of --max-request-bytes %d, below the end of a deploy: started, want INVALID_CONFIG at --etcd-endpoints naming --max-request-bytes %d", limit, etcdDefaultRequestBytes)
			continue
		}
		if e := proto.AsError(err); e.Code != proto.InvalidConfig || e.Details.Path != "--etcd-endpoints" || !strings.Contains(e.Message, "--max-request-bytes "+strconv.Itoa(etcdDefaultRequestBytes)+" at least") {
			t.Errorf("a cluster of --max-request-bytes %d, below the end of a deploy: %v, want INVALID_CONFIG at --etcd-endpoints naming --max-request-bytes %d", limit, err, etcdDefaultRequestBytes)
		}
		if n := cluster.Count(t, prefix); n != 0 {
			t.Errorf("%d keys under the prefix after the refused start, want none", n)
		}
		cluster.Stop()
	}
	if s, err := OpenEtcd(EtcdConfig{Endpoints: etcdtest.Shared(t).Endpoints, Prefix: etcdtest.Prefix(t), CheckLimits: true}, Options{}); err != nil {
		t.Errorf("a cluster of the defaults: %v", err)
	} else {
		s.Close()
	}
}

package cli_test

import (
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"

	"github.com/better-compute/better-compute/registry/store/etcdtest"
	"github.com/better-compute/better-compute/testkit"
)

// TestStoreCopyThenServeOnEtcd moves a registry from its bbolt file to etcd: `store copy`
// copies the stopped registry's records into an empty prefix and checks them, refuses
// the prefix once it holds records, and `serve --store etcd` on the copy answers with
// what the bbolt registry held.
func TestStoreCopyThenServeOnEtcd(t *testing.T) {
	cluster := etcdtest.Start(t)
	endpoints := strings.Join(cluster.Endpoints, ",")
	reg := testkit.StartRegistry(t, "")
	testkit.JSON(t, reg.AdminConfig, nil, "tenants", "create", "acme")
	if res := testkit.CLI(t, reg.AdminConfig, "store", "copy", "--from-data-dir", reg.DataDir, "--to-etcd-endpoints", endpoints); res.Code != 1 || !strings.Contains(res.Stderr, "stop the registry") {
		t.Fatalf("copy of a running registry: exit %d\n%s%s", res.Code, res.Stdout, res.Stderr)
	}
	reg.Stop()

	res := testkit.CLI(t, reg.AdminConfig, "store", "copy", "--from-data-dir", reg.DataDir, "--to-etcd-endpoints", endpoints, "--to-etcd-prefix", "moved", "--format", "json")
	var sum struct{ Buckets, Records int }
	if err := json.Unmarshal([]byte(res.Stdout), &sum); res.Code != 0 || err != nil || sum.Records == 0 || sum.Buckets == 0 {
		t.Fatalf("store copy: exit %d, summary %+v (%v)\n%s%s", res.Code, sum, err, res.Stdout, res.Stderr)
	}
	if !strings.Contains(res.Stderr, "copied tenants: ") {
		t.Fatalf("store copy's progress does not name the tenants:\n%s", res.Stderr)
	}
	e := testkit.Fails(t, reg.AdminConfig, "store", "copy", "--from-data-dir", reg.DataDir, "--to-etcd-endpoints", endpoints, "--to-etcd-prefix", "moved")
	if !strings.Contains(e.Message, "not empty") {
		t.Fatalf("a second copy into the same prefix: %+v, want it refused", e)
	}
	if e := testkit.Fails(t, reg.AdminConfig, "store", "copy", "--from-data-dir", t.TempDir(), "--to-etcd-endpoints", endpoints); e.Code != "INVALID_INPUT" || e.Details.Path != "--from-data-dir" {
		t.Fatalf("copy from a directory without a store: %+v", e)
	}

	onEtcd := testkit.StartRegistry(t, reg.DataDir, "--store", "etcd", "--etcd-endpoints", endpoints, "--etcd-prefix", "moved",
		"--kek-file", filepath.Join(t.TempDir(), "kek"))
	var tenants struct{ Tenants []struct{ ID string } }
	testkit.JSON(t, onEtcd.AdminConfig, &tenants, "tenants", "list")
	var ids []string
	for _, tn := range tenants.Tenants {
		ids = append(ids, tn.ID)
	}
	if !strings.Contains(strings.Join(ids, ","), "acme") {
		t.Fatalf("tenants of the registry on etcd: %v, want acme copied", ids)
	}
}

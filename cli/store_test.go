package cli_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/better-compute/better-compute/registry/store"
	"github.com/better-compute/better-compute/registry/store/etcdtest"
	"github.com/better-compute/better-compute/testkit"
	bolt "go.etcd.io/bbolt"
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
	if res := testkit.CLI(t, reg.AdminConfig, "store", "copy", "--from-data-dir", reg.DataDir, "--to-etcd-endpoints", endpoints); res.Code != 1 || !strings.Contains(res.Stderr, "stop that registry") {
		t.Fatalf("copy of a running registry: exit %d\n%s%s", res.Code, res.Stdout, res.Stderr)
	}
	reg.Stop()

	res := testkit.CLI(t, reg.AdminConfig, "store", "copy", "--from-data-dir", reg.DataDir, "--to-etcd-endpoints", endpoints, "--to-etcd-prefix", "moved", "--format", "json")
	var sum struct{ Buckets, Records int }
	if err := json.Unmarshal([]byte(res.Stdout), &sum); res.Code != 0 || err != nil || sum.Records == 0 || sum.Buckets == 0 {
		t.Fatalf("store copy: exit %d, summary %+v (%v)\n%s%s", res.Code, sum, err, res.Stdout, res.Stderr)
	}
	if !strings.Contains(res.Stderr, "copied tenants: ") || !strings.Contains(res.Stderr, "read back tenants: ") {
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
	if n := cluster.Count(t, "moved/~probe/"); n != 0 {
		t.Errorf("%d probe keys left after copy and serve checked the cluster, want none", n)
	}
	var check struct{ Problems []string }
	testkit.JSON(t, "", &check, "store", "check", "--store", "etcd", "--etcd-endpoints", endpoints, "--etcd-prefix", "moved")
	if check.Problems == nil || len(check.Problems) != 0 {
		t.Errorf("store check of the copy, its registry serving: %q, want an empty list", check.Problems)
	}
}

// TestServeRefusesAClusterThatCannotTakeItsWrites: `serve --store etcd` on a cluster
// whose members take smaller requests (--max-request-bytes 262144) or fewer operations
// in a transaction (--max-txn-ops 16) than the store sends exits at start with
// INVALID_CONFIG naming the member flag to raise, and so does `store copy` into it;
// nothing is written under the prefix. Before, serve started and a site's large section
// failed at every hello.
func TestServeRefusesAClusterThatCannotTakeItsWrites(t *testing.T) {
	for _, c := range []struct{ flag, value, want string }{
		{"--max-request-bytes", "262144", "--max-request-bytes 1572864 at least"},
		{"--max-txn-ops", "16", "--max-txn-ops 128 at least"},
	} {
		t.Run(c.flag, func(t *testing.T) {
			cluster := etcdtest.Start(t, c.flag, c.value)
			endpoints := strings.Join(cluster.Endpoints, ",")
			dir := filepath.Join(t.TempDir(), "data")
			e := testkit.Fails(t, "", "serve", "--data-dir", dir, "--listen", "127.0.0.1:0", "--agent-listen", "127.0.0.1:0",
				"--store", "etcd", "--etcd-endpoints", endpoints, "--kek-file", filepath.Join(t.TempDir(), "kek"))
			if e.Code != "INVALID_CONFIG" || !strings.Contains(e.Message, c.want) {
				t.Errorf("serve on a cluster of %s %s: %+v, want INVALID_CONFIG naming %q", c.flag, c.value, e, c.want)
			}
			from := testkit.StartRegistry(t, "")
			from.Stop()
			e = testkit.Fails(t, from.AdminConfig, "store", "copy", "--from-data-dir", from.DataDir, "--to-etcd-endpoints", endpoints)
			if e.Code != "INVALID_CONFIG" || !strings.Contains(e.Message, c.want) {
				t.Errorf("store copy into a cluster of %s %s: %+v, want INVALID_CONFIG naming %q", c.flag, c.value, e, c.want)
			}
			if n := cluster.Count(t, "better-compute/"); n != 0 { // the default prefix
				t.Errorf("%d keys under the prefix after the refused starts, want none", n)
			}
		})
	}
}

// TestStoreCheckReportsWhatTheStoreHolds: `store check` refuses the file of a running
// registry, finds a stopped one consistent, and names a record of another schema and an
// index entry of a node that does not exist, exit 1, the same on a second check and
// without writing the file: it repairs nothing (a registry's own open drops the stale
// entry, and a check that did would report a whole store).
func TestStoreCheckReportsWhatTheStoreHolds(t *testing.T) {
	reg := testkit.StartRegistry(t, "")
	testkit.JSON(t, reg.AdminConfig, nil, "tenants", "create", "acme")
	if res := testkit.CLI(t, "", "store", "check", "--data-dir", reg.DataDir); res.Code != 1 || !strings.Contains(res.Stderr, "stop that registry") {
		t.Fatalf("check of a running registry's file: exit %d, want 1 saying to stop it\n%s%s", res.Code, res.Stdout, res.Stderr)
	}
	reg.Stop()
	var sum struct{ Problems []string }
	testkit.JSON(t, "", &sum, "store", "check", "--data-dir", reg.DataDir)
	if sum.Problems == nil || len(sum.Problems) != 0 {
		t.Fatalf("check of a whole store: %q, want an empty list", sum.Problems)
	}
	if e := testkit.Fails(t, "", "store", "check", "--data-dir", t.TempDir()); e.Code != "INVALID_INPUT" || e.Details.Path != "--data-dir" {
		t.Fatalf("check of a directory without a store: %+v", e)
	}

	file := filepath.Join(reg.DataDir, store.FileName)
	db, err := bolt.Open(file, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	err = db.Update(func(tx *bolt.Tx) error {
		if err := tx.Bucket([]byte("tenants")).Put([]byte("ghost"), []byte("not a record")); err != nil {
			return err
		}
		b, err := tx.CreateBucketIfNotExists([]byte("nodes_by_site_mac"))
		if err != nil {
			return err
		}
		return b.Put([]byte("rack-a\x00acme\x0020261204T000000\x0052:54:00:00:00:01\x00n-gone"), nil)
	})
	if err := errors.Join(err, db.Close()); err != nil {
		t.Fatal(err)
	}
	before, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	for range 2 {
		res := testkit.CLI(t, "", "store", "check", "--data-dir", reg.DataDir, "--format", "json")
		sum.Problems = nil
		if err := json.Unmarshal([]byte(res.Stdout), &sum); err != nil || res.Code != 1 {
			t.Fatalf("check of a damaged store: exit %d, %v\n%s%s", res.Code, err, res.Stdout, res.Stderr)
		}
		all := strings.Join(sum.Problems, "\n")
		for _, want := range []string{`tenants/"ghost" is not a record`, `n-gone`} {
			if !strings.Contains(all, want) {
				t.Errorf("check of a damaged store reports:\n%s\nwant a problem naming %s", all, want)
			}
		}
	}
	if after, err := os.ReadFile(file); err != nil || !bytes.Equal(before, after) {
		t.Errorf("store check wrote the file it checked (%v)", err)
	}
}

// newerFormat is the format of a store a newer release wrote.
var newerFormat = strconv.Itoa(store.Format + 1)

// TestServeRefusesAStoreOfANewerFormat: a store whose format key (store_format/format)
// says a newer release wrote it, as after a rollback of one registry's binary past an
// upgrade, is refused by `store check`, `store copy` and `serve`, on a bbolt file and on
// etcd, with INVALID_CONFIG at the flag naming the store, saying which format it has,
// which this release reads and what to do; neither the file nor the prefix is written.
// Before, all three went on and read (and serve wrote) records this release cannot read.
func TestServeRefusesAStoreOfANewerFormat(t *testing.T) {
	cluster := etcdtest.Start(t)
	endpoints := strings.Join(cluster.Endpoints, ",")
	reg := testkit.StartRegistry(t, "")
	testkit.JSON(t, reg.AdminConfig, nil, "tenants", "create", "acme")
	reg.Stop()
	testkit.JSON(t, "", nil, "store", "copy", "--from-data-dir", reg.DataDir, "--to-etcd-endpoints", endpoints, "--to-etcd-prefix", "newer")

	file := filepath.Join(reg.DataDir, store.FileName)
	db, err := bolt.Open(file, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	err = db.Update(func(tx *bolt.Tx) error {
		b, err := tx.CreateBucketIfNotExists([]byte("store_format"))
		if err != nil {
			return err
		}
		return b.Put([]byte("format"), []byte(newerFormat))
	})
	if err := errors.Join(err, db.Close()); err != nil {
		t.Fatal(err)
	}
	cluster.Put(t, "newer/store_format/format", newerFormat)
	before, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	keys := cluster.Count(t, "newer/")

	kek := filepath.Join(t.TempDir(), "kek")
	serve := []string{"serve", "--listen", "127.0.0.1:0", "--agent-listen", "127.0.0.1:0"}
	for _, c := range []struct {
		name string
		args []string
		path string
	}{
		{"store check", []string{"store", "check", "--data-dir", reg.DataDir}, "--data-dir"},
		{"store check on etcd", []string{"store", "check", "--store", "etcd", "--etcd-endpoints", endpoints, "--etcd-prefix", "newer"}, "--etcd-prefix"},
		{"store copy", []string{"store", "copy", "--from-data-dir", reg.DataDir, "--to-etcd-endpoints", endpoints, "--to-etcd-prefix", "again"}, "--from-data-dir"},
		{"serve", append(serve, "--data-dir", reg.DataDir), "--data-dir"},
		{"serve on etcd", append(serve, "--data-dir", filepath.Join(t.TempDir(), "data"), "--store", "etcd", "--etcd-endpoints", endpoints, "--etcd-prefix", "newer", "--kek-file", kek), "--etcd-prefix"},
	} {
		e := testkit.Fails(t, reg.AdminConfig, c.args...)
		if e.Code != "INVALID_CONFIG" || e.Details.Path != c.path {
			t.Errorf("%s on a store of format %s: %+v, want INVALID_CONFIG at %s", c.name, newerFormat, e, c.path)
		}
		for _, want := range []string{"the store is of format " + newerFormat + ", written by a newer release", "this release reads formats up to " + strconv.Itoa(store.Format), "run the newer release", "restore the backup"} {
			if !strings.Contains(e.Message, want) {
				t.Errorf("%s on a store of format %s: %q does not say %q", c.name, newerFormat, e.Message, want)
			}
		}
	}
	if after, err := os.ReadFile(file); err != nil || !bytes.Equal(before, after) {
		t.Errorf("the refused commands wrote the file (%v)", err)
	}
	if n := cluster.Count(t, "newer/"); n != keys {
		t.Errorf("%d keys under the prefix after the refused commands, %d before", n, keys)
	}
	if n := cluster.Count(t, "again/"); n != 0 {
		t.Errorf("the refused copy wrote %d keys", n)
	}
}

// TestReplicaExitsWhenTheFormatIsRaised: a replica serving on etcd when another replica
// raises the store's format past the one it reads (as a newer release's replica does at
// its start) stops and exits 1, logging an error that names the store's format, the one
// it reads and what to do. Before, it went on serving, reading and writing records it
// cannot read.
func TestReplicaExitsWhenTheFormatIsRaised(t *testing.T) {
	cluster := etcdtest.Start(t)
	reg := testkit.StartRegistry(t, "", "--store", "etcd", "--etcd-endpoints", strings.Join(cluster.Endpoints, ","),
		"--kek-file", filepath.Join(t.TempDir(), "kek"))
	testkit.JSON(t, reg.AdminConfig, nil, "tenants", "create", "acme")
	cluster.Put(t, "better-compute/store_format/format", newerFormat)
	if code := reg.Exits(t, 30*time.Second); code != 1 {
		t.Fatalf("the replica exited %d, want 1; log:\n%s", code, reg.Stderr)
	}
	log := reg.Stderr.String()
	for _, want := range []string{"level=ERROR", "the store's format was raised past what this release reads", "the store is of format " + newerFormat, "reads formats up to " + strconv.Itoa(store.Format), "run the newer release"} {
		if !strings.Contains(log, want) {
			t.Errorf("the replica's log does not say %q:\n%s", want, log)
		}
	}
}

// TestAStoreARunningRegistryHoldsIsRefusedAtItsFlag: `store check`, `store copy` and a
// second `serve` on the data directory of a running registry are INVALID_STATE at the
// flag naming that directory, saying to stop the registry or work on a copy, and change
// nothing: the running registry goes on answering from the same admin.conf. Before, all
// three were INTERNAL with no path, which the README says is never a failure on the
// CLI's side.
func TestAStoreARunningRegistryHoldsIsRefusedAtItsFlag(t *testing.T) {
	reg := testkit.StartRegistry(t, "")
	conf, err := os.ReadFile(reg.AdminConfig)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		flag string
		args []string
	}{
		{"--data-dir", []string{"store", "check", "--data-dir", reg.DataDir}},
		{"--from-data-dir", []string{"store", "copy", "--from-data-dir", reg.DataDir, "--to-etcd-endpoints", "https://127.0.0.1:1"}},
		{"--data-dir", []string{"serve", "--data-dir", reg.DataDir, "--listen", "127.0.0.1:0", "--agent-listen", "127.0.0.1:0"}},
	} {
		e := testkit.Fails(t, "", c.args...)
		if e.Code != "INVALID_STATE" || e.Details.Path != c.flag || !strings.Contains(e.Message, "stop that registry first") {
			t.Errorf("%v on a running registry's data directory: %+v, want INVALID_STATE at %s saying to stop it", c.args, e, c.flag)
		}
	}
	if after, err := os.ReadFile(reg.AdminConfig); err != nil || !bytes.Equal(conf, after) {
		t.Errorf("a refused start changed admin.conf (%v)", err)
	}
	testkit.JSON(t, reg.AdminConfig, nil, "tenants", "list")
}

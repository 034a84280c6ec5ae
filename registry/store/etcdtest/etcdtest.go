// Package etcdtest runs real etcd clusters for tests: three members of Debian's etcd
// (package etcd-server, the `etcd` binary on PATH) on loopback ports, in a temporary
// directory, stopped when the test (or, for Shared, the test binary) ends. When etcd is
// missing, a test skips, unless CI=true, where it fails.
package etcdtest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// Members is how many members a cluster has.
const Members = 3

// Cluster is a running etcd cluster.
type Cluster struct {
	// Endpoints are the members' client URLs.
	Endpoints []string
	procs     []*exec.Cmd
	args      [][]string
	dir       string
	pki       *pkiFiles
}

// Binary returns the etcd binary's path, skipping t when there is none (failing it in CI).
func Binary(t testing.TB) string {
	t.Helper()
	path, err := exec.LookPath("etcd")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("etcd is not installed (.ci/deps.sh installs Debian's etcd-server): %v", err)
		}
		t.Skipf("etcd is not installed, so the etcd store is not tested (apt-get install etcd-server): %v", err)
	}
	return path
}

// Start starts a cluster in t's temporary directory and stops it when t ends; flags are
// given to every member beside its own (`--max-request-bytes`, `262144`, say).
func Start(t testing.TB, flags ...string) *Cluster {
	t.Helper()
	c, err := start(Binary(t), t.TempDir(), nil, flags)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Stop)
	return c
}

// TLSFiles are the PEM files of a cluster started by StartTLS.
type TLSFiles struct {
	// CA issued the members' and the client's certificates.
	CA string
	// ClientCert and ClientKey are a client certificate the members accept.
	ClientCert, ClientKey string
}

// StartTLS is Start with the client URLs on https, the members' certificates issued by a
// new CA, and client certificates of that CA required (--client-cert-auth).
func StartTLS(t testing.TB) (*Cluster, TLSFiles) {
	t.Helper()
	dir := t.TempDir()
	files, err := writePKI(dir)
	if err != nil {
		t.Fatal(err)
	}
	c, err := start(Binary(t), dir, &files, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Stop)
	return c, files.TLSFiles
}

var (
	shared     *Cluster
	sharedErr  error
	sharedOnce sync.Once
	prefixes   atomic.Int64
)

// Shared is one cluster for every test of the test binary that asks, started on first
// use; Main (the package's TestMain) stops it and removes its directory, and its members
// die with the test binary in any case. The directory of a test binary killed before
// Main's end (hundreds of MiB: the members' preallocated logs) is removed by the next
// Shared (removeOrphans). Tests sharing it keep apart by Prefix.
func Shared(t testing.TB) *Cluster {
	t.Helper()
	bin := Binary(t)
	sharedOnce.Do(func() {
		removeOrphans()
		dir, err := os.MkdirTemp("", sharedPattern)
		if err == nil {
			err = os.WriteFile(filepath.Join(dir, ownerFile), []byte(strconv.Itoa(os.Getpid())), 0o600)
		}
		if err != nil {
			sharedErr = err
			return
		}
		shared, sharedErr = start(bin, dir, nil, nil)
	})
	if sharedErr != nil {
		t.Fatal(sharedErr)
	}
	return shared
}

// sharedPattern names the shared clusters' directories in the temporary directory, and
// ownerFile the file in each that holds the process id of the test binary it is of.
const (
	sharedPattern = "etcdtest-"
	ownerFile     = "owner.pid"
)

// removeOrphans removes the shared clusters' directories whose test binary is gone.
func removeOrphans() {
	dirs, _ := filepath.Glob(filepath.Join(os.TempDir(), sharedPattern+"*"))
	for _, dir := range dirs {
		b, err := os.ReadFile(filepath.Join(dir, ownerFile))
		if err != nil {
			continue // of a release before the owner file, or still being made
		}
		if pid, err := strconv.Atoi(string(b)); err == nil && pid > 0 && errors.Is(syscall.Kill(pid, 0), syscall.ESRCH) {
			os.RemoveAll(dir)
		}
	}
}

// Main runs a package's tests and then stops the shared cluster, if one was started,
// and removes its directory: the TestMain of a package whose tests call Shared.
func Main(m *testing.M) {
	code := m.Run()
	stopShared()
	os.Exit(code)
}

// stopShared stops the shared cluster, if one was started, and removes its directory.
func stopShared() {
	if shared != nil {
		shared.Stop()
		os.RemoveAll(shared.dir)
	}
}

// Prefix is a key prefix no other caller in this test binary gets.
func Prefix(t testing.TB) string {
	return fmt.Sprintf("test/%s/%d", strings.ReplaceAll(t.Name(), "/", "_"), prefixes.Add(1))
}

func start(bin, dir string, pki *pkiFiles, flags []string) (*Cluster, error) {
	ports, err := freePorts(2 * Members)
	if err != nil {
		return nil, err
	}
	c := &Cluster{dir: dir, pki: pki}
	scheme := "http"
	if pki != nil {
		scheme = "https"
	}
	var initial []string
	for i := range Members {
		initial = append(initial, fmt.Sprintf("m%d=http://127.0.0.1:%d", i, ports[2*i+1]))
	}
	for i := range Members {
		client, peer := fmt.Sprintf("%s://127.0.0.1:%d", scheme, ports[2*i]), fmt.Sprintf("http://127.0.0.1:%d", ports[2*i+1])
		c.Endpoints = append(c.Endpoints, client)
		c.args = append(c.args, []string{
			"--name", fmt.Sprintf("m%d", i), "--data-dir", filepath.Join(dir, fmt.Sprintf("m%d", i)),
			"--listen-client-urls", client, "--advertise-client-urls", client,
			"--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
			"--initial-cluster", strings.Join(initial, ","), "--initial-cluster-state", "new",
			"--initial-cluster-token", filepath.Base(dir), "--logger", "zap", "--log-outputs", filepath.Join(dir, fmt.Sprintf("m%d.log", i)),
		})
		if pki != nil {
			c.args[i] = append(c.args[i], "--cert-file", pki.serverCert, "--key-file", pki.serverKey, "--client-cert-auth", "--trusted-ca-file", pki.CA)
		}
		c.args[i] = append(c.args[i], flags...)
	}
	c.procs = make([]*exec.Cmd, Members)
	for i := range Members {
		if err := c.startMember(bin, i); err != nil {
			c.Stop()
			return nil, err
		}
	}
	if err := c.waitReady(); err != nil {
		c.Stop()
		return nil, err
	}
	return c, nil
}

func (c *Cluster) startMember(bin string, i int) error {
	cmd := exec.Command(bin, c.args[i]...)
	// The members die with the test binary even when it is killed.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start etcd member %d: %w", i, err)
	}
	c.procs[i] = cmd
	return nil
}

// waitReady waits until every member answers a linearizable read.
func (c *Cluster) waitReady() error {
	deadline := time.Now().Add(60 * time.Second)
	for _, ep := range c.Endpoints {
		for {
			err := c.ping(ep)
			if err == nil {
				break
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("etcd member %s did not become ready (logs in %s): %w", ep, c.dir, err)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	return nil
}

func (c *Cluster) ping(ep string) error {
	cfg := clientv3.Config{Endpoints: []string{ep}, DialTimeout: time.Second, Logger: zap.NewNop()}
	if c.pki != nil {
		var err error
		if cfg.TLS, err = c.pki.clientTLS(); err != nil {
			return err
		}
	}
	cli, err := clientv3.New(cfg)
	if err != nil {
		return err
	}
	defer cli.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	_, err = cli.Get(ctx, "ping")
	return err
}

// PIDs are the process ids of the members running (a killed member's is left out).
func (c *Cluster) PIDs() []int {
	var pids []int
	for _, p := range c.procs {
		if p != nil {
			pids = append(pids, p.Process.Pid)
		}
	}
	return pids
}

// Kill kills member i with SIGKILL.
func (c *Cluster) Kill(i int) {
	if p := c.procs[i]; p != nil {
		p.Process.Kill()
		p.Wait()
		c.procs[i] = nil
	}
}

// Restart starts the killed members again, with their data, and waits until every
// member answers: several killed together (a cluster without its majority) are started
// together, since none answers before a majority is up.
func (c *Cluster) Restart(t testing.TB, members ...int) {
	t.Helper()
	for _, i := range members {
		if err := c.startMember(Binary(t), i); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.waitReady(); err != nil {
		t.Fatal(err)
	}
}

// Stop kills every member.
func (c *Cluster) Stop() {
	for i := range c.procs {
		c.Kill(i)
	}
}

// freePorts returns n loopback TCP ports free when asked.
func freePorts(n int) ([]int, error) {
	var ports []int
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// Count is how many keys the cluster holds under prefix.
func (c *Cluster) Count(t testing.TB, prefix string) int64 {
	t.Helper()
	cli := c.client(t)
	defer cli.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := cli.Get(ctx, prefix, clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil {
		t.Fatal(err)
	}
	return resp.Count
}

// Put writes value at key, as another writer of the cluster (a registry of another
// release, say) would.
func (c *Cluster) Put(t testing.TB, key, value string) {
	t.Helper()
	cli := c.client(t)
	defer cli.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := cli.Put(ctx, key, value); err != nil {
		t.Fatal(err)
	}
}

// client is a new client of the cluster, with its client certificate when it has TLS.
func (c *Cluster) client(t testing.TB) *clientv3.Client {
	t.Helper()
	cfg := clientv3.Config{Endpoints: c.Endpoints, DialTimeout: 5 * time.Second, Logger: zap.NewNop()}
	if c.pki != nil {
		var err error
		if cfg.TLS, err = c.pki.clientTLS(); err != nil {
			t.Fatal(err)
		}
	}
	cli, err := clientv3.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return cli
}

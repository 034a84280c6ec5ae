package cli_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"github.com/better-compute/better-compute/registry/api"
	"github.com/better-compute/better-compute/testkit"
	"github.com/google/go-cmp/cmp"
)

// hugeBody is the size of the join.join bodies the stranger tests send: what the API read
// whole into memory before join bodies were capped.
const hugeBody = 4 << 20

// strangerTLS is the TLS configuration of a stranger that trusts the registry's serving CA
// and offers the given application protocols.
func strangerTLS(t *testing.T, reg *testkit.Registry, protos ...string) *tls.Config {
	t.Helper()
	cfg, err := api.LoadClientConfig(reg.AdminConfig)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM([]byte(cfg.ServingCA))
	return &tls.Config{RootCAs: pool, ServerName: "127.0.0.1", NextProtos: protos, MinVersion: tls.VersionTLS13}
}

// stillAnswers checks that an authenticated caller is answered while strangers hold the
// registry's connections.
func stillAnswers(t *testing.T, reg *testkit.Registry) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var out struct{ Tenants []struct{ ID string } }
	if err := testkit.Client(t, reg.AdminConfig).Call(ctx, "tenants.list", struct{}{}, &out); err != nil || len(out.Tenants) != 1 {
		t.Fatalf("an authenticated call while strangers hold connections: %v, %+v", err, out)
	}
}

// checkPeakRSS fails the test when the registry ever held more than limit bytes resident.
func checkPeakRSS(t *testing.T, reg *testkit.Registry, limit int64) {
	t.Helper()
	peak := reg.PeakRSS(t)
	t.Logf("registry peak RSS: %d MiB", peak>>20)
	if peak > limit {
		t.Errorf("the registry's resident memory reached %d MiB, over %d MiB", peak>>20, limit>>20)
	}
}

// slowJoin sends join.join on its own TLS connection with a Content-Length of hugeBody,
// then writes all of the body but its last byte as fast as the registry takes it, and
// holds the connection. It returns once it has written that much or the registry has
// stopped reading.
func slowJoin(addr string, conf *tls.Config, hold *sync.WaitGroup, conns chan<- io.Closer) {
	defer hold.Done()
	c, err := tls.Dial("tcp", addr, conf)
	if err != nil {
		return
	}
	conns <- c
	prefix := `{"nodeId":"`
	if _, err := fmt.Fprintf(c, "POST /v1/join.join HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", addr, hugeBody, prefix); err != nil {
		return
	}
	chunk := []byte(strings.Repeat("a", 64<<10))
	for left := hugeBody - len(prefix) - 1; left > 0; left -= len(chunk) {
		if _, err := c.Write(chunk[:min(left, len(chunk))]); err != nil {
			return
		}
	}
}

func TestJoinSlowBodiesStayUnder256MiB(t *testing.T) {
	reg := testkit.StartRegistry(t, "")
	addr := strings.TrimPrefix(reg.URL, "https://")
	conf := strangerTLS(t, reg, "http/1.1")
	const strangers = 300
	var hold sync.WaitGroup
	conns := make(chan io.Closer, strangers)
	defer func() {
		close(conns)
		for c := range conns {
			c.Close()
		}
	}()
	hold.Add(strangers)
	for range strangers {
		go slowJoin(addr, conf, &hold, conns)
	}
	hold.Wait()
	stillAnswers(t, reg)
	checkPeakRSS(t, reg, 256<<20)
}

// heldBody is a request body of hugeBody bytes but one that gives all but the last byte
// and then waits until released: a stranger's slow upload.
type heldBody struct {
	left    int
	reached func()
	release <-chan struct{}
}

func (b *heldBody) Read(p []byte) (int, error) {
	if b.left <= 1 {
		b.reached()
		<-b.release
		return 0, errors.New("released")
	}
	n := min(len(p), b.left-1)
	for i := range p[:n] {
		p[i] = 'a'
	}
	b.left -= n
	return n, nil
}

func TestIdleConnectionsAndHTTP2StreamsStayUnder256MiB(t *testing.T) {
	reg := testkit.StartRegistry(t, "")
	addr := strings.TrimPrefix(reg.URL, "https://")

	// 2,000 connections that each ask for the well-known document once and then idle.
	const idle = 2000
	conf := strangerTLS(t, reg, "http/1.1")
	var idlers []io.Closer
	defer func() {
		for _, c := range idlers {
			c.Close()
		}
	}()
	for range idle {
		c, err := tls.Dial("tcp", addr, conf)
		if err != nil {
			t.Fatalf("idle connection %d: %v", len(idlers), err)
		}
		idlers = append(idlers, c)
		fmt.Fprintf(c, "GET /.well-known/better-compute HTTP/1.1\r\nHost: %s\r\n\r\n", addr)
	}

	// One HTTP/2 connection with as many join.join streams as the registry lets it open,
	// each sending all of a huge body but its last byte: the transport dials once, and a
	// request for which the connection has no stream left fails.
	const streams = 250
	h2conf := strangerTLS(t, reg, "h2")
	var dialed sync.Once
	tr := &http.Transport{Protocols: new(http.Protocols), DialTLSContext: func(ctx context.Context, network, addr string) (c net.Conn, err error) {
		err = errors.New("one connection only")
		dialed.Do(func() { c, err = (&tls.Dialer{Config: h2conf}).DialContext(ctx, network, addr) })
		return c, err
	}}
	tr.Protocols.SetHTTP2(true)
	defer tr.CloseIdleConnections()
	if resp, err := tr.RoundTrip(must(http.NewRequest(http.MethodGet, reg.URL+"/.well-known/better-compute", nil))); err != nil || resp.ProtoMajor != 2 {
		t.Fatalf("HTTP/2 connection: %v", err)
	} else {
		resp.Body.Close()
	}
	release := make(chan struct{})
	defer close(release)
	var sent sync.WaitGroup
	sent.Add(streams)
	for range streams {
		go func() {
			var once sync.Once
			done := func() { once.Do(sent.Done) }
			defer done()
			req := must(http.NewRequest(http.MethodPost, reg.URL+"/v1/join.join", &heldBody{left: hugeBody, reached: done, release: release}))
			req.ContentLength = hugeBody
			req.Header.Set("Content-Type", "application/json")
			if resp, err := tr.RoundTrip(req); err == nil {
				resp.Body.Close()
			}
		}()
	}
	sent.Wait()

	stillAnswers(t, reg)
	checkPeakRSS(t, reg, 256<<20)
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

// rawCall posts body to method with the admin credential, as a client that builds its own
// requests would, and returns the status and the error answered (if any).
func rawCall(t *testing.T, reg *testkit.Registry, method, contentType, body string) (int, testkit.ErrorObject) {
	t.Helper()
	cfg, err := api.LoadClientConfig(reg.AdminConfig)
	if err != nil {
		t.Fatal(err)
	}
	req := must(http.NewRequest(http.MethodPost, reg.URL+"/v1/"+method, strings.NewReader(body)))
	req.Header.Set("Authorization", "Bearer "+cfg.Credential)
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: strangerTLS(t, reg)}}
	defer client.CloseIdleConnections()
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var e testkit.ErrorObject
	if resp.StatusCode != http.StatusOK {
		if err := json.NewDecoder(resp.Body).Decode(&e); err != nil {
			t.Fatalf("%s answered %s: %v", method, resp.Status, err)
		}
	}
	return resp.StatusCode, e
}

func TestRequestBodiesAreStrict(t *testing.T) {
	reg := testkit.StartRegistry(t, "")
	testkit.JSON(t, reg.AdminConfig, nil, "tenants", "create", "acme")
	testkit.JSON(t, reg.AdminConfig, nil, "tenants", "create", "globex")
	put := func(tenant string) string {
		return `"ref":"secret://planted","value":"aGk=","tenantId":"` + tenant + `"`
	}
	for name, tc := range map[string]struct {
		contentType, body string
		status            int
		path, says        string
	}{
		// A proxy that reads the first tenantId lets the call through for acme; Go's
		// encoding/json alone takes the last.
		"duplicate tenantId": {"application/json", `{"tenantId":"acme",` + put("globex") + `}`, 400, "tenantId", "duplicate"},
		// encoding/json alone matches keys regardless of case, the last one winning.
		"TenantID beside tenantId": {"application/json", `{"tenantId":"acme","ref":"secret://planted","value":"aGk=","TenantID":"globex"}`, 400, "TenantID", `write "tenantId"`},
		"TENANTID alone":           {"application/json", `{"TENANTID":"globex","ref":"secret://planted","value":"aGk="}`, 400, "TENANTID", "case-sensitive"},
		"a number for a string":    {"application/json", `{"tenantId":7,"ref":"secret://planted","value":"aGk="}`, 400, "tenantId", "must be a string, not a number"},
		"unknown field":            {"application/json", `{` + put("globex") + `,"owner":"acme"}`, 400, "owner", "unknown field"},
		"text/plain":               {"text/plain", `{` + put("globex") + `}`, 415, "Content-Type", "application/json"},
		"no Content-Type":          {"", `{` + put("globex") + `}`, 415, "Content-Type", "application/json"},
		"JSON in another charset":  {"application/json; charset=latin1", `{` + put("globex") + `}`, 415, "Content-Type", "application/json"},
	} {
		t.Run(name, func(t *testing.T) {
			status, e := rawCall(t, reg, "secrets.put", tc.contentType, tc.body)
			if status != tc.status || e.Code != "INVALID_INPUT" || e.Details.Path != tc.path || !strings.Contains(e.Message, tc.says) {
				t.Errorf("answered %d %+v; want %d INVALID_INPUT at %s saying %q", status, e, tc.status, tc.path, tc.says)
			}
			if strings.Contains(e.Message, "Go ") || strings.Contains(e.Message, "json:") {
				t.Errorf("the message speaks of the decoder: %q", e.Message)
			}
		})
	}
	// Nothing was stored for either tenant, and a well-formed call (charset and all) works.
	for _, tenant := range []string{"acme", "globex"} {
		var list struct{ Secrets []struct{ Ref string } }
		testkit.JSON(t, reg.AdminConfig, &list, "secrets", "list", "--tenant", tenant)
		if len(list.Secrets) != 0 {
			t.Errorf("tenant %s holds %+v", tenant, list.Secrets)
		}
	}
	if status, e := rawCall(t, reg, "secrets.put", "application/json; charset=UTF-8", `{`+put("acme")+`}`); status != 200 {
		t.Errorf("a well-formed call: %d %+v", status, e)
	}
}

func TestErrorsQuoteAShortPrefixOfTheInput(t *testing.T) {
	reg := testkit.StartRegistry(t, "")
	long := strings.Repeat("N", 4000)
	for name, tc := range map[string]struct {
		method, body, path string
		status             int
	}{
		"a join's node id":       {"join.join", `{"nodeId":"` + long + `","role":"node","publicKey":"","sealedToken":""}`, "nodeId", 400},
		"an unknown field":       {"join.join", `{"` + long + `":1}`, long, 400},
		"a tenant's name":        {"tenants.create", `{"name":"` + long + `"}`, "name", 400},
		"a join body over 4 KiB": {"join.join", `{"nodeId":"` + strings.Repeat("N", 5000) + `"}`, "", 413},
	} {
		t.Run(name, func(t *testing.T) {
			status, e := rawCall(t, reg, tc.method, "application/json", tc.body)
			if status != tc.status || e.Code != "INVALID_INPUT" || e.Details.Path != tc.path {
				t.Errorf("answered %d %s at %.40s", status, e.Code, e.Details.Path)
			}
			if len(e.Message) > 400 || strings.Contains(e.Message, strings.Repeat("N", 129)) {
				t.Errorf("a message of %d bytes: %.200s…", len(e.Message), e.Message)
			}
		})
	}
}

func TestServeRefusesADataDirectoryOthersCanEnter(t *testing.T) {
	for _, mode := range []os.FileMode{0o755, 0o750, 0o701} {
		t.Run(mode.String(), func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "data")
			if err := os.Mkdir(dir, mode); err != nil {
				t.Fatal(err)
			}
			if err := os.Chmod(dir, mode); err != nil {
				t.Fatal(err)
			}
			e := testkit.Fails(t, "", "serve", "--data-dir", dir, "--listen", "127.0.0.1:0", "--agent-listen", "127.0.0.1:0")
			if e.Code != "INVALID_CONFIG" || e.Details.Path != "--data-dir" || !strings.Contains(e.Message, "chmod 700 "+dir) {
				t.Errorf("serve on a data directory of mode %v: %+v", mode, e)
			}
			if entries, _ := os.ReadDir(dir); len(entries) != 0 {
				t.Errorf("serve wrote %v into the data directory it refused", entries)
			}
		})
	}
}

// socketWatch reports, for each entry that appears in dir, its mode at the moment it is
// seen there, until stop is closed.
func socketWatch(t *testing.T, dir string) (modes func() map[string][]os.FileMode, stop func()) {
	t.Helper()
	fd, err := syscall.InotifyInit1(syscall.IN_CLOEXEC | syscall.IN_NONBLOCK)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := syscall.InotifyAddWatch(fd, dir, syscall.IN_CREATE|syscall.IN_MOVED_TO|syscall.IN_ATTRIB); err != nil {
		t.Fatal(err)
	}
	events := os.NewFile(uintptr(fd), "inotify") // non-blocking: Close ends a Read
	seen := map[string][]os.FileMode{}
	var mu sync.Mutex
	done := make(chan struct{})
	go func() {
		defer close(done)
		buf := make([]byte, 64<<10)
		for {
			n, err := events.Read(buf)
			if err != nil || n <= 0 {
				return
			}
			for off := 0; off+syscall.SizeofInotifyEvent <= n; {
				ev := (*syscall.InotifyEvent)(unsafe.Pointer(&buf[off]))
				name := strings.TrimRight(string(buf[off+syscall.SizeofInotifyEvent:off+syscall.SizeofInotifyEvent+int(ev.Len)]), "\x00")
				off += syscall.SizeofInotifyEvent + int(ev.Len)
				if st, err := os.Lstat(filepath.Join(dir, name)); err == nil {
					mu.Lock()
					seen[name] = append(seen[name], st.Mode())
					mu.Unlock()
				}
			}
		}
	}()
	return func() map[string][]os.FileMode {
			mu.Lock()
			defer mu.Unlock()
			return maps.Clone(seen)
		}, func() {
			events.Close()
			<-done
		}
}

func TestAdminSocketIsNeverOpenToOthers(t *testing.T) {
	// The most permissive umask: whatever serve makes takes its mode from it.
	defer syscall.Umask(syscall.Umask(0))
	parent := t.TempDir()

	// A data directory serve makes itself is 0700.
	fresh := filepath.Join(parent, "new", "data")
	reg := testkit.StartRegistry(t, fresh)
	if st, err := os.Stat(fresh); err != nil || st.Mode().Perm() != 0o700 {
		t.Fatalf("the data directory serve made: %v, %v", st.Mode(), err)
	}
	reg.Stop()

	// Each time the socket, or anything else, appears in the data directory, it is open to
	// no one but its owner.
	modes, stop := socketWatch(t, fresh)
	testkit.StartRegistry(t, fresh)
	sock := filepath.Join(fresh, api.AdminSocket)
	st, err := os.Lstat(sock)
	if err != nil || st.Mode().Type() != os.ModeSocket || st.Mode().Perm() != 0o600 {
		t.Fatalf("admin socket: %v, %v", st.Mode(), err)
	}
	stop()
	seen := modes()
	if len(seen[api.AdminSocket]) == 0 {
		t.Fatalf("the socket was never seen appearing: %v", seen)
	}
	for name, ms := range seen {
		for _, m := range ms {
			if m.Perm()&0o077 != 0 {
				t.Errorf("%s appeared in the data directory with mode %v", name, m)
			}
		}
	}
	if leftovers, _ := filepath.Glob(filepath.Join(fresh, ".a-*")); len(leftovers) != 0 {
		t.Errorf("left behind: %v", leftovers)
	}

	// Another user of the host cannot connect, whatever it tries.
	if os.Geteuid() != 0 {
		t.Log("not root: the check that another user cannot connect is left out")
		return
	}
	for _, d := range []string{filepath.Dir(parent), parent, filepath.Dir(fresh)} {
		if err := os.Chmod(d, 0o755); err != nil { // only the data directory and the socket stand in the way
			t.Fatal(err)
		}
	}
	if out, err := asNobody(t, sock); err == nil || !strings.Contains(out, "connect: permission denied") {
		t.Errorf("user nobody connecting to %s: %v: %s", sock, err, out)
	}
}

// asNobody runs this test binary as user nobody (65534) to connect to the socket at path.
func asNobody(t *testing.T, path string) (string, error) {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	dir, err := os.MkdirTemp("", "bc-nobody-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	copyTo := filepath.Join(dir, "cli.test")
	data, err := os.ReadFile(self)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(copyTo, data, 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(copyTo, "-test.run=^TestConnectHelper$")
	cmd.Env = []string{"BC_CONNECT=" + path}
	cmd.Dir = "/"
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// TestConnectHelper is the process asNobody runs: it connects to BC_CONNECT and asks for
// the tenants, failing on any refusal.
func TestConnectHelper(t *testing.T) {
	path := os.Getenv("BC_CONNECT")
	if path == "" {
		t.Skip("runs only as asNobody's child")
	}
	c, err := net.Dial("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	c.Close()
}

// TestServeRemovesLeftoversOfAKilledStart kills a registry, plants the temporary files
// a kill in the middle of writing a key or admin.conf leaves, and starts it again: they
// are gone, and the registry serves with the keys and credential it had.
func TestServeRemovesLeftoversOfAKilledStart(t *testing.T) {
	reg := testkit.StartRegistry(t, "")
	reg.Kill()
	leftovers := []string{filepath.Join("pki", ".serving-ca.key.tmp-2718281828"), filepath.Join("pki", ".agent-ca.crt.tmp-1"), ".admin.conf.tmp-42"}
	for _, name := range leftovers {
		if err := os.WriteFile(filepath.Join(reg.DataDir, name), []byte("-----BEGIN PRIVATE KEY-----\nMC4C"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	again := testkit.StartRegistry(t, reg.DataDir)
	for _, name := range leftovers {
		if _, err := os.Stat(filepath.Join(reg.DataDir, name)); !os.IsNotExist(err) {
			t.Errorf("%s is still there after the start: %v", name, err)
		}
	}
	if again.Pins != reg.Pins {
		t.Errorf("pins changed: %+v, then %+v", reg.Pins, again.Pins)
	}
	testkit.JSON(t, again.AdminConfig, nil, "tenants", "list")
}

// TestServeSuggestsTheBinaryAsRun: serve's first lines end with a command to try, naming
// the binary as it was run (bin/better-compute from a checkout), not a bare name that may
// not be on PATH.
func TestServeSuggestsTheBinaryAsRun(t *testing.T) {
	bin := testkit.Binary(t, "better-compute")
	dir := filepath.Join(t.TempDir(), "data")
	stdout := startServe(t, dir)
	want := fmt.Sprintf("try: BC_CONFIG=%s %s profiles list", filepath.Join(dir, "admin.conf"), bin)
	var printed strings.Builder
	buf := make([]byte, 4096)
	for !strings.Contains(printed.String(), "profiles list") {
		n, err := stdout.Read(buf)
		printed.Write(buf[:n])
		if err != nil {
			t.Fatalf("serve's output ended (%v) before its suggestion:\n%s", err, printed.String())
		}
	}
	if !strings.Contains(printed.String(), want) {
		t.Errorf("serve does not suggest %q:\n%s", want, printed.String())
	}
}

// TestServeWithAKEKFile runs `serve --kek-file` as a process: the first start makes the
// file (0600) and keeps no key in DATA_DIR/pki, and a later start with another
// key-encryption key, or with the file readable by others, is refused at --kek-file,
// naming what to do.
func TestServeWithAKEKFile(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	kek := filepath.Join(t.TempDir(), "kek")
	reg := testkit.StartRegistry(t, dir, "--kek-file", kek)
	reg.Stop()
	if st, err := os.Stat(kek); err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("the KEK file: %v", err)
	}
	if entries, _ := os.ReadDir(filepath.Join(dir, "pki")); len(entries) != 0 {
		t.Errorf("keys in the clear in the data directory: %v", entries)
	}
	other := filepath.Join(t.TempDir(), "other")
	if err := os.WriteFile(other, []byte("better-compute-kek-v1:"+strings.Repeat("5a", 32)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	e := testkit.Fails(t, "", "serve", "--data-dir", dir, "--listen", "127.0.0.1:0", "--agent-listen", "127.0.0.1:0", "--kek-file", other)
	if e.Code != "INVALID_CONFIG" || e.Details.Path != "--kek-file" || !strings.Contains(e.Message, "copy the key-encryption key file") {
		t.Errorf("serve with another KEK: %+v", e)
	}
	os.Chmod(kek, 0o640)
	e = testkit.Fails(t, "", "serve", "--data-dir", dir, "--listen", "127.0.0.1:0", "--agent-listen", "127.0.0.1:0", "--kek-file", kek)
	if e.Code != "INVALID_CONFIG" || e.Details.Path != "--kek-file" || !strings.Contains(e.Message, "chmod 600") {
		t.Errorf("serve with a KEK file others can read: %+v", e)
	}
}

// TestServeOnEtcdNeedsAKEKFile: `serve --store etcd` without --kek-file is refused at
// --kek-file before it touches the store or the data directory (the cluster it names
// is never dialled), saying that the replicas share the keys sealed in the store.
func TestServeOnEtcdNeedsAKEKFile(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	e := testkit.Fails(t, "", "serve", "--data-dir", dir, "--listen", "127.0.0.1:0", "--agent-listen", "127.0.0.1:0",
		"--store", "etcd", "--etcd-endpoints", "http://127.0.0.1:1")
	if e.Code != "INVALID_CONFIG" || e.Details.Path != "--kek-file" || !strings.Contains(e.Message, "sealed") {
		t.Errorf("serve --store etcd without --kek-file: %+v", e)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("the refused start made its data directory: %v", err)
	}
}

// TestServeRefusesALostSecretsKey runs `serve` as a process on a store holding a tenant's
// secret: with DATA_DIR/pki/secrets.key gone, or another key in it, the start is refused
// INVALID_CONFIG at --data-dir, naming the file, its backup and --secrets-key-lost, and
// makes no key; the key put back, the secret is there. Lost for good, --secrets-key-lost
// starts it once with a new key, and the next start needs the flag no more. A store
// without secrets makes a new key when its key is gone.
func TestServeRefusesALostSecretsKey(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	keyFile := filepath.Join(dir, "pki", "secrets.key")
	reg := testkit.StartRegistry(t, dir)
	reg.Stop()
	os.Remove(keyFile)
	reg = testkit.StartRegistry(t, dir)
	value := filepath.Join(t.TempDir(), "value")
	testkit.WriteFile(t, value, []byte("abcdef.0123456789abcdef"), 0o600)
	testkit.JSON(t, reg.AdminConfig, nil, "secrets", "put", "--ref", "secret://k8s/prod-join", "--file", value)
	reg.Stop()
	saved, err := os.ReadFile(keyFile)
	if err != nil {
		t.Fatal(err)
	}
	serve := []string{"serve", "--data-dir", dir, "--listen", "127.0.0.1:0", "--agent-listen", "127.0.0.1:0"}
	for what, change := range map[string]func(){
		"gone":     func() { os.Remove(keyFile) },
		"replaced": func() { testkit.WriteFile(t, keyFile, bytes.Repeat([]byte{7}, 32), 0o600) },
	} {
		change()
		e := testkit.Fails(t, "", serve...)
		if e.Code != "INVALID_CONFIG" || e.Details.Path != "--data-dir" || !strings.Contains(e.Message, keyFile) ||
			!strings.Contains(e.Message, "from a backup") || !strings.Contains(e.Message, "--secrets-key-lost") {
			t.Errorf("serve with the secrets key %s: %+v", what, e)
		}
	}
	os.Remove(keyFile)
	testkit.Fails(t, "", serve...)
	if _, err := os.Stat(keyFile); !os.IsNotExist(err) {
		t.Errorf("the refused start made a secrets key: %v", err)
	}

	testkit.WriteFile(t, keyFile, saved, 0o600)
	reg = testkit.StartRegistry(t, dir)
	if list := testkit.CLI(t, reg.AdminConfig, "secrets", "list"); !strings.Contains(list.Stdout, "secret://k8s/prod-join") {
		t.Errorf("secrets list with the key put back:\n%s%s", list.Stdout, list.Stderr)
	}
	reg.Stop()

	os.Remove(keyFile)
	reg = testkit.StartRegistry(t, dir, "--secrets-key-lost")
	testkit.JSON(t, reg.AdminConfig, nil, "secrets", "put", "--ref", "secret://k8s/prod-join", "--file", value)
	reg.Stop()
	if !strings.Contains(reg.Stderr.String(), "--secrets-key-lost") {
		t.Errorf("the start with --secrets-key-lost logs nothing of it:\n%s", reg.Stderr)
	}
	testkit.StartRegistry(t, dir).Stop()
}

// TestServePrintsItsJSONInTheAPIsCase: `serve --format json` prints what it started with
// the keys the README lists, camelCase as every other command's JSON, each with
// its value; before, it printed Go's field names (URL, AdminConfig, FirstStart, ...).
func TestServePrintsItsJSONInTheAPIsCase(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	kek := filepath.Join(t.TempDir(), "kek")
	var info map[string]any
	if err := json.NewDecoder(startServe(t, dir, "--metrics-listen", "127.0.0.1:0", "--kek-file", kek, "--format", "json")).Decode(&info); err != nil {
		t.Fatalf("serve's JSON: %v", err)
	}
	var keys []string
	for k := range info {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	want := []string{"adminConfig", "agentEndpoint", "agentEndpoints", "firstStart", "kekFile", "kekMade", "metricsUrl", "pins", "pinsFile", "url"}
	if !slices.Equal(keys, want) {
		t.Fatalf("serve --format json printed the keys %q, want %q:\n%v", keys, want, info)
	}
	if info["adminConfig"] != filepath.Join(dir, "admin.conf") || info["pinsFile"] != filepath.Join(dir, "pins.json") || info["kekFile"] != kek ||
		info["firstStart"] != true || info["kekMade"] != true || !strings.HasPrefix(info["url"].(string), "https://127.0.0.1:") {
		t.Errorf("serve --format json: %v", info)
	}
}

// startServe starts `serve` on the data directory dir, on loopback ports, with args
// added, and returns what it prints on standard output; it is stopped when the test ends.
func startServe(t *testing.T, dir string, args ...string) io.Reader {
	t.Helper()
	cmd := exec.Command(testkit.Binary(t, "better-compute"), append([]string{"serve", "--data-dir", dir, "--listen", "127.0.0.1:0", "--agent-listen", "127.0.0.1:0"}, args...)...)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Signal(syscall.SIGTERM); cmd.Wait() })
	return stdout
}

// TestServeRefusesALostPKI runs `serve` as a process on a store holding a site's join
// token: with the serving CA's files of DATA_DIR/pki gone, the whole of pki/ gone, or
// another agent CA in it, the start is refused INVALID_CONFIG at --data-dir, naming the
// files, their backup and --pki-lost, and leaves the data directory byte for byte as it
// was; pki/ put back, it starts with its pins and the token is listed. Lost for good,
// --pki-lost starts it once with new pins and says so, and the next start needs the
// flag no more. A store holding no token nor agent makes a new PKI when its PKI is gone.
func TestServeRefusesALostPKI(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	pkiDir := filepath.Join(dir, "pki")
	reg := testkit.StartRegistry(t, dir)
	reg.Stop()
	os.RemoveAll(pkiDir)
	reg = testkit.StartRegistry(t, dir)
	testkit.JSON(t, reg.AdminConfig, nil, "sites", "create", "rack-a", "--bmc-networks", "127.0.0.2/31")
	testkit.JSON(t, reg.AdminConfig, nil, "tokens", "create", "--kind", "site", "--site", "rack-a")
	pins := reg.Pins
	reg.Stop()
	backup := filepath.Join(t.TempDir(), "pki")
	testkit.CopyDir(t, pkiDir, backup)
	other := filepath.Join(t.TempDir(), "other")
	testkit.StartRegistry(t, other).Stop()
	serve := []string{"serve", "--data-dir", dir, "--listen", "127.0.0.1:0", "--agent-listen", "127.0.0.1:0"}
	for what, change := range map[string]func() string{
		"the serving CA gone": func() string {
			os.Remove(filepath.Join(pkiDir, "serving-ca.key"))
			os.Remove(filepath.Join(pkiDir, "serving-ca.crt"))
			return filepath.Join(pkiDir, "serving-ca.key")
		},
		"pki/ gone": func() string {
			os.RemoveAll(pkiDir)
			return filepath.Join(pkiDir, "join-signing.key")
		},
		"the agent CA replaced": func() string {
			for _, name := range []string{"agent-ca.crt", "agent-ca.key"} {
				data, err := os.ReadFile(filepath.Join(other, "pki", name))
				if err != nil {
					t.Fatal(err)
				}
				testkit.WriteFile(t, filepath.Join(pkiDir, name), data, 0o600)
			}
			return pkiDir + " is not"
		},
	} {
		named := change()
		before := testkit.Tree(t, dir)
		e := testkit.Fails(t, "", serve...)
		if e.Code != "INVALID_CONFIG" || e.Details.Path != "--data-dir" || !strings.Contains(e.Message, named) ||
			!strings.Contains(e.Message, "from a backup") || !strings.Contains(e.Message, "--pki-lost") {
			t.Errorf("serve with %s: %+v", what, e)
		}
		if diff := cmp.Diff(before, testkit.Tree(t, dir)); diff != "" {
			t.Errorf("serve with %s, refused, changed the data directory (-before +after):\n%s", what, diff)
		}
		os.RemoveAll(pkiDir)
		testkit.CopyDir(t, backup, pkiDir)
	}

	reg = testkit.StartRegistry(t, dir)
	if reg.Pins != pins {
		t.Errorf("pki/ put back: pins %+v, want %+v", reg.Pins, pins)
	}
	if list := testkit.CLI(t, reg.AdminConfig, "tokens", "list"); !strings.Contains(list.Stdout, "rack-a") {
		t.Errorf("tokens list with pki/ put back:\n%s%s", list.Stdout, list.Stderr)
	}
	reg.Stop()

	os.RemoveAll(pkiDir)
	reg = testkit.StartRegistry(t, dir, "--pki-lost")
	reg.Stop()
	if reg.Pins == pins || !strings.Contains(reg.Stderr.String(), "--pki-lost") {
		t.Errorf("the start with --pki-lost: pins %+v (lost: %+v), log:\n%s", reg.Pins, pins, reg.Stderr)
	}
	testkit.StartRegistry(t, dir).Stop()
}

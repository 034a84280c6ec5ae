// Package redfishtest runs OpenStack's Redfish emulator, sushy-tools, as a real Redfish
// peer for tests: Debian's python3 runs the snapshot in ../shared/tools/sushy-tools/src
// (beside the repository) with its fake driver (systems held in memory, no libvirt, no
// OpenStack), HTTPS with a self-signed key on a free 127.0.0.1 port, and basic
// authentication from an htpasswd file with one bcrypt entry. A test that cannot run it
// (no /usr/bin/python3, or a Python package missing) is skipped, naming what to install;
// one without the snapshot fails.
package redfishtest

import (
	"bufio"
	"cmp"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/better-compute/better-compute/bmc/redfishsim"
	"golang.org/x/crypto/bcrypt"
)

// Version is the sushy-tools snapshot the tests run: the commit of the
// openstack/sushy-tools repository it was taken from (../shared/tools/sushy-tools/README.md).
const Version = "2b51921cc7cf248f14ae7e45d53f379643492cec"

// The one system of the emulator, and the login it accepts.
const (
	SystemID = "5d2d5c0c-3a3b-4c4e-9c1e-0f6a0e3b7a11"
	// SystemName is the system's Name, which the emulator also accepts in paths.
	SystemName = "node-1"
	MAC        = "52:54:00:AB:CD:01"
	Username   = "operator"
	Password   = "s3cret-Pa55"
)

// python is Debian's interpreter, which sees the packages .ci/deps.sh installs.
const python = "/usr/bin/python3"

// packages are the Debian packages of the modules the emulator imports with the fake
// driver, by module.
var packages = map[string]string{
	"flask":    "python3-flask",
	"requests": "python3-requests",
	"tenacity": "python3-tenacity",
	"bcrypt":   "python3-bcrypt",
	"webob":    "python3-webob",
}

// Config shapes the emulator's system.
type Config struct {
	// PowerState is the system's power at start, On or Off (Off when empty).
	PowerState string
	// NoVirtualMedia gives the system no virtual media devices.
	NoVirtualMedia bool
}

// Emulator is a running sushy-tools.
type Emulator struct {
	// Address is 127.0.0.1:PORT, a binding's address.
	Address string
	// Certificate is the emulator's self-signed certificate.
	Certificate *x509.Certificate

	dir    string
	log    string
	client *http.Client
}

// Start runs the emulator until the test ends, skipping the test when Python or a
// package is missing.
func Start(t testing.TB, cfg Config) *Emulator {
	t.Helper()
	src := filepath.Join(moduleRoot(), "..", "shared", "tools", "sushy-tools", "src")
	if _, err := os.Stat(filepath.Join(src, "sushy_tools", "emulator", "main.py")); err != nil {
		t.Fatalf("the sushy-tools snapshot must be beside the repository, in ../shared/tools/sushy-tools: %v", err)
	}
	requirePython(t)
	cert := redfishsim.SelfSigned()
	e := &Emulator{Certificate: cert.Leaf, dir: t.TempDir()}
	pool := x509.NewCertPool()
	pool.AddCert(cert.Leaf)
	e.client = &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	t.Cleanup(e.client.CloseIdleConnections)
	e.writeFiles(t, cert, cfg)
	// A free port can be taken by another process before the emulator binds it: try
	// again on another.
	var err error
	for range 3 {
		if err = e.start(t, src); err == nil {
			return e
		}
	}
	t.Fatal(err)
	return nil
}

// missing is what Debian's python3 lacks of what the emulator needs, found once.
var missing = sync.OnceValue(func() string {
	if _, err := os.Stat(python); err != nil {
		return fmt.Sprintf("%s is missing (Debian package python3, ", python)
	}
	modules := slices.Sorted(maps.Keys(packages))
	out, err := exec.Command(python, append([]string{"-c", findSpecs}, modules...)...).Output()
	if err != nil {
		return fmt.Sprintf("%s fails to look for modules (%v; ", python, err)
	}
	var pkgs []string
	for _, m := range strings.Fields(string(out)) {
		pkgs = append(pkgs, packages[m])
	}
	if len(pkgs) > 0 {
		return "the Redfish emulator needs the Debian packages " + strings.Join(pkgs, " ") + " ("
	}
	return ""
})

// findSpecs prints the modules among its arguments that python cannot import.
const findSpecs = `import importlib.util, sys
print(" ".join(m for m in sys.argv[1:] if importlib.util.find_spec(m) is None))`

// requirePython skips the test unless Debian's python3 has every module the emulator
// needs.
func requirePython(t testing.TB) {
	t.Helper()
	if m := missing(); m != "" {
		t.Skip(m + "installed by .ci/deps.sh)")
	}
}

// writeFiles writes the key, the certificate and the htpasswd file.
func (e *Emulator) writeFiles(t testing.TB, cert tls.Certificate, cfg Config) {
	t.Helper()
	key, err := x509.MarshalPKCS8PrivateKey(cert.PrivateKey)
	if err != nil {
		t.Fatal(err)
	}
	hash, err := bcrypt.GenerateFromPassword([]byte(Password), bcrypt.MinCost)
	if err != nil {
		t.Fatal(err)
	}
	system := map[string]any{
		"uuid":        SystemID,
		"name":        SystemName,
		"power_state": cmp.Or(cfg.PowerState, "Off"),
		// No notifications: the fake driver would PUT every change to a URL.
		"external_notifier": false,
		"nics":              []map[string]string{{"mac": MAC, "ip": "127.0.0.1"}},
	}
	devices := "None"
	if cfg.NoVirtualMedia {
		devices = "{}"
	}
	systems, _ := json.Marshal([]any{system})
	files := map[string][]byte{
		"cert.pem": pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: cert.Certificate[0]}),
		"key.pem":  pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: key}),
		"htpasswd": fmt.Appendf(nil, "%s:%s\n", Username, hash),
		"emulator.conf": fmt.Appendf(nil, `import json
SUSHY_EMULATOR_LISTEN_IP = '127.0.0.1'
SUSHY_EMULATOR_SSL_CERT = %[1]q
SUSHY_EMULATOR_SSL_KEY = %[2]q
SUSHY_EMULATOR_AUTH_FILE = %[3]q
SUSHY_EMULATOR_STATE_DIR = %[4]q
SUSHY_EMULATOR_FAKE_DRIVER = True
SUSHY_EMULATOR_FAKE_SYSTEMS = json.loads(%[5]q)
SUSHY_EMULATOR_VMEDIA_DEVICES = %[6]s
EXTERNAL_NOTIFICATION_URL = 'http://127.0.0.1:9/'
`, e.path("cert.pem"), e.path("key.pem"), e.path("htpasswd"), e.path("state"), systems, devices),
	}
	for name, data := range files {
		if err := os.WriteFile(e.path(name), data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.MkdirAll(e.path("tmp"), 0o700); err != nil {
		t.Fatal(err)
	}
}

func (e *Emulator) path(name string) string { return filepath.Join(e.dir, name) }

// start runs the emulator on a free port and waits until its service root answers.
func (e *Emulator) start(t testing.TB, src string) error {
	t.Helper()
	port, err := freePort()
	if err != nil {
		return err
	}
	logFile, err := os.Create(e.path(fmt.Sprintf("emulator-%d.log", port)))
	if err != nil {
		return err
	}
	defer logFile.Close()
	cmd := exec.Command(python, "-m", "sushy_tools.emulator.main", "--config", e.path("emulator.conf"), "--port", fmt.Sprint(port))
	// Nothing of the test's environment: no proxy, no netrc, no OpenStack or libvirt
	// settings; downloads go straight to the loopback URLs the tests give.
	cmd.Env = []string{
		"PATH=/usr/bin:/bin",
		"HOME=" + e.dir,
		"TMPDIR=" + e.path("tmp"),
		"PYTHONPATH=" + src,
		"PYTHONDONTWRITEBYTECODE=1",
		"NO_PROXY=*",
		"no_proxy=*",
	}
	cmd.Dir = e.dir
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return err
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	e.Address = fmt.Sprintf("127.0.0.1:%d", port)
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case err := <-exited:
			return fmt.Errorf("the emulator exited (%v):\n%s", err, e.tail(logFile.Name()))
		case <-time.After(50 * time.Millisecond):
		}
		if resp, err := e.client.Get("https://" + e.Address + "/redfish/v1/"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				t.Cleanup(func() {
					cmd.Process.Signal(syscall.SIGTERM)
					select {
					case <-exited:
					case <-time.After(5 * time.Second):
						cmd.Process.Kill()
						<-exited
					}
					if t.Failed() {
						t.Logf("the emulator's log:\n%s", e.tail(logFile.Name()))
					}
				})
				e.log = logFile.Name()
				return nil
			}
		}
	}
	cmd.Process.Kill()
	<-exited
	return fmt.Errorf("the emulator did not answer within 30s:\n%s", e.tail(logFile.Name()))
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// tail is the end of a log file, for a failure's message.
func (e *Emulator) tail(name string) string {
	b, _ := os.ReadFile(name)
	const max = 4000
	if len(b) > max {
		b = b[len(b)-max:]
	}
	return string(b)
}

// Get reads a resource of the emulator as JSON into v, with the test login.
func (e *Emulator) Get(t testing.TB, path string, v any) {
	t.Helper()
	if err := e.get(context.Background(), path, v); err != nil {
		t.Fatal(err)
	}
}

func (e *Emulator) get(ctx context.Context, path string, v any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "https://"+e.Address+path, nil)
	if err != nil {
		return err
	}
	req.SetBasicAuth(Username, Password)
	resp, err := e.client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s: %s", path, resp.Status, body)
	}
	return json.Unmarshal(body, v)
}

// Boot is the system's boot override as the emulator reports it.
type Boot struct {
	BootSourceOverrideTarget  string
	BootSourceOverrideEnabled string
	BootSourceOverrideMode    string
}

// System is what the emulator reports of its system.
type System struct {
	PowerState string
	Boot       Boot
}

// System reads the emulator's system.
func (e *Emulator) System(t testing.TB) System {
	t.Helper()
	var s System
	e.Get(t, "/redfish/v1/Systems/"+SystemID, &s)
	return s
}

// request is a line of the emulator's access log: `"METHOD PATH HTTP/1.1" STATUS`.
var request = regexp.MustCompile(`"([A-Z]+) (\S+) HTTP/[0-9.]+" ([0-9]{3})`)

// Requests are the requests the emulator has served, as "METHOD PATH STATUS".
func (e *Emulator) Requests(t testing.TB) []string {
	t.Helper()
	f, err := os.Open(e.log)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if m := request.FindStringSubmatch(sc.Text()); m != nil {
			out = append(out, m[1]+" "+m[2]+" "+m[3])
		}
	}
	return out
}

// moduleRoot is the directory of go.mod, found from this file's location.
func moduleRoot() string {
	_, file, _, _ := runtime.Caller(0)
	for dir := filepath.Dir(file); ; dir = filepath.Dir(dir) {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		if dir == filepath.Dir(dir) {
			return ""
		}
	}
}

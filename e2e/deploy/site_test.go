package deploy

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/better-compute/better-compute/agent/bcdconf"
	"github.com/better-compute/better-compute/agent/session"
	"github.com/better-compute/better-compute/boot"
	"github.com/better-compute/better-compute/proto"
	"github.com/better-compute/better-compute/testkit"
)

// machine is one simulated machine: its disk, its sysfs, and the bcd ramdisk process
// its power cycles start.
type machine struct {
	dir         string
	disk        string
	productUUID string
	// env is added to the environment of its ramdisk and of the OS it boots.
	env []string
}

// newMachine makes a machine whose firmware reports productUUID and whose disk is an
// empty file of size bytes.
func newMachine(t *testing.T, productUUID string, size int64) *machine {
	m := &machine{dir: t.TempDir(), productUUID: productUUID}
	m.disk = filepath.Join(m.dir, "disk")
	files := map[string]string{
		"sys/class/dmi/id/product_uuid": productUUID + "\n",
		"sys/class/dmi/id/sys_vendor":   "QEMU\n",
		"proc/cpuinfo":                  "processor\t: 0\nmodel name\t: Test CPU\n",
		"proc/meminfo":                  "MemTotal:       4096000 kB\n",
	}
	for name, content := range files {
		p := filepath.Join(m.dir, "sys-root", name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	testkit.SparseFile(t, m.disk, size)
	return m
}

// site is a site agent in the test process: it joins with a site token, records every
// command, keeps each machine's boot entry, and power-cycles a machine by (re)starting
// its bcd ramdisk when its entry is a ramdisk boot. Its cache serves an image only at a
// URL with a capability the key of its SiteSpec opens, as a site's cache does.
type site struct {
	t        *testing.T
	bcd      string
	certFile string // the image server's certificate, trusted by the ramdisks

	agent    *session.Agent
	httpBase string // the site's HTTP server, where its cache serves images by digest

	mu     sync.Mutex
	cached map[string][]byte // the cache's images by digest
	// cachedFrom is the source of each cached image, by digest.
	cachedFrom map[string]string
	served     int // image requests the cache answered
	// cacheKey is the registry's cache capability key, from the SiteSpec.
	cacheKey ed25519.PublicKey
	calls    []string
	machines map[string]*machine
	entries  map[string]proto.PrepareRamdisk
	boot     map[string]string // the boot device each machine is set to
	procs    map[string]*exec.Cmd
	// held, when set, holds a power-off until it is closed; holding is closed as one
	// starts.
	held, holding chan struct{}
	// beforeRamdisk, when set, runs as a machine powers on into a ramdisk entry, before
	// its bcd ramdisk starts: another host on the provisioning network that read the
	// entry's boot script; s.mu is held.
	beforeRamdisk func(node string, entry proto.PrepareRamdisk)
}

func startSite(t *testing.T, reg *testkit.Registry, name, certFile string) *site {
	s := &site{t: t, bcd: testkit.Binary(t, "bcd"), certFile: certFile, machines: map[string]*machine{}, cached: map[string][]byte{}, cachedFrom: map[string]string{},
		entries: map[string]proto.PrepareRamdisk{}, boot: map[string]string{}, procs: map[string]*exec.Cmd{}}
	srv := httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		d := strings.TrimPrefix(r.URL.Path, "/images/sha256/")
		s.mu.Lock()
		opens := s.cacheKey != nil && proto.VerifyCacheCap([]ed25519.PublicKey{s.cacheKey}, r.URL.RawQuery, d, time.Now())
		b, ok := s.cached[d]
		if ok && opens {
			s.served++
		}
		s.mu.Unlock()
		if !opens {
			http.Error(rw, "no valid capability", http.StatusForbidden)
			return
		}
		if !ok {
			http.NotFound(rw, r)
			return
		}
		http.ServeContent(rw, r, "", time.Time{}, bytes.NewReader(b))
	}))
	t.Cleanup(srv.Close)
	s.httpBase = srv.URL
	siteSection, _ := json.Marshal(proto.SiteInventory{HTTPBase: s.httpBase})
	creds, err := bcdconf.LoadAgent(testkit.JoinSite(t, reg, name))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	agent, err := session.New(session.Config{
		Addr: creds.Config.AgentEndpoint, Addrs: creds.Config.Endpoints(), Certificate: creds.Certificate, ServerCAs: creds.ServingCAs,
		Inventory: map[string]json.RawMessage{proto.SectionSite: siteSection},
		Apply: func(_ context.Context, spec proto.NodeSpec) error {
			if spec.Site == nil || spec.Site.CacheKey == "" {
				return nil
			}
			key, err := proto.ParseCacheKey(spec.Site.CacheKey)
			s.mu.Lock()
			s.cacheKey = key
			s.mu.Unlock()
			return err
		},
		Log: slog.New(slog.DiscardHandler),
		Handlers: map[string]session.Handler{
			proto.CommandPrepareRamdisk: s.handle(s.prepareRamdisk),
			"management.setBootDevice":  s.handle(s.setBootDevice),
			"power.setPower":            s.handle(s.setPower),
			"boot.cleanUp":              s.handle(func(string, json.RawMessage) error { return nil }),
			// The BMC reads of metal-enroll: the machine is on, and its BMC tells no more.
			"power.getPower": s.handle(func(string, json.RawMessage) error { return nil }),
			"inspect.oob":    s.handle(func(string, json.RawMessage) error { return nil }),
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	s.agent = agent
	done := make(chan struct{})
	go func() { agent.Run(ctx); close(done) }()
	t.Cleanup(func() {
		cancel()
		<-done
		s.mu.Lock()
		defer s.mu.Unlock()
		for _, p := range s.procs {
			syscall.Kill(-p.Process.Pid, syscall.SIGKILL)
			p.Wait()
		}
	})
	return s
}

// cache puts an artifact pulled from source in the site's cache and reports the cache's
// images, each with the source it came from (the registry locates no image without).
func (s *site) cache(digest string, b []byte, source string) {
	s.mu.Lock()
	s.cached[digest] = b
	s.cachedFrom[digest] = source
	var entries []proto.ImageCacheEntry
	for d, b := range s.cached {
		entries = append(entries, proto.ImageCacheEntry{Digest: d, State: proto.CacheReady, SizeBytes: int64(len(b)), Sources: []string{s.cachedFrom[d]}})
	}
	s.mu.Unlock()
	data, _ := json.Marshal(entries)
	s.agent.SetInventory("images", data)
}

// cacheHits is how many image requests the site's cache answered.
func (s *site) cacheHits() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.served
}

// add makes m the machine of node.
func (s *site) add(node string, m *machine) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.machines[node] = m
}

// handle decodes a site command, records it as "kind input" and runs fn.
func (s *site) handle(fn func(node string, input json.RawMessage) error) session.Handler {
	return func(_ context.Context, payload json.RawMessage) (json.RawMessage, error) {
		var c proto.SiteCommand
		if err := json.Unmarshal(payload, &c); err != nil {
			return nil, err
		}
		s.mu.Lock()
		s.calls = append(s.calls, c.Node+" "+string(c.Input))
		s.mu.Unlock()
		if err := fn(c.Node, c.Input); err != nil {
			return nil, err
		}
		return json.RawMessage(`{}`), nil
	}
}

// holdPowerOff makes the next power-off wait until the returned release is called; the
// returned channel is closed once it waits.
func (s *site) holdPowerOff() (holding <-chan struct{}, release func()) {
	s.mu.Lock()
	defer s.mu.Unlock()
	held := make(chan struct{})
	s.held, s.holding = held, make(chan struct{})
	return s.holding, func() { close(held) }
}

// commands are the site commands received so far, "node input" each.
func (s *site) commands() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.calls...)
}

func (s *site) prepareRamdisk(node string, input json.RawMessage) error {
	var p proto.PrepareRamdisk
	if err := json.Unmarshal(input, &p); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.entries[node] = p
	return nil
}

func (s *site) setBootDevice(node string, input json.RawMessage) error {
	var in struct{ Device string }
	if err := json.Unmarshal(input, &in); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.boot[node] = in.Device
	return nil
}

// setPower acts on the machine's power: whatever ran on it stops, and unless the action
// is off, a PXE boot with a ramdisk entry starts bcd ramdisk with the entry's command
// line, and a disk boot the installed OS's bcd node, if an OS was installed.
func (s *site) setPower(node string, input json.RawMessage) error {
	var in struct{ Action string }
	if err := json.Unmarshal(input, &in); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if p := s.procs[node]; p != nil {
		syscall.Kill(-p.Process.Pid, syscall.SIGKILL)
		p.Wait()
		delete(s.procs, node)
	}
	m, entry := s.machines[node], s.entries[node]
	if m == nil {
		return proto.Errorf(proto.NotFound, "no machine %s at this site", node)
	}
	if in.Action == "off" || in.Action == "graceful-off" {
		if held := s.held; held != nil {
			s.held = nil
			close(s.holding)
			s.mu.Unlock()
			<-held
			s.mu.Lock()
		}
		return nil
	}
	if s.boot[node] == "disk" {
		return s.bootDisk(node, m)
	}
	if s.boot[node] != "pxe" || entry.Token == "" {
		return nil
	}
	if s.beforeRamdisk != nil {
		s.beforeRamdisk(node, entry)
	}
	r := boot.Ramdisk{Token: entry.Token, Registry: entry.Registry, Pins: entry.Pins, Args: entry.Args}
	// The ramdisk's config dir is a tmpfs: each boot starts it empty and joins with
	// that boot's token, so its certificate is of the installation of now.
	runBcd := filepath.Join(m.dir, "run-bcd")
	if err := os.RemoveAll(runBcd); err != nil {
		return err
	}
	cmdline := filepath.Join(m.dir, "cmdline")
	if err := os.WriteFile(cmdline, []byte(strings.Join(r.CommandLine(), " ")+"\n"), 0o644); err != nil {
		return err
	}
	osDir := filepath.Join(m.dir, fmt.Sprintf("os-%d", time.Now().UnixNano()))
	if err := os.MkdirAll(osDir, 0o700); err != nil {
		return err
	}
	self, err := os.Executable()
	if err != nil {
		return err
	}
	if err := newBoot(filepath.Join(m.dir, "sys-root")); err != nil {
		return err
	}
	cmd := exec.Command(s.bcd, "ramdisk", "--cmdline", cmdline, "--config-dir", runBcd,
		"--sys-root", filepath.Join(m.dir, "sys-root"), "--disk", m.disk, "--boot-command", self)
	cmd.Env = append(append(os.Environ(), m.env...), "SSL_CERT_FILE="+s.certFile, envFirstBoot+"="+osDir, envBCD+"="+s.bcd)
	return s.start(node, m, cmd)
}

// bootDisk boots the OS installed on the machine, if any: its bcd node with the
// configuration its first boot's bcd join wrote.
func (s *site) bootDisk(node string, m *machine) error {
	confs, _ := filepath.Glob(filepath.Join(m.dir, "os-*", "etc-bcd"))
	if len(confs) == 0 {
		return nil
	}
	conf := confs[len(confs)-1]
	root := filepath.Join(filepath.Dir(conf), "root")
	if err := newBoot(root); err != nil {
		return err
	}
	cmd := exec.Command(s.bcd, "node", "--config-dir", conf, "--root", root)
	cmd.Env = append(os.Environ(), m.env...)
	return s.start(node, m, cmd)
}

// start runs what the machine boots, with its console in console.log; s.mu is held.
func (s *site) start(node string, m *machine, cmd *exec.Cmd) error {
	log, err := os.Create(filepath.Join(m.dir, "console.log"))
	if err != nil {
		return err
	}
	cmd.Stdout, cmd.Stderr = log, log
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		return err
	}
	s.procs[node] = cmd
	return nil
}

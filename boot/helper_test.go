package boot

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime/pprof"
	"runtime/trace"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/better-compute/better-compute/agent/metrics"
	"github.com/better-compute/better-compute/cache"
	"github.com/better-compute/better-compute/e2e/netns"
)

// helperEnv names the helper a re-executed test binary runs instead of the tests: the
// boot server inside a network namespace, or a PXE probe or a boot storm inside another.
const helperEnv = "BC_BOOT_HELPER"

func TestMain(m *testing.M) {
	switch os.Getenv(helperEnv) {
	case "server":
		os.Exit(serverHelper(os.Getenv("BC_BOOT_HELPER_SPEC")))
	case "probe":
		os.Exit(probeHelper(os.Getenv("BC_BOOT_HELPER_SPEC")))
	case pxeStormHelper:
		os.Exit(pxeStormMain(os.Getenv("BC_BOOT_HELPER_SPEC")))
	case pxeStormUDPHelper:
		os.Exit(pxeStormUDPMain())
	case grabHelper:
		os.Exit(grabMain(os.Getenv("BC_BOOT_HELPER_SPEC")))
	}
	os.Exit(m.Run())
}

// readSpec reads a helper's spec file, JSON, into v.
func readSpec(file string, v any) error {
	b, err := os.ReadFile(file)
	if err != nil {
		return err
	}
	return json.Unmarshal(b, v)
}

// helperCommand is the command that runs the helper name in ns with spec, which it
// writes to a file of the test's for readSpec.
func helperCommand(t testing.TB, ns *netns.NS, name string, spec any) *exec.Cmd {
	t.Helper()
	b, _ := json.Marshal(spec)
	specFile := filepath.Join(t.TempDir(), name+".json")
	if err := os.WriteFile(specFile, b, 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := ns.Command(context.Background(), os.Args[0], "-test.run=^$", "-test.bench=^$")
	cmd.Env = append(os.Environ(), helperEnv+"="+name, "BC_BOOT_HELPER_SPEC="+specFile)
	return cmd
}

// serverSpec is what the server helper runs.
type serverSpec struct {
	Config Config
	// Entries is a JSON file of entries by MAC, read again at every look-up so that a
	// test can give a machine an entry while it waits.
	Entries string
	// Discoveries is the file the helper appends discoveries to, one JSON object a line.
	Discoveries string
	// Metrics has the server counted by bcd site's metrics, served on the namespace's
	// loopback at the URL the log's "metrics listening" names.
	Metrics bool
}

// fileSink appends discoveries to a file.
type fileSink struct {
	mu sync.Mutex
	f  *os.File
}

func (s *fileSink) Discovered(d Discovery) {
	s.mu.Lock()
	defer s.mu.Unlock()
	json.NewEncoder(s.f).Encode(d)
}

// fileEntries reads the entries file again whenever it changed.
type fileEntries struct {
	path string

	mu      sync.Mutex
	stamp   time.Time
	entries map[string]Entry
}

func (f *fileEntries) Entry(mac net.HardwareAddr) (Entry, bool) {
	en, ok := f.load()[mac.String()]
	return en, ok
}

func (f *fileEntries) Has(mac net.HardwareAddr) bool {
	_, ok := f.load()[mac.String()]
	return ok
}

// load is the entries, read again when the file changed.
func (f *fileEntries) load() map[string]Entry {
	f.mu.Lock()
	defer f.mu.Unlock()
	if st, err := os.Stat(f.path); err == nil && !st.ModTime().Equal(f.stamp) {
		var e map[string]Entry
		if b, err := os.ReadFile(f.path); err == nil && json.Unmarshal(b, &e) == nil {
			f.entries, f.stamp = e, st.ModTime()
		}
	}
	return f.entries
}

// serverHelper runs a boot server from the spec file until SIGTERM.
func serverHelper(specFile string) int {
	var spec serverSpec
	if err := readSpec(specFile, &spec); err != nil {
		fmt.Fprintln(os.Stderr, "helper:", err)
		return 2
	}
	f, err := os.OpenFile(spec.Discoveries, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		fmt.Fprintln(os.Stderr, "helper:", err)
		return 2
	}
	var logTo io.Writer = os.Stderr
	dir := os.Getenv("BC_BOOT_PROFILE")
	if dir != "" {
		stop, logFile := profile(dir)
		defer stop()
		logTo = io.MultiWriter(os.Stderr, logFile)
	}
	log := slog.New(slog.NewTextHandler(logTo, &slog.HandlerOptions{Level: slog.LevelDebug}))
	// The entries are read before the server listens, as a site's are in memory before
	// its server starts: read at the first request, a benchmark's tens of thousands
	// held up the first exchanges.
	entries := &fileEntries{path: spec.Entries}
	entries.load()
	deps := Deps{Entries: entries, Discoveries: &fileSink{f: f}, Log: log}
	if spec.Metrics {
		site := metrics.NewSite(func() cache.Usage { return cache.Usage{} }, func() int64 { return 0 }, func() bool { return false })
		_, stop, err := metrics.Serve("127.0.0.1:0", "metricsListen", site.Gatherer(), log)
		if err != nil {
			fmt.Fprintln(os.Stderr, "helper:", err)
			return 2
		}
		defer stop()
		deps.Observer = site
	}
	s, err := New(spec.Config, deps)
	if err != nil {
		fmt.Fprintln(os.Stderr, "helper:", err)
		return 2
	}
	defer s.Close()
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	if err := s.Run(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "helper:", err)
		return 1
	}
	return 0
}

// profile has the server helper write into dir, in files named by its process id, a
// runtime trace (.trace), a CPU profile (.cpu) and its log (.log, the writer it returns),
// and, when stop is called, its namespace's UDP counters (.snmp, /proc/net/snmp):
// BC_BOOT_PROFILE=dir has every boot server a test or benchmark starts observed so.
func profile(dir string) (stop func(), log io.Writer) {
	name := filepath.Join(dir, strconv.Itoa(os.Getpid()))
	var files []*os.File
	create := func(ext string) *os.File {
		f, err := os.Create(name + ext)
		if err != nil {
			fmt.Fprintln(os.Stderr, "helper:", err)
			return nil
		}
		files = append(files, f)
		return f
	}
	tf, cf, lf := create(".trace"), create(".cpu"), create(".log")
	if tf == nil || cf == nil || lf == nil {
		for _, f := range files {
			f.Close()
		}
		return func() {}, io.Discard
	}
	trace.Start(tf)
	pprof.StartCPUProfile(cf)
	return func() {
		pprof.StopCPUProfile()
		trace.Stop()
		if snmp, err := os.ReadFile("/proc/net/snmp"); err == nil {
			os.WriteFile(name+".snmp", snmp, 0o644)
		}
		for _, f := range files {
			f.Close()
		}
	}, lf
}

// bootServer is a boot server running in a namespace.
type bootServer struct {
	cmd         *exec.Cmd
	log         *netns.SyncBuffer
	discoveries string
	entries     string
	// stop ends the server (SIGTERM) and waits for it; the test's end calls it too.
	stop func()
}

// SetEntries replaces the server's entries.
func (s *bootServer) SetEntries(t testing.TB, e map[string]Entry) {
	t.Helper()
	b, _ := json.Marshal(e)
	if err := os.WriteFile(s.entries+".tmp", b, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(s.entries+".tmp", s.entries); err != nil {
		t.Fatal(err)
	}
}

// startServer runs a boot server with cfg and entries inside ns and waits until it
// listens; it stops when the test ends.
func startServer(t testing.TB, ns *netns.NS, cfg Config, e map[string]Entry) *bootServer {
	t.Helper()
	return startServerSpec(t, ns, serverSpec{Config: cfg}, e)
}

// startServerSpec is startServer with the rest of spec (Metrics) as given.
func startServerSpec(t testing.TB, ns *netns.NS, spec serverSpec, e map[string]Entry) *bootServer {
	t.Helper()
	dir := t.TempDir()
	spec.Entries, spec.Discoveries = filepath.Join(dir, "entries.json"), filepath.Join(dir, "discoveries.jsonl")
	b, _ := json.Marshal(spec)
	specFile := filepath.Join(dir, "spec.json")
	if err := os.WriteFile(specFile, b, 0o644); err != nil {
		t.Fatal(err)
	}
	s := &bootServer{log: &netns.SyncBuffer{}, discoveries: spec.Discoveries, entries: spec.Entries}
	s.SetEntries(t, e)
	s.cmd = ns.Command(context.Background(), os.Args[0], "-test.run=^$")
	s.cmd.Env = append(os.Environ(), helperEnv+"=server", "BC_BOOT_HELPER_SPEC="+specFile)
	s.cmd.Stdout, s.cmd.Stderr = s.log, s.log
	if err := s.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { s.cmd.Wait(); close(exited) }()
	s.stop = sync.OnceFunc(func() {
		s.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
			s.cmd.Process.Kill()
			<-exited
		}
	})
	t.Cleanup(func() {
		s.stop()
		if code := s.cmd.ProcessState.ExitCode(); code != 0 {
			t.Errorf("boot server exited with %d after SIGTERM, want 0", code)
		}
		if t.Failed() {
			t.Logf("boot server log:\n%s", s.log.String())
		}
	})
	deadline := time.After(20 * time.Second)
	for !strings.Contains(s.log.String(), "boot server listening") {
		select {
		case <-exited:
			t.Fatalf("boot server exited:\n%s", s.log.String())
		case <-deadline:
			t.Fatalf("boot server did not start:\n%s", s.log.String())
		case <-time.After(20 * time.Millisecond):
		}
	}
	return s
}

// Discoveries returns what the server reported so far.
func (s *bootServer) Discoveries(t *testing.T) []Discovery {
	t.Helper()
	b, err := os.ReadFile(s.discoveries)
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	var out []Discovery
	dec := json.NewDecoder(bytes.NewReader(b))
	for dec.More() {
		var d Discovery
		if err := dec.Decode(&d); err != nil {
			t.Fatal(err)
		}
		out = append(out, d)
	}
	return out
}

package site

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/better-compute/better-compute/e2e/netns"
	"github.com/better-compute/better-compute/testkit"
)

// helperEnv makes the test binary a registry side inside a site's namespace
// (TestSiteHelper): its value is the helper's name, "=", and its work directory.
const helperEnv = "BC_SITE_HELPER"

// helpers are the registry sides a test runs as a helper, by name: each runs with ctx
// (200 s) and the spec its test wrote, and waits for SIGINT once done.
var helpers = map[string]func(ctx context.Context, spec helperSpec) error{
	"vm":       runVMHelper,
	"enrolled": runEnrolledHelper,
}

// helperSpec is what a test hands its helper.
type helperSpec struct {
	Work, Ramdisk, BCD, QMP string
}

// startHelper runs the test binary in ns as the helper name with spec (written to
// spec.Work) until the test ends, and returns what it and the bcd site it starts print;
// shown when the test failed.
func startHelper(t *testing.T, ns *netns.NS, name string, spec helperSpec) *netns.SyncBuffer {
	t.Helper()
	data, _ := json.Marshal(spec)
	testkit.WriteFile(t, filepath.Join(spec.Work, "helper.json"), data, 0o600)
	ctx, cancel := context.WithCancel(context.Background())
	helper := ns.Command(ctx, os.Args[0], "-test.run=^TestSiteHelper$", "-test.v")
	helper.Env = append(os.Environ(), helperEnv+"="+name+"="+spec.Work)
	out := &netns.SyncBuffer{}
	helper.Stdout, helper.Stderr = out, out
	if err := helper.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		helper.Process.Signal(os.Interrupt)
		done := make(chan struct{})
		go func() { helper.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(15 * time.Second):
			cancel()
			<-done
		}
		if t.Failed() {
			t.Logf("registry side and bcd site:\n%s", out.String())
		}
	})
	return out
}

// TestSiteHelper is the registry side of another test (startHelper); it runs only as its
// helper.
func TestSiteHelper(t *testing.T) {
	name, work, ok := strings.Cut(os.Getenv(helperEnv), "=")
	if !ok {
		t.Skip("the helper of the tests in a site's namespace")
	}
	err := func() error {
		data, err := os.ReadFile(filepath.Join(work, "helper.json"))
		if err != nil {
			return err
		}
		var spec helperSpec
		if err := json.Unmarshal(data, &spec); err != nil {
			return err
		}
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Second)
		defer cancel()
		return helpers[name](ctx, spec)
	}()
	if err != nil {
		fmt.Println("HELPER-FAILED:", err)
		t.Fatal(err)
	}
}

// untilInterrupted returns once the process gets SIGINT.
func untilInterrupted() {
	stop, done := signal.NotifyContext(context.Background(), os.Interrupt)
	defer done()
	<-stop.Done()
}

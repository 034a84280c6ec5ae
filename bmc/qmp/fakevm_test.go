package qmp

import (
	"bufio"
	"encoding/json"
	"net"
	"os"
	"path/filepath"
	"sync"
	"testing"
)

// fakeVM is a QMP server standing for a VM whose guest OS answers the ACPI power
// button, which a VM without an OS cannot show: system_powerdown shuts it down (run
// state shutdown). It runs qemu's run-state rules otherwise.
type fakeVM struct {
	socket   string
	greeting string
	// restarts makes the guest reboot on the power button instead, as a guest told to
	// restart does.
	restarts bool

	mu       sync.Mutex
	status   string
	commands []string
	refuse   map[string]string // command -> qemu's error description
}

func newFakeVM(t *testing.T, status string, restarts bool) *fakeVM {
	t.Helper()
	dir, err := os.MkdirTemp("", "bc-fakevm-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	f := &fakeVM{
		socket:   filepath.Join(dir, "qmp.sock"),
		greeting: `{"QMP": {"version": {"qemu": {"micro": 0, "minor": 2, "major": 7}, "package": ""}, "capabilities": []}}` + "\r\n",
		status:   status,
		restarts: restarts,
		refuse:   map[string]string{},
	}
	l, err := net.Listen("unix", f.socket)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			f.serve(c)
		}
	}()
	return f
}

func (f *fakeVM) serve(c net.Conn) {
	defer c.Close()
	f.mu.Lock()
	greeting := f.greeting
	f.mu.Unlock()
	if _, err := c.Write([]byte(greeting)); err != nil {
		return
	}
	in := bufio.NewScanner(c)
	for in.Scan() {
		var req struct {
			Execute string          `json:"execute"`
			ID      json.RawMessage `json:"id"`
		}
		if json.Unmarshal(in.Bytes(), &req) != nil {
			return
		}
		ret, desc := f.run(req.Execute)
		answer := map[string]any{"id": req.ID, "return": ret}
		if desc != "" {
			answer = map[string]any{"id": req.ID, "error": map[string]string{"class": "GenericError", "desc": desc}}
		}
		// An event first, as qemu interleaves them.
		line, _ := json.Marshal(answer)
		if _, err := c.Write(append([]byte(`{"event": "CLIENT_SEEN", "timestamp": {"seconds": 0, "microseconds": 0}}`+"\r\n"), append(line, '\r', '\n')...)); err != nil {
			return
		}
	}
}

// run performs a command on the fake's run state.
func (f *fakeVM) run(command string) (any, string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if desc, ok := f.refuse[command]; ok {
		return nil, desc
	}
	switch command {
	case "qmp_capabilities", "qom-set":
		return map[string]any{}, ""
	case "query-status":
		return map[string]any{"status": f.status, "running": f.status == "running"}, ""
	case "qom-get":
		return -1, ""
	}
	f.commands = append(f.commands, command)
	switch command {
	case "system_powerdown":
		if f.status == "running" && !f.restarts {
			f.status = "shutdown"
		}
	case "system_reset":
		if f.status != "running" {
			f.status = "prelaunch"
		}
	case "cont":
		if f.status == "shutdown" {
			return nil, "Resetting the Virtual Machine is required"
		}
		f.status = "running"
	case "stop":
		f.status = "paused"
	case "inject-nmi":
	default:
		return nil, "The command " + command + " has not been found"
	}
	return map[string]any{}, ""
}

func (f *fakeVM) history() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.commands...)
}

func (f *fakeVM) state() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.status
}

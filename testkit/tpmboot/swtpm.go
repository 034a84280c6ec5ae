package tpmboot

import (
	"encoding/binary"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
)

// SWTPM is a software TPM 2.0 (Debian's swtpm, .ci/deps.sh) serving raw TPM commands on
// a unix socket in the test's temporary directory, its state in that directory.
type SWTPM struct {
	// Dir holds the TPM's state; Socket takes TPM commands, Ctrl swtpm's control
	// commands.
	Dir, Socket, Ctrl string
	// vm: the TPM of a qemu VM, which connects to Ctrl and initialises it at each reset.
	vm  bool
	cmd *exec.Cmd
}

// StartSWTPM starts swtpm, initialised and started up, and stops it when the test ends.
func StartSWTPM(t testing.TB) *SWTPM {
	return startSWTPM(t, false)
}

// StartForVM starts swtpm as a qemu VM's TPM: qemu's tpm-emulator connects to Ctrl
// (-chardev socket,path=Ctrl) and initialises the TPM at each reset of the machine, whose
// firmware then measures into it.
func StartForVM(t testing.TB) *SWTPM {
	return startSWTPM(t, true)
}

func startSWTPM(t testing.TB, vm bool) *SWTPM {
	t.Helper()
	if _, err := exec.LookPath("swtpm"); err != nil {
		t.Fatalf("swtpm is not installed (.ci/deps.sh installs swtpm): %v", err)
	}
	dir := t.TempDir()
	s := &SWTPM{Dir: dir, Socket: filepath.Join(dir, "server"), Ctrl: filepath.Join(dir, "ctrl"), vm: vm}
	s.start(t)
	t.Cleanup(s.stop)
	return s
}

// Reboot restarts the TPM as a machine's power cycle does: its keys and seeds stay, its
// PCRs start anew.
func (s *SWTPM) Reboot(t testing.TB) {
	t.Helper()
	s.stop()
	s.start(t)
}

func (s *SWTPM) start(t testing.TB) {
	t.Helper()
	_ = os.Remove(s.Socket)
	args := []string{"socket", "--tpm2", "--tpmstate", "dir=" + s.Dir, "--ctrl", "type=unixio,path=" + s.Ctrl}
	if !s.vm {
		args = append(args, "--server", "type=unixio,path="+s.Socket, "--flags", "not-need-init,startup-clear")
	}
	s.cmd = exec.Command("swtpm", args...)
	if err := s.cmd.Start(); err != nil {
		t.Fatalf("swtpm: %v", err)
	}
}

func (s *SWTPM) stop() {
	_ = s.cmd.Process.Kill()
	_ = s.cmd.Wait()
}

// Dial connects to the TPM: a command channel whose event log is eventLog, closed when
// the test ends (swtpm serves one connection at a time).
func (s *SWTPM) Dial(t testing.TB, eventLog []byte) *TPMChannel {
	t.Helper()
	var c net.Conn
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		var err error
		if c, err = net.Dial("unix", s.Socket); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("swtpm's socket: %v", err)
		}
	}
	t.Cleanup(func() { _ = c.Close() })
	return &TPMChannel{conn: c, log: eventLog}
}

// TPMChannel is a connection to a software TPM that reads each response whole, with the
// event log its machine would have.
type TPMChannel struct {
	conn    net.Conn
	log     []byte
	pending []byte
}

// Write sends a command.
func (c *TPMChannel) Write(p []byte) (int, error) { return c.conn.Write(p) }

// Read returns the response: its header (tag, then its size), then the rest.
func (c *TPMChannel) Read(p []byte) (int, error) {
	if len(c.pending) == 0 {
		head := make([]byte, 6)
		if _, err := io.ReadFull(c.conn, head); err != nil {
			return 0, err
		}
		size := binary.BigEndian.Uint32(head[2:])
		if size < 6 || size > 1<<20 {
			return 0, io.ErrUnexpectedEOF
		}
		c.pending = make([]byte, size)
		copy(c.pending, head)
		if _, err := io.ReadFull(c.conn, c.pending[6:]); err != nil {
			return 0, err
		}
	}
	n := copy(p, c.pending)
	c.pending = c.pending[n:]
	return n, nil
}

// Close closes the connection.
func (c *TPMChannel) Close() error { return c.conn.Close() }

// MeasurementLog returns the event log given to Dial.
func (c *TPMChannel) MeasurementLog() ([]byte, error) { return c.log, nil }

package tftp

import (
	"bytes"
	"io"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/pin/tftp/v3"
)

// TestFloodHoldsAtMostMaxTransfers is a host on the provisioning network sending read
// requests from one socket and never acknowledging what comes back, half of them asking
// for a window: each took a socket and an open file for about 12 s, so that a host
// sending a few thousand a second left the site no file descriptor for anything else.
// Now the reads in flight are at most MaxTransfers, the rest dropped and warned of; once
// the flood's reads give up, a machine's read is served whole and nothing stays held.
func TestFloodHoldsAtMostMaxTransfers(t *testing.T) {
	const (
		max   = 32
		flood = 1000
	)
	dir := t.TempDir()
	payload := bytes.Repeat([]byte("undionly"), 9000)
	must(t, os.WriteFile(filepath.Join(dir, "undionly.kpxe"), payload, 0o644))
	addr, logs := serve(t, dir, Options{MaxTransfers: max, MaxPerClient: flood, Timeout: 200 * time.Millisecond})
	conn, err := net.Dial("udp4", addr)
	must(t, err)
	defer conn.Close()
	before := openFiles(t)
	for i := range flood {
		rrq := "\x00\x01undionly.kpxe\x00octet\x00"
		if i%2 == 0 {
			rrq += "windowsize\x004\x00"
		}
		if _, err := conn.Write([]byte(rrq)); err != nil {
			t.Fatal(err)
		}
		if i%50 == 49 {
			time.Sleep(5 * time.Millisecond) // within the listening socket's buffer
		}
	}
	time.Sleep(300 * time.Millisecond)
	// Each read holds its socket and its file.
	if held := openFiles(t) - before; held > 2*max {
		t.Fatalf("%d files open after a flood of %d read requests never acknowledged, want at most %d (%d reads in flight)", held, flood, 2*max, max)
	}
	if !strings.Contains(logs.String(), "tftp read requests dropped unanswered") {
		t.Errorf("no warn of the dropped requests; log:\n%s", logs)
	}

	// The flood's reads give up after their retries; a machine's read is then served.
	deadline := time.Now().Add(20 * time.Second)
	for {
		got, err := read(addr, "undionly.kpxe")
		if err == nil {
			if !bytes.Equal(got, payload) {
				t.Fatalf("got %d bytes, want the %d of the file", len(got), len(payload))
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no read served after the flood: %v", err)
		}
	}
	for openFiles(t) > before && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	if held := openFiles(t) - before; held > 0 {
		t.Errorf("%d files still open once every read ended", held)
	}
}

// TestFloodFromOneAddressLeavesPlacesForOthers is a host sending read requests from one
// address, as fast as it can and never acknowledging: before each address had a bound,
// it held every one of MaxTransfers' places, and another machine's read was dropped
// each time it was sent, until it gave up. Now the host holds MaxPerClient places, and
// the machine at another address reads its file while the flood goes on.
func TestFloodFromOneAddressLeavesPlacesForOthers(t *testing.T) {
	dir := t.TempDir()
	payload := bytes.Repeat([]byte("undionly"), 9000)
	must(t, os.WriteFile(filepath.Join(dir, "undionly.kpxe"), payload, 0o644))
	addr, logs := serve(t, dir, Options{MaxTransfers: 64, Timeout: 200 * time.Millisecond})
	conn, err := net.DialUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)}, net.UDPAddrFromAddrPort(netip.MustParseAddrPort(addr)))
	must(t, err)
	defer conn.Close()
	stop := make(chan struct{})
	flooded := make(chan struct{})
	go func() {
		defer close(flooded)
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			conn.Write([]byte("\x00\x01undionly.kpxe\x00octet\x00"))
			if i%50 == 49 {
				time.Sleep(5 * time.Millisecond) // within the listening socket's buffer
			}
		}
	}()
	time.Sleep(300 * time.Millisecond) // the flood holds what it can
	got, err := readFrom(addr, "127.0.0.2", "undionly.kpxe")
	close(stop)
	<-flooded
	if err != nil {
		t.Fatalf("no read served to another address while one address floods: %v", err)
	}
	if !bytes.Equal(got, payload) {
		t.Fatalf("got %d bytes, want the %d of the file", len(got), len(payload))
	}
	if !strings.Contains(logs.String(), "tftp read requests dropped unanswered") {
		t.Errorf("no warn of the flood's dropped requests; log:\n%s", logs)
	}
}

// read reads name whole from the server at addr, as a machine's firmware does.
func read(addr, name string) ([]byte, error) {
	return readFrom(addr, "", name)
}

// readFrom is read from the local address from; "" lets the kernel choose it.
func readFrom(addr, from, name string) ([]byte, error) {
	cl, err := tftp.NewClient(addr)
	if err != nil {
		return nil, err
	}
	if from != "" {
		if err := cl.SetLocalAddr(from); err != nil {
			return nil, err
		}
	}
	cl.SetTimeout(500 * time.Millisecond)
	cl.SetRetries(2)
	wt, err := cl.Receive(name, "octet")
	if err != nil {
		return nil, err
	}
	var got bytes.Buffer
	_, err = wt.WriteTo(&got)
	return got.Bytes(), err
}

// openFiles is how many file descriptors the test's process holds.
func openFiles(t *testing.T) int {
	t.Helper()
	fds, err := os.ReadDir("/proc/self/fd")
	must(t, err)
	return len(fds)
}

// TestPlaceOfAReadThatDidNotStartIsGivenBack has the process out of file descriptors
// while read requests come, so that pin/tftp cannot open their sockets: the places the
// gate gave them come back, and once descriptors are free again a machine's read is
// served (were they kept, the server would drop every read from then on). The name read
// is served by Extra, so that the gate's check of it opens no file.
func TestPlaceOfAReadThatDidNotStartIsGivenBack(t *testing.T) {
	const max = 8
	extra := func(name string, _ net.Addr) (io.ReadSeekCloser, bool, error) {
		return nopCloser{strings.NewReader("config")}, name == "boot/config", nil
	}
	addr, _ := serve(t, t.TempDir(), Options{MaxTransfers: max, Timeout: 200 * time.Millisecond, Extra: extra})
	conn, err := net.Dial("udp4", addr)
	must(t, err)
	defer conn.Close()

	var lim syscall.Rlimit
	must(t, syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim))
	low := lim
	free, err := syscall.Dup(0) // the lowest descriptor free: every one below is open
	must(t, err)
	syscall.Close(free)
	low.Cur = uint64(free)
	must(t, syscall.Setrlimit(syscall.RLIMIT_NOFILE, &low))
	for range 4 * max {
		if _, err := conn.Write([]byte("\x00\x01boot/config\x00octet\x00")); err != nil {
			syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim)
			t.Fatal(err)
		}
	}
	time.Sleep(300 * time.Millisecond)
	must(t, syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim))
	deadline := time.Now().Add(10 * time.Second)
	for {
		got, err := read(addr, "boot/config")
		if err == nil && string(got) == "config" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no read served once descriptors were free again: %q, %v", got, err)
		}
	}
}

type nopCloser struct{ io.ReadSeeker }

func (nopCloser) Close() error { return nil }

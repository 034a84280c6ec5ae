package tftp

import (
	"bytes"
	"crypto/rand"
	"encoding/binary"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestWindowsizeWithAtftp fetches a file with atftp (Debian's atftp 0.8.0, which
// negotiates RFC 7440 windowsize) asking for windows of 16 blocks of 1468 bytes: the
// server agrees to its cap of 8, the file arrives whole, and the client acknowledged
// about one block in eight. Without the option atftp gets a block per acknowledgement.
func TestWindowsizeWithAtftp(t *testing.T) {
	atftp, err := exec.LookPath("atftp")
	if err != nil {
		t.Skip("needs atftp")
	}
	dir := t.TempDir()
	payload := make([]byte, 1_000_000) // 682 blocks of 1468 bytes
	rand.Read(payload)
	must(t, os.WriteFile(filepath.Join(dir, "snponly.efi"), payload, 0o644))
	// No retransmission on a loaded machine's stall: the counts below are exact.
	addr, logs := serve(t, dir, Options{Timeout: 10 * time.Second})
	host, port, _ := net.SplitHostPort(addr)
	for _, tc := range []struct {
		opts   []string
		window int
	}{{[]string{"--option", "windowsize 16", "--option", "blksize 1468", "--option", "tsize 0"}, 8}, {[]string{"--option", "blksize 1468"}, 1}} {
		out := filepath.Join(t.TempDir(), "out")
		args := append(append([]string{}, tc.opts...), "--get", "-r", "snponly.efi", "-l", out, host, port)
		if b, err := exec.Command(atftp, args...).CombinedOutput(); err != nil {
			t.Fatalf("atftp %v: %v\n%s", args, err, b)
		}
		got, err := os.ReadFile(out)
		must(t, err)
		if !bytes.Equal(got, payload) {
			t.Fatalf("atftp %v got %d bytes, not the file's %d", tc.opts, len(got), len(payload))
		}
	}
	// A transfer's line is logged once the server saw its last acknowledgement, which may
	// come after the client has gone.
	for deadline := time.Now().Add(10 * time.Second); strings.Count(logs.String(), `msg="tftp sent"`) < 2 && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
	}
	log := logs.String()
	m := regexp.MustCompile(`msg="tftp sent" file=snponly.efi client=\S+ blksize=1468 windowsize=8 datagrams=(\d+) acks=(\d+)`).FindStringSubmatch(log)
	if m == nil {
		t.Fatalf("no windowed transfer of blksize 1468 and windowsize 8 in the log:\n%s", log)
	}
	datagrams, _ := strconv.Atoi(m[1])
	acks, _ := strconv.Atoi(m[2])
	t.Logf("%d datagrams, %d acknowledgements", datagrams, acks)
	if blocks := len(payload)/1468 + 1; datagrams != blocks+1 || acks > blocks/8+2 {
		t.Errorf("%d datagrams and %d acknowledgements for %d blocks: want the OACK and each block once, and an acknowledgement per window of 8", datagrams, acks, blocks)
	}
	if n := strings.Count(log, `msg="tftp sent"`); n != 2 || !strings.Contains(log, "blksize=1468 datagrams=") {
		t.Errorf("want one windowed and one plain transfer in the log:\n%s", log)
	}
}

// TestWindowAfterLoss drives a windowed transfer by hand as an RFC 7440 client whose
// third block of a window was lost: it acknowledges the last block it holds in order,
// and the server's next window starts right after it. A duplicate acknowledgement of
// an older block is passed over, and silence makes the server send the window again.
func TestWindowAfterLoss(t *testing.T) {
	dir := t.TempDir()
	payload := make([]byte, 512*10+100) // 11 blocks of 512
	rand.Read(payload)
	must(t, os.WriteFile(filepath.Join(dir, "f"), payload, 0o644))
	// The server's retransmission timeout is far longer than a step of the exchange
	// takes even on a loaded machine, so that only the client's deliberate silence
	// brings a window again.
	addr, _ := serve(t, dir, Options{Timeout: 4 * time.Second})
	srv, err := net.ResolveUDPAddr("udp4", addr)
	must(t, err)
	c, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	must(t, err)
	defer c.Close()
	_, err = c.WriteTo(append(binary.BigEndian.AppendUint16(nil, opRRQ), "f\x00octet\x00windowsize\x004\x00"...), srv)
	must(t, err)
	buf := make([]byte, 600)
	var peer net.Addr
	recv := func() (op, block uint16, data []byte) {
		t.Helper()
		c.SetReadDeadline(time.Now().Add(20 * time.Second))
		n, from, err := c.ReadFrom(buf)
		must(t, err)
		peer = from
		return binary.BigEndian.Uint16(buf), binary.BigEndian.Uint16(buf[2:]), append([]byte(nil), buf[4:n]...)
	}
	ack := func(block uint16) {
		_, err := c.WriteTo(binary.BigEndian.AppendUint16(binary.BigEndian.AppendUint16(nil, opACK), block), peer)
		must(t, err)
	}
	window := func() []uint16 {
		var got []uint16
		for range 4 {
			op, block, _ := recv()
			if op != opDATA {
				t.Fatalf("opcode %d, want DATA", op)
			}
			got = append(got, block)
		}
		return got
	}
	if op, block, rest := recv(); op != opOACK || string(binary.BigEndian.AppendUint16(nil, block))+string(rest) != "windowsize\x004\x00" {
		t.Fatalf("opcode %d %q, want the OACK of windowsize 4", op, rest)
	}
	ack(0)
	if got := window(); !equal(got, 1, 2, 3, 4) {
		t.Fatalf("first window %v", got)
	}
	ack(2) // block 3 was lost: the client holds 1 and 2 in order
	if got := window(); !equal(got, 3, 4, 5, 6) {
		t.Fatalf("the window after acknowledging 2 is %v, want 3-6", got)
	}
	ack(1) // a late duplicate of an older window: passed over
	if got := window(); !equal(got, 3, 4, 5, 6) {
		t.Fatalf("after silence the server sent %v, want the window 3-6 again", got)
	}
	ack(6)
	if got := window(); !equal(got, 7, 8, 9, 10) {
		t.Fatalf("the window after 6 is %v", got)
	}
	ack(10)
	op, block, data := recv()
	if op != opDATA || block != 11 || !bytes.Equal(data, payload[5120:]) {
		t.Fatalf("last block %d (opcode %d, %d bytes), want 11 with the file's last 100 bytes", block, op, len(data))
	}
	ack(11)
}

func equal(got []uint16, want ...uint16) bool { return slices.Equal(got, want) }

// FuzzNegotiate reads any read request as it comes from the network: the server agrees
// only to blksize, windowsize and tsize within their ranges and its caps, each at most
// once, and never to anything else.
func FuzzNegotiate(f *testing.F) {
	f.Add([]byte("f\x00octet\x00windowsize\x0016\x00blksize\x001468\x00tsize\x000\x00"))
	f.Add([]byte("f\x00octet\x00WindowSize\x000\x00blksize\x007\x00"))
	f.Add([]byte("f\x00octet\x00windowsize\x00"))
	f.Add([]byte("f\x00netascii\x00windowsize\x0099999999999999999999\x00windowsize\x002\x00"))
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := parseRequest(b)
		if err != nil {
			return
		}
		w := negotiate(r, 1468, 8, 4096)
		if w.blksize < 8 || w.blksize > 1468 || w.window < 1 || w.window > 8 {
			t.Fatalf("agreed to blksize %d and windowsize %d", w.blksize, w.window)
		}
		seen := map[string]bool{}
		for _, o := range w.oack {
			if seen[o.name] || (o.name != "blksize" && o.name != "windowsize" && o.name != "tsize") {
				t.Fatalf("acknowledged %q (seen %v)", o.name, seen)
			}
			seen[o.name] = true
		}
		if !w.agreed("windowsize") && w.window != 1 || !w.agreed("blksize") && w.blksize != 512 {
			t.Fatalf("terms %+v without their options", w)
		}
	})
}

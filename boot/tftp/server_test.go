package tftp

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pin/tftp/v3"
)

// serve starts a server of dir on a loopback port and returns its address and log.
func serve(t *testing.T, dir string, opts Options) (string, *lockedBuffer) {
	t.Helper()
	var logs lockedBuffer
	s, err := New(dir, opts, slog.New(slog.NewTextHandler(&logs, nil)))
	must(t, err)
	conn, err := net.ListenPacket("udp4", "127.0.0.1:0")
	must(t, err)
	go s.Serve(conn)
	t.Cleanup(s.Shutdown)
	return conn.LocalAddr().String(), &logs
}

func TestServeOverLoopback(t *testing.T) {
	dir := t.TempDir()
	payload := bytes.Repeat([]byte("0123456789abcdef"), 10_000) // 160 kB, many blocks
	must(t, os.WriteFile(filepath.Join(dir, "ipxe.efi"), payload, 0o644))
	must(t, os.WriteFile(filepath.Join(filepath.Dir(dir), "secret"), []byte("secret"), 0o644))
	addr, _ := serve(t, dir, Options{})

	cases := map[string]struct {
		name    string
		blksize int
		fail    bool
	}{
		"default block size":     {name: "ipxe.efi"},
		"negotiated block size":  {name: "ipxe.efi", blksize: 1468},
		"capped block size":      {name: "/ipxe.efi", blksize: 8192},
		"traversal":              {name: "../secret", fail: true},
		"missing":                {name: "snponly.efi", fail: true},
		"absolute outside paths": {name: filepath.Join(filepath.Dir(dir), "secret"), fail: true},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			cl, err := tftp.NewClient(addr)
			must(t, err)
			cl.SetTimeout(time.Second)
			cl.SetRetries(2)
			if c.blksize != 0 {
				cl.SetBlockSize(c.blksize)
			}
			cl.RequestTSize(true)
			wt, err := cl.Receive(c.name, "octet")
			if c.fail {
				if err == nil {
					t.Fatalf("%s was served", c.name)
				}
				return
			}
			must(t, err)
			if n, ok := wt.(tftp.IncomingTransfer).Size(); !ok || n != int64(len(payload)) {
				t.Errorf("tsize %d, %v; want %d", n, ok, len(payload))
			}
			var got bytes.Buffer
			if _, err := wt.WriteTo(&got); err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got.Bytes(), payload) {
				t.Fatalf("got %d bytes, want the %d of the file", got.Len(), len(payload))
			}
		})
	}
}

// TestConcurrentReads has many machines read the iPXE binary at once, as after a power
// cut: every read must complete with the whole file, each on a socket of its own, with
// the block size a BIOS PXE ROM asks for. Each machine reads from a loopback address of
// its own, as each has its own address (MaxPerClient).
func TestConcurrentReads(t *testing.T) {
	const clients = 300
	dir := t.TempDir()
	payload := make([]byte, 74213) // the size of Debian's undionly.kpxe
	for i := range payload {
		payload[i] = byte(i * 7)
	}
	must(t, os.WriteFile(filepath.Join(dir, "undionly.kpxe"), payload, 0o644))
	addr, logs := serve(t, dir, Options{})
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		errs []error
	)
	for i := range clients {
		wg.Go(func() {
			err := func() error {
				cl, err := tftp.NewClient(addr)
				if err != nil {
					return err
				}
				if err := cl.SetLocalAddr(fmt.Sprintf("127.1.%d.%d", i/250, 1+i%250)); err != nil {
					return err
				}
				cl.SetBlockSize(1456)
				cl.RequestTSize(true)
				cl.SetTimeout(2 * time.Second)
				wt, err := cl.Receive("undionly.kpxe", "octet")
				if err != nil {
					return err
				}
				var got bytes.Buffer
				if _, err := wt.WriteTo(&got); err != nil {
					return err
				}
				if !bytes.Equal(got.Bytes(), payload) {
					return fmt.Errorf("got %d bytes, want the %d of the file", got.Len(), len(payload))
				}
				return nil
			}()
			if err != nil {
				mu.Lock()
				errs = append(errs, err)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if len(errs) > 0 {
		t.Fatalf("%d of %d reads failed, the first: %v", len(errs), clients, errs[0])
	}
	// The server logs a transfer once the last block is acknowledged, which may be just
	// after its client returned.
	deadline := time.Now().Add(10 * time.Second)
	for strings.Count(logs.String(), `msg="tftp sent"`) < clients && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if n := strings.Count(logs.String(), `msg="tftp sent"`); n != clients {
		t.Errorf("%d transfers logged as sent, want %d", n, clients)
	}
	if n := strings.Count(logs.String(), "blksize=1456"); n != clients {
		t.Errorf("%d transfers at blksize 1456, want %d; log:\n%s", n, clients, logs)
	}
}

// TestSizeProbe sends what UEFI firmware sends first: a read request asking for tsize,
// then an error once the option acknowledgement came back.
func TestSizeProbe(t *testing.T) {
	dir := t.TempDir()
	must(t, os.WriteFile(filepath.Join(dir, "ipxe.efi"), make([]byte, 5000), 0o644))
	addr, logs := serve(t, dir, Options{})
	conn, err := net.ListenPacket("udp4", "127.0.0.1:0")
	must(t, err)
	defer conn.Close()
	server, _ := net.ResolveUDPAddr("udp4", addr)
	rrq := []byte{0, 1}
	for _, s := range []string{"ipxe.efi", "octet", "tsize", "0", "blksize", "1468"} {
		rrq = append(append(rrq, s...), 0)
	}
	_, err = conn.WriteTo(rrq, server)
	must(t, err)
	conn.SetReadDeadline(time.Now().Add(3 * time.Second))
	buf := make([]byte, 1500)
	n, from, err := conn.ReadFrom(buf)
	must(t, err)
	if op := binary.BigEndian.Uint16(buf); op != 6 {
		t.Fatalf("opcode %d, want OACK (6)", op)
	}
	if !bytes.Contains(buf[2:n], []byte("tsize\x005000\x00")) {
		t.Fatalf("OACK %q does not carry tsize 5000", buf[2:n])
	}
	// Abort like the firmware: error 8, "option negotiation" declined.
	_, err = conn.WriteTo(append([]byte{0, 5, 0, 8}, "probe\x00"...), from)
	must(t, err)
	deadline := time.Now().Add(3 * time.Second)
	for !strings.Contains(logs.String(), "tftp size probe") {
		if time.Now().After(deadline) {
			t.Fatalf("no size probe logged; log:\n%s", logs.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	if l := logs.String(); strings.Contains(l, `\x00`) || strings.Contains(l, "\x00") {
		t.Errorf("the log carries the client's NUL:\n%s", l)
	}
}

// TestRefusals sends what the server refuses to its port and reads the ERROR it answers:
// the code of RFC 1350 and a message with no system call text in it.
func TestRefusals(t *testing.T) {
	dir := t.TempDir()
	must(t, os.WriteFile(filepath.Join(dir, "ipxe.efi"), []byte("efi"), 0o644))
	must(t, os.Mkdir(filepath.Join(dir, "sub"), 0o755))
	must(t, os.Symlink("/etc/hostname", filepath.Join(dir, "out")))
	addr, logs := serve(t, dir, Options{})
	server, _ := net.ResolveUDPAddr("udp4", addr)
	rq := func(op uint16, fields ...string) []byte {
		b := binary.BigEndian.AppendUint16(nil, op)
		for _, f := range fields {
			b = append(append(b, f...), 0)
		}
		return b
	}
	cases := map[string]struct {
		datagram []byte
		code     uint16
	}{
		"traversal":            {rq(1, "../secret", "octet"), 2},
		"link out of the root": {rq(1, "out", "octet"), 2},
		"directory":            {rq(1, "sub", "octet"), 2},
		"backslash":            {rq(1, "a\\b", "octet"), 2},
		"missing":              {rq(1, "snponly.efi", "octet"), 1},
		"write request":        {rq(2, "ipxe.efi", "octet"), 2},
		"no mode":              {rq(1, "ipxe.efi"), 4},
		"data to the port":     {append(binary.BigEndian.AppendUint16(nil, 3), 0, 1, 'x'), 4},
		"acknowledgement":      {binary.BigEndian.AppendUint16(binary.BigEndian.AppendUint16(nil, 4), 1), 4},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			conn, err := net.ListenPacket("udp4", "127.0.0.1:0")
			must(t, err)
			defer conn.Close()
			_, err = conn.WriteTo(c.datagram, server)
			must(t, err)
			conn.SetReadDeadline(time.Now().Add(3 * time.Second))
			buf := make([]byte, 1500)
			n, _, err := conn.ReadFrom(buf)
			must(t, err)
			if op := binary.BigEndian.Uint16(buf); op != 5 || n < 5 || buf[n-1] != 0 {
				t.Fatalf("answer %q, want an ERROR datagram", buf[:n])
			}
			msg := string(buf[4 : n-1])
			if code := binary.BigEndian.Uint16(buf[2:]); code != c.code {
				t.Errorf("error code %d (%q), want %d", code, msg, c.code)
			}
			for _, leak := range []string{"openat", "path escapes", "no such file", "tftp:", "/"} {
				if strings.Contains(msg, leak) {
					t.Errorf("message %q holds %q", msg, leak)
				}
			}
		})
	}
	// An error sent to the port is not answered.
	conn, err := net.ListenPacket("udp4", "127.0.0.1:0")
	must(t, err)
	defer conn.Close()
	conn.WriteTo(rq(5, "\x00\x01boom"), server)
	conn.SetReadDeadline(time.Now().Add(time.Second))
	if n, _, err := conn.ReadFrom(make([]byte, 1500)); err == nil {
		t.Errorf("an ERROR was answered (%d bytes)", n)
	}
	// The first refused name of the minute is logged with its reason (TestRefusalFloodLogsBoundedLines).
	if !strings.Contains(logs.String(), `err="tftp: name refused: `) {
		t.Errorf("the log lacks the reason of the refusal:\n%s", logs)
	}
}

type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// FuzzCheck feeds any datagram to the gate's check: it never panics, never lets through
// anything but a read request of a file it can open, and answers only with the three
// codes it uses.
func FuzzCheck(f *testing.F) {
	dir := f.TempDir()
	must(f, os.WriteFile(filepath.Join(dir, "ipxe.efi"), []byte("efi"), 0o644))
	for _, d := range []string{"\x00\x01ipxe.efi\x00octet\x00", "\x00\x01../x\x00octet\x00blksize\x001468\x00", "\x00\x02a\x00octet\x00",
		"\x00\x05\x00\x01x\x00", "\x00\x03\x00\x01", "\x00\x01ipxe.efi"} {
		f.Add([]byte(d))
	}
	s, err := New(dir, Options{}, slog.New(slog.DiscardHandler))
	must(f, err)
	from := &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 1069}
	f.Fuzz(func(t *testing.T, b []byte) {
		if len(b) < 2 {
			return
		}
		code, msg, refused := s.check(b, from)
		if !refused {
			fields := bytes.SplitN(b[2:], []byte{0}, 3)
			if binary.BigEndian.Uint16(b) != 1 || len(fields) < 3 || strings.TrimLeft(string(fields[0]), "/") != "ipxe.efi" {
				t.Fatalf("let %q through", b)
			}
			return
		}
		if code != 0 && code != 1 && code != 2 && code != 4 || len(errorDatagram(code, msg)) > 512 {
			t.Fatalf("%q refused with code %d, %q", b, code, msg)
		}
	})
}

// TestRefusalFloodLogsBoundedLines is a host sending, as fast as it can, read requests
// for a name the server does not have, for a name it refuses, and write requests: each
// is answered at once and takes no place, and each wrote a line to the site's log, so
// the flood filled the disk as fast as the host could send. Now each kind of refusal is
// logged at most once a minute, with how many it stands for, and every request is
// still answered.
func TestRefusalFloodLogsBoundedLines(t *testing.T) {
	addr, logs := serve(t, t.TempDir(), Options{})
	server, _ := net.ResolveUDPAddr("udp4", addr)
	conn, err := net.ListenPacket("udp4", "127.0.0.1:0")
	must(t, err)
	defer conn.Close()
	const flood = 300
	buf := make([]byte, 1500)
	for i := range flood {
		for _, rq := range []string{"\x00\x01missing-" + strconv.Itoa(i) + "\x00octet\x00", "\x00\x01../secret\x00octet\x00", "\x00\x02upload\x00octet\x00"} {
			_, err := conn.WriteTo([]byte(rq), server)
			must(t, err)
			conn.SetReadDeadline(time.Now().Add(3 * time.Second))
			if _, _, err := conn.ReadFrom(buf); err != nil {
				t.Fatalf("request %d unanswered: %v", i, err)
			}
		}
	}
	if n := strings.Count(logs.String(), "\n"); n != 3 {
		t.Errorf("%d lines for %d refused requests of three kinds, want 3:\n%.3000s", n, 3*flood, logs)
	}
}

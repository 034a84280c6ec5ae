package boot

import (
	"context"
	"errors"
	"io"
	"io/fs"
	"log/slog"
	"math"
	"net"
	"net/http"
	"net/netip"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/better-compute/better-compute/boot/dhcp"
	"github.com/better-compute/better-compute/boot/ipxe"
	"github.com/better-compute/better-compute/boot/tftp"
	"github.com/better-compute/better-compute/lograte"
)

// listenHTTP listens on addr with the configured send buffer and returns the server that
// serves the listener. Its timeouts are per step, never per response: 10 s for a
// request's header, HTTPIdleTimeout for an idle keep-alive connection, HTTPStallTimeout
// for each write (stallConn). An http.Server WriteTimeout or ReadTimeout would bound
// the whole response (ReadTimeout also cancels the request's context once it passes
// while the response is still being written), and cut off every download of an image
// that takes longer. A request's header is at most httpMaxHeader.
func (s *Server) listenHTTP(ctx context.Context, addr string) (net.Listener, *http.Server, error) {
	lc := httpListenConfig(s.cfg.HTTPSendBuffer)
	l, err := lc.Listen(ctx, "tcp4", addr)
	if err != nil {
		return nil, nil, err
	}
	hs := &http.Server{Handler: s.routes(), ReadHeaderTimeout: 10 * time.Second, IdleTimeout: time.Duration(s.cfg.HTTPIdleTimeout),
		MaxHeaderBytes: httpMaxHeader}
	conns := &connCount{max: httpConns, maxPerClient: httpConnsPerClient, perClient: map[netip.Addr]int{}}
	return &stallListener{Listener: l, stall: time.Duration(s.cfg.HTTPStallTimeout), conns: conns, log: s.log}, hs, nil
}

// httpConns and httpConnsPerClient bound the HTTP listener's open connections, all
// together and from one client address; a connection past either is closed as it is
// accepted. Each open connection holds some 16 KiB (its buffers and goroutine) and a
// file descriptor, for 10 s before it sends a header and httpIdleTimeout between
// requests: without a bound, one host opening connections and sending nothing on them
// held as many as it could open. A machine has one open at a time (iPXE fetches one file
// after the other, the ramdisk one image), a BMC mounting media a few; a storm of a
// thousand machines waiting at the download gate has a thousand, and BenchmarkBootStorm
// runs up to 14,000. At the bound, connections hold some 256 MiB.
const (
	httpConns          = 16384
	httpConnsPerClient = 32
)

// httpMaxHeader is the most of a request's header the HTTP listener reads; a longer one
// is refused 431. What the boot server is asked (a script, a ramdisk file, a cached
// image, with a Range) fits in well under 1 KiB. http.Server's default, 1 MiB, let a
// host hold that much of the site's memory for each connection whose header it sent
// slowly and never ended, until the 10 s header timeout: 200 connections held 200 MiB.
const httpMaxHeader = 8 << 10

// stallListener hands out its TCP connections as stallConns, as many as conns admits;
// it closes the others as they come, warning at most once a minute.
type stallListener struct {
	net.Listener
	stall   time.Duration
	conns   *connCount
	log     *slog.Logger
	refused lograte.Limiter
}

func (l *stallListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		tc, ok := c.(*net.TCPConn)
		if !ok || err != nil {
			return c, err
		}
		client := tcpClient(tc)
		if l.conns.take(client) {
			return &stallConn{TCPConn: tc, stall: l.stall, done: func() { l.conns.give(client) }}, nil
		}
		tc.Close()
		l.refused.Warn(l.log, time.Now(), "refused", "http: connections closed as they came: the most the boot server keeps open at once, or the most of one "+
			"client address, are open; a host opening connections it sends nothing on holds them (client is the last refused)",
			"client", client.String(), "max", l.conns.max, "maxPerClient", l.conns.maxPerClient)
	}
}

// tcpClient is the address of c's client.
func tcpClient(c *net.TCPConn) netip.Addr {
	if a, ok := c.RemoteAddr().(*net.TCPAddr); ok {
		return a.AddrPort().Addr().Unmap()
	}
	return netip.Addr{}
}

// connCount counts the HTTP listener's open connections, all together and by client
// address, up to max and maxPerClient.
type connCount struct {
	max, maxPerClient int

	mu        sync.Mutex
	open      int
	perClient map[netip.Addr]int
}

// take counts a connection of client's and reports whether it is within the bounds;
// one that is not is not counted.
func (c *connCount) take(client netip.Addr) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.open >= c.max || c.perClient[client] >= c.maxPerClient {
		return false
	}
	c.open++
	c.perClient[client]++
	return true
}

// give uncounts a connection of client's that closed.
func (c *connCount) give(client netip.Addr) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.open--
	if c.perClient[client]--; c.perClient[client] <= 0 {
		delete(c.perClient, client)
	}
}

// httpWriteChunk is the most a stallConn sends under one write deadline.
const httpWriteChunk = 1 << 20

// stallConn is an HTTP connection each of whose writes, of at most httpWriteChunk bytes,
// must finish within stall, so that a client that stops reading is let go however long
// the response. It keeps the TCP connection's ReadFrom, and so sendfile: the file is
// handed over httpWriteChunk bytes at a time, each under a fresh deadline.
type stallConn struct {
	*net.TCPConn
	stall time.Duration
	// done gives the connection's place back (connCount) at its first Close.
	done   func()
	closed atomic.Bool
}

// Close closes the connection and gives its place back once.
func (c *stallConn) Close() error {
	if !c.closed.Swap(true) {
		defer c.done()
	}
	return c.TCPConn.Close()
}

func (c *stallConn) Write(b []byte) (int, error) {
	var n int
	for len(b) > 0 {
		c.SetWriteDeadline(time.Now().Add(c.stall))
		k, err := c.TCPConn.Write(b[:min(len(b), httpWriteChunk)])
		n += k
		if err != nil {
			return n, err
		}
		b = b[k:]
	}
	return n, nil
}

// ReadFrom sends r in chunks. A *io.LimitedReader (ServeContent's io.CopyN) is unwrapped
// so that the chunks still reach sendfile, which sees through one level of it.
func (c *stallConn) ReadFrom(r io.Reader) (int64, error) {
	lr, ok := r.(*io.LimitedReader)
	if !ok {
		lr = &io.LimitedReader{R: r, N: math.MaxInt64}
	}
	var total int64
	for lr.N > 0 {
		chunk := &io.LimitedReader{R: lr.R, N: min(lr.N, httpWriteChunk)}
		c.SetWriteDeadline(time.Now().Add(c.stall))
		n, err := c.TCPConn.ReadFrom(chunk)
		total += n
		lr.N -= n
		if err != nil || chunk.N > 0 { // failed, or the source ended
			return total, err
		}
	}
	return total, nil
}

// routes are the HTTP paths the boot server answers.
func (s *Server) routes() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /boot/{script}", observeHTTP("script", http.HandlerFunc(s.serveScript), s.observer))
	mux.Handle("GET /ramdisk/{file...}", observeHTTP("ramdisk", s.gated(serveFiles(s.ramdiskRoot, "file")), s.observer))
	mux.Handle("GET /ipxe/{file...}", observeHTTP("ipxe", serveFiles(s.ipxeRoot, "file"), s.observer))
	for pattern, h := range s.extra {
		mux.Handle(pattern, observeHTTP("image", h, s.observer))
	}
	return fixRange(mux)
}

// unsatisfiable is a Range that no file satisfies: ServeContent answers it 416 with
// `Content-Range: bytes */SIZE`.
const unsatisfiable = "bytes=9223372036854775807-"

// fixRange mends two answers of http.ServeContent before any handler sees the request
// (it changes only the request, so the handlers' ResponseWriter, and sendfile, stay as
// they are). A Range of another unit than bytes is ignored, as RFC 9110 section 14.2
// has it: the whole body, 200 (ServeContent answered 416 without Content-Range). A
// suffix range of length 0 (`-0`) is unsatisfiable (section 14.1.3): it is dropped, and a
// Range left with none is answered 416 with `bytes */SIZE` (ServeContent answered 206
// with an empty, malformed Content-Range).
func fixRange(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if v := r.Header.Get("Range"); v != "" {
			if fixed := mendRange(v); fixed != v {
				r = r.Clone(r.Context())
				if fixed == "" {
					r.Header.Del("Range")
				} else {
					r.Header.Set("Range", fixed)
				}
			}
		}
		h.ServeHTTP(w, r)
	})
}

// mendRange is the Range header fixRange hands on: "" to ignore it.
func mendRange(v string) string {
	unit, set, ok := strings.Cut(v, "=")
	if !ok || !strings.EqualFold(strings.TrimSpace(unit), "bytes") {
		return ""
	}
	var kept []string
	for _, spec := range strings.Split(set, ",") {
		spec = strings.TrimSpace(spec)
		if digits, suffix := strings.CutPrefix(spec, "-"); suffix && digits != "" && strings.Trim(digits, "0") == "" {
			continue
		}
		kept = append(kept, spec)
	}
	if len(kept) == 0 {
		return unsatisfiable
	}
	return "bytes=" + strings.Join(kept, ",")
}

// serveScript answers /boot/<mac>.ipxe with the machine's script, to the address the
// machine holds only (boundScript). A machine without an entry is reported for discovery
// and told to wait and ask again; so is one whose entry holds a value that can not go
// into a script, which is logged as an error.
func (s *Server) serveScript(w http.ResponseWriter, r *http.Request) {
	name, ok := strings.CutSuffix(r.PathValue("script"), ".ipxe")
	if !ok {
		http.NotFound(w, r)
		return
	}
	mac, err := net.ParseMAC(strings.ReplaceAll(name, "-", ":"))
	if err != nil || !dhcp.MachineMAC(mac) {
		// No discovery either: a group or all-zero address names no machine.
		http.Error(w, "not a machine's MAC address: "+name, http.StatusNotFound)
		return
	}
	client, _ := netip.ParseAddrPort(r.RemoteAddr)
	script := s.boundScript(mac, client.Addr(), "http")
	out, err := ipxe.Render(script)
	if err != nil {
		s.log.Error("boot entry can not be rendered; the machine waits", "mac", mac.String(), "err", err)
		script = s.waitScript(mac)
		out, _ = ipxe.Render(script)
	}
	s.logScript(mac, script)
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.Write(out)
}

// logScript logs the script mac was answered with: a machine's own each time, the wait
// (to a MAC without an entry, or to an address that does not hold it) at most once a
// minute, since anyone may ask for one under any MAC as fast as it can send.
func (s *Server) logScript(mac net.HardwareAddr, script ipxe.Script) {
	if script.Kind != ipxe.Wait {
		s.log.Info("ipxe script", "mac", mac.String(), "kind", string(script.Kind))
		return
	}
	s.waitInfo.Log(s.log, slog.LevelInfo, s.clock.Now(), "scripts", "ipxe script: the wait, to a machine without an entry or to an address that does not "+
		"hold the machine's; scripts counts them since the last such line (at most one a minute), mac is the last's", "mac", mac.String(), "kind", string(script.Kind))
}

// waitScript is the script that has a machine wait and ask again.
func (s *Server) waitScript(mac net.HardwareAddr) ipxe.Script {
	return ipxe.Script{Kind: ipxe.Wait, MAC: mac.String(), Self: s.baseURL + dhcp.ScriptPath(mac), Retry: time.Duration(s.cfg.RetryInterval)}
}

// script is the script a machine gets now; one without an entry is reported for
// discovery with source, "http" or "tftp".
func (s *Server) script(mac net.HardwareAddr, source string) ipxe.Script {
	sc := s.waitScript(mac)
	e, ok := s.entries.Entry(mac)
	if !ok {
		s.discover.record(Discovery{MAC: mac, Source: source})
		return sc
	}
	switch e.Kind {
	case KindRamdisk:
		sc.Kind = ipxe.Ramdisk
		sc.Kernel = s.ramdiskURL(e.Ramdisk.Kernel)
		sc.Initrd = s.ramdiskURL(e.Ramdisk.Initrd)
		sc.Extras = e.Ramdisk.Extras
		sc.Args = e.Ramdisk.CommandLine()
	case KindDisk:
		sc.Kind = ipxe.Disk
	case KindSanboot:
		sc.Kind = ipxe.Sanboot
		sc.ISO = e.ISO
	default:
		sc.Kind = ipxe.Kind(e.Kind) // refused by Render
	}
	return sc
}

// ramdiskURL is the URL of a ramdisk file: a URL as it is, a name under /ramdisk/.
func (s *Server) ramdiskURL(name string) string {
	if strings.HasPrefix(name, "http://") || strings.HasPrefix(name, "https://") || name == "" {
		return name
	}
	return s.baseURL + "/ramdisk/" + name
}

// gated has h wait for its turn at the server's download gate, if it has one; a request
// whose client went away while it waited is not answered.
func (s *Server) gated(h http.Handler) http.Handler {
	if s.gate == nil {
		return h
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ap, _ := netip.ParseAddrPort(r.RemoteAddr) // the invalid Addr, one machine, for none
		leave, ok := s.gate.enter(r.Context(), ap.Addr())
		if !ok {
			return
		}
		defer leave()
		h.ServeHTTP(w, r)
	})
}

// serveFiles serves the regular files under root, with Range and conditional requests,
// never anything outside it.
func serveFiles(root *os.Root, param string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		f, err := tftp.Open(root, r.PathValue(param))
		if err != nil {
			status := http.StatusForbidden
			if errors.Is(err, fs.ErrNotExist) {
				status = http.StatusNotFound
			}
			http.Error(w, http.StatusText(status), status)
			return
		}
		defer f.Close()
		st, err := f.Stat()
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "application/octet-stream")
		http.ServeContent(w, r, "", st.ModTime(), f)
	})
}

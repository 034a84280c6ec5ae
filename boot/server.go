package boot

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/better-compute/better-compute/boot/dhcp"
	"github.com/better-compute/better-compute/boot/inuse"
	"github.com/better-compute/better-compute/boot/lease"
	"github.com/better-compute/better-compute/boot/tftp"
	"github.com/better-compute/better-compute/clock"
	"github.com/better-compute/better-compute/lograte"
	"github.com/insomniacslk/dhcp/dhcpv4/server4"
)

// Clock tells the time: lease expiry and discovery intervals follow it. A clock.Clock
// is one (clock.Fake in tests).
type Clock interface{ Now() time.Time }

// Deps are what the boot server consumes from the site agent.
type Deps struct {
	// Entries says how known machines boot. Required.
	Entries Entries
	// Discoveries hears of unknown machines; nil drops them.
	Discoveries Discoveries
	// Enrolled reports whether the site knows a machine that has no entry (it is
	// enrolled at the site): its DHCP client is served as a known one all the same (see
	// lease.Policy.Known). nil knows only the machines with an entry. Called for every
	// DHCP request of a client without an entry, from many goroutines at once.
	Enrolled func(mac net.HardwareAddr) bool
	// Log receives the server's structured logs; nil discards them.
	Log *slog.Logger
	// Clock is the time source; nil is the system clock.
	Clock Clock
	// Handlers are further paths (http.ServeMux patterns) the HTTP listener answers
	// beside the server's own, such as the site cache's /images/sha256/; the Observer
	// counts their answers as kind "image".
	Handlers map[string]http.Handler
	// Observer is told of the DHCP replies and drops, TFTP transfers and HTTP answers;
	// nil tells no one.
	Observer Observer
}

// Server is a configured boot server. New checks the configuration and opens the lease
// file and directories; Run serves until its context ends; Close releases the files.
type Server struct {
	cfg         Config
	entries     Entries
	enrolled    func(mac net.HardwareAddr) bool
	discover    *discoverer
	log         *slog.Logger
	clock       Clock
	baseURL     string
	ipxeRoot    *os.Root
	ramdiskRoot *os.Root
	leases      *lease.Store
	// pools are the authoritative mode's subnets' pools; learned is proxy mode's
	// addresses of the machines' DHCPREQUESTs (bind.go).
	pools   []*lease.Pool
	learned *learned
	handler dhcp.Handler
	// bootServer answers the proxyDHCP port 4011 (proxy mode only).
	bootServer dhcp.Handler
	extra      map[string]http.Handler
	observer   Observer
	// gate orders the ramdisk downloads; nil for no bound.
	gate *downloadGate
	// hasChain: ShimFile and GRUBFile were there at New.
	hasChain bool
	// checker checks an address before the DHCP handler offers it: set while Run serves
	// with ConflictCheck on and its socket open, nil otherwise (no check).
	checker atomic.Pointer[inuse.Checker]
	// awayWarn, unsentWarn, exhaustedWarn and refusedWarn bound heldAwayShare's,
	// checkUnsent's, poolExhausted's and unknownRefused's warns; unboundWarn and waitInfo
	// bound the lines of script requests anyone may send (boundScript, serveScript).
	awayWarn, unsentWarn, exhaustedWarn, refusedWarn, unboundWarn, waitInfo lograte.Limiter
}

// rememberFree is how long an address found free is taken as free without a check: as
// long as an offer is held (lease.Pool), so that a client's retransmitted DISCOVERs are
// offered its address again without another echo, as dnsmasq remembers its checks for
// 30 s.
const rememberFree = 30 * time.Second

// New checks cfg (INVALID_CONFIG with the field's path) and prepares a server.
func New(cfg Config, deps Deps) (*Server, error) {
	if err := cfg.Check(); err != nil {
		return nil, err
	}
	if deps.Entries == nil {
		return nil, errors.New("boot: Deps.Entries is required")
	}
	cfg = cfg.withDefaults()
	if deps.Log == nil {
		deps.Log = slog.New(slog.DiscardHandler)
	}
	if deps.Clock == nil {
		deps.Clock = clock.Real{}
	}
	s := &Server{cfg: cfg, entries: deps.Entries, enrolled: deps.Enrolled, log: deps.Log, clock: deps.Clock, extra: deps.Handlers, observer: deps.Observer,
		discover: newDiscoverer(deps.Discoveries, deps.Clock, time.Duration(cfg.DiscoveryInterval))}
	if cfg.HTTPDownloads > 0 {
		s.gate = newDownloadGate(cfg.HTTPDownloads, time.Duration(cfg.HTTPDownloadWait), deps.Clock)
	}
	s.baseURL = "http://" + cfg.ServerIP.String()
	if cfg.HTTPPort != 80 {
		s.baseURL += ":" + strconv.Itoa(cfg.HTTPPort)
	}
	var err error
	if s.ipxeRoot, err = os.OpenRoot(cfg.IPXEDir); err != nil {
		return nil, err
	}
	if s.ramdiskRoot, err = os.OpenRoot(cfg.RamdiskDir); err != nil {
		s.Close()
		return nil, err
	}
	if err := s.makeHandler(deps.Clock); err != nil {
		s.Close()
		return nil, err
	}
	if s.observer != nil {
		s.handler = observeDHCP(s.handler, s.observer)
		if s.bootServer != nil {
			s.bootServer = observeDHCP(s.bootServer, s.observer)
		}
	}
	return s, nil
}

// makeHandler builds the DHCP handler of the configured mode.
func (s *Server) makeHandler(clock Clock) error {
	files := dhcp.Files{BIOS: s.cfg.BIOSBinary, UEFI: s.cfg.UEFIBinary}
	if _, err := os.Stat(filepath.Join(s.cfg.IPXEDir, s.cfg.ARM64Binary)); err == nil {
		files.ARM64 = s.cfg.ARM64Binary
	}
	if s.hasChain = s.signed(); s.hasChain {
		files.Shim = shimName
	}
	serverIP := net.IP(s.cfg.ServerIP.AsSlice())
	boot := dhcp.Boot{Files: files, TFTPServer: serverIP, HTTPBase: s.baseURL, SecureBoot: s.secureBoot}
	if s.cfg.Mode == Proxy {
		s.learned = newLearned(clock)
		p := dhcp.Proxy{ServerIP: serverIP, Boot: boot, Seen: s.seen, Learn: s.learned.learn}
		s.handler, s.bootServer = p.Handle, p.HandleBootServer
		return nil
	}
	var err error
	if s.leases, err = lease.Open(s.cfg.LeaseFile); err != nil {
		return err
	}
	a := dhcp.Authoritative{ServerIP: serverIP, Boot: boot, Seen: s.seen, InUse: s.inUse, AwayShare: s.heldAwayShare, CheckUnsent: s.checkUnsent,
		Exhausted: s.poolExhausted, Refused: s.unknownRefused, Log: s.log}
	if s.observer != nil {
		a.AddressInUse = s.observer.DHCPAddressInUse
	}
	policy := lease.Policy{Known: s.known, UnknownShare: s.cfg.UnknownShare, UnknownTTL: time.Duration(s.cfg.UnknownLeaseTime), AwayShare: s.cfg.HeldAwayShare}
	// The local subnet, when there is one, goes first.
	local := s.cfg.hasLocal()
	subs := s.cfg.Subnets
	if local {
		subs = append([]Subnet{s.cfg.local()}, subs...)
	}
	for i, sub := range subs {
		exclude := []netip.Addr{s.cfg.ServerIP}
		if sub.Router.IsValid() {
			exclude = append(exclude, sub.Router)
		}
		pool, err := lease.NewPool(s.leases, lease.Range{Start: sub.Range.Start, End: sub.Range.End}, exclude, time.Duration(sub.LeaseTime), clock, policy)
		if err != nil {
			return err
		}
		s.pools = append(s.pools, pool)
		d := dhcp.Subnet{Prefix: sub.Subnet, Pool: pool, Local: local && i == 0}
		if sub.Router.IsValid() {
			d.Router = net.IP(sub.Router.AsSlice())
		}
		for _, dns := range sub.DNS {
			d.DNS = append(d.DNS, net.IP(dns.AsSlice()))
		}
		a.Subnets = append(a.Subnets, d)
	}
	s.handler = a.Handle
	return nil
}

// secureBoot reports whether mac's entry boots under Secure Boot.
// A machine that does while the chain is missing is logged: it gets no boot file.
func (s *Server) secureBoot(mac net.HardwareAddr) bool {
	e, ok := s.entries.Entry(mac)
	if ok && e.SecureBoot && !s.hasChain {
		s.log.Warn("machine boots under Secure Boot, and the signed chain is missing: it gets no boot file; install shim-signed and grub-efi-amd64-signed or set boot.shimFile and boot.grubFile",
			"mac", mac.String(), "shimFile", s.cfg.ShimFile, "grubFile", s.cfg.GRUBFile)
	}
	return ok && e.SecureBoot
}

// known reports whether the site knows mac, a MAC as lease.Pool writes it: an entry,
// of any kind, names it, or the machine is enrolled at the site (Deps.Enrolled).
func (s *Server) known(mac string) bool {
	hw, err := net.ParseMAC(mac)
	if err != nil {
		return false
	}
	return s.entries.Has(hw) || s.enrolled != nil && s.enrolled(hw)
}

// seen records a network-boot client that has no entry.
func (s *Server) seen(c dhcp.Client) {
	if s.entries.Has(c.MAC) {
		return
	}
	s.discover.record(Discovery{MAC: c.MAC, UUID: c.UUID, Arch: uint16(c.Arch), HasArch: c.HasArch, Source: "dhcp"})
}

// inUse reports whether a host answers at ip, by the checker Run opened, and an error
// when its check did not run; false while there is no checker (before Run, with
// ConflictCheck off, or without an ICMP socket).
func (s *Server) inUse(ip netip.Addr) (bool, error) {
	c := s.checker.Load()
	if c == nil {
		return false, nil
	}
	return c.InUse(ip)
}

// heldAwayShare counts an offer made unchecked, or an address not held away, because
// the addresses held away take their share of a range, and warns of it at most once a
// minute: a host answering at every address would otherwise warn at every request.
func (s *Server) heldAwayShare() {
	if s.observer != nil {
		s.observer.DHCPHeldAwayShare()
	}
	s.awayWarn.Warn(s.log, s.clock.Now(), "times", "dhcp: the addresses held away as in use take their share of a range (boot.heldAwayShare): addresses are offered without "+
		"the conflict check and declines are not held until a hold ends; a host may answer at every address or decline every offer: "+
		"find it by the warns naming addresses in use and the lease file's declined entries, or raise boot.heldAwayShare", "share", s.cfg.HeldAwayShare)
}

// checkUnsent counts a DHCPDISCOVER left unanswered because the echo of its address's
// conflict check was not sent (inuse.ErrNotSent), and warns of it at most once a minute
// with how many there were: a storm that outruns the checks would otherwise warn at
// every DISCOVER.
func (s *Server) checkUnsent(err error) {
	if s.observer != nil {
		s.observer.DHCPCheckUnsent()
	}
	s.unsentWarn.Warn(s.log, s.clock.Now(), "discovers", "dhcp: DHCPDISCOVERs left unanswered because the conflict check's echo to their address was not sent; their clients send "+
		"them again after about 4 s. err is the last, and says why and what to do; discovers counts them since the last "+
		"such warn (at most one a minute), bcd_dhcp_check_unsent_total all of them", "err", err)
}

// poolExhausted counts a DHCPDISCOVER left unanswered because its subnet's range has no
// free address, and warns of it at most once a minute with how many there were.
func (s *Server) poolExhausted() {
	if s.observer != nil {
		s.observer.DHCPPoolExhausted()
	}
	s.exhaustedWarn.Warn(s.log, s.clock.Now(), "discovers", "dhcp: DHCPDISCOVERs left unanswered because their subnet's range has no free address: "+
		"the machines asking do not boot; widen the range (boot.range, boot.subnets[].range) or shorten the leases (leaseTime, unknownLeaseTime). "+
		"discovers counts them since the last such warn (at most one a minute), bcd_dhcp_pool_exhausted_total all of them; the MACs are logged at debug")
}

// unknownRefused counts a DHCPDISCOVER of a machine the site does not know left
// unanswered because such machines hold their share of its range, and warns of it at
// most once a minute with how many there were: a host sending DHCPDISCOVERs under ever
// new MACs would otherwise warn at each.
func (s *Server) unknownRefused() {
	if s.observer != nil {
		s.observer.DHCPUnknownRefused()
	}
	s.refusedWarn.Warn(s.log, s.clock.Now(), "discovers", "dhcp: DHCPDISCOVERs left unanswered because machines the site does not know hold their share of "+
		"a range (boot.unknownShare): new machines are not discovered until such leases end; with no new machines being racked, a host on the "+
		"provisioning segment is sending DHCP under many MACs (the MACs are logged at debug). Enrol or name the new machines, or raise "+
		"boot.unknownShare; discovers counts them since the last such warn (at most one a minute), bcd_dhcp_unknown_refused_total all of them",
		"share", s.cfg.UnknownShare)
}

// listenChecks opens the conflict check's socket when the authoritative server checks
// addresses, and returns what closes it. Without a socket at start the server serves
// unchecked, and says so once; while a socket it opened is down (checksFailed, until
// checksBack) it serves unchecked too.
func (s *Server) listenChecks() (stop func()) {
	if s.cfg.Mode != Authoritative || !*s.cfg.ConflictCheck {
		return func() {}
	}
	var checker *inuse.Checker
	wait := time.Duration(s.cfg.ConflictCheckTimeout)
	held := inuse.EchoesHeld(dhcp.MaxInFlight, wait)
	echo, err := inuse.ListenEcho(wait, held, inuse.Health{
		Failed: s.checksFailed,
		Back:   func() { s.checksBack(checker) },
	})
	if err != nil {
		s.log.Warn("dhcp: addresses are offered without checking that no host answers at them: run bcd site as root (or with CAP_NET_RAW), "+
			"or admit its group in net.ipv4.ping_group_range; boot.conflictCheck false turns the check off", "err", err)
		return func() {}
	}
	checker = inuse.NewChecker(echo.Ping, s.clock, rememberFree)
	s.checker.Store(checker)
	s.log.Info("dhcp: an address no lease accounts for is offered once no host answered an ICMP echo to it",
		"socket", echo.Kind(), "timeout", s.cfg.ConflictCheckTimeout.String(), "echoes", echo.Room())
	neighbours, known := inuse.NeighbourLimit()
	s.warnCheckLimits(wait, held, echo.Room(), neighbours, known)
	return func() {
		echo.Close()
		s.checker.Store(nil)
	}
}

// checksFailed drops the conflict check whose socket failed (inuse.Echo stopped reading
// it): until it opens again (checksBack), addresses are offered without checks, and the
// server says so once.
func (s *Server) checksFailed(err error) {
	s.checker.Store(nil)
	s.log.Warn("dhcp: the conflict check's ICMP socket failed: addresses are offered without checking that no host answers at them "+
		"until it opens again, tried after firstRetry and then twice as long each time up to every lastRetry; until an info says "+
		"the checks are back, look at why the socket failed (the error)", "err", err, "firstRetry", inuse.FirstReopen.String(), "lastRetry", inuse.LastReopen.String())
}

// checksBack restores the conflict check once its socket opened again after
// checksFailed, and says so once.
func (s *Server) checksBack(checker *inuse.Checker) {
	s.checker.Store(checker)
	s.log.Info("dhcp: the conflict check's ICMP socket opened again: addresses are checked again before they are offered")
}

// DHCPHandler is the server's DHCP handler of port 67, a plain function of the request.
// It checks addresses before it offers them only while Run serves.
func (s *Server) DHCPHandler() dhcp.Handler { return s.handler }

// HTTPHandler answers scripts (/boot/<mac>.ipxe), ramdisk files (/ramdisk/<name>),
// iPXE binaries for UEFI HTTP boot (/ipxe/<name>) and the paths of Deps.Handlers.
func (s *Server) HTTPHandler() http.Handler { return s.routes() }

// Run listens on the DHCP port of the interface (and the proxyDHCP port in proxy mode),
// on ServerIP's TFTP and HTTP ports, and serves until ctx ends or a listener fails.
func (s *Server) Run(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		first error
	)
	fail := func(what string, err error) {
		if err == nil {
			return
		}
		mu.Lock()
		if first == nil {
			first = fmt.Errorf("boot: %s: %w", what, err)
		}
		mu.Unlock()
		cancel()
	}
	// abort stops what already runs and returns err.
	abort := func(err error) error {
		cancel()
		wg.Wait()
		return err
	}
	defer s.listenChecks()()
	handlers := map[int]dhcp.Handler{s.cfg.DHCPPort: s.handler}
	if s.cfg.Mode == Proxy {
		handlers[s.cfg.ProxyPort] = s.bootServer
	}
	for port, h := range handlers {
		conn, err := server4.NewIPv4UDPConn(s.cfg.Interface, &net.UDPAddr{Port: port})
		if err != nil {
			return abort(fmt.Errorf("boot: dhcp on %s port %d: %w", s.cfg.Interface, port, err))
		}
		s.growReadBuffer(conn, "dhcp")
		wg.Go(func() { fail("dhcp", dhcp.Serve(ctx, conn, h, s.log)) })
	}

	tconn, err := net.ListenPacket("udp4", netip.AddrPortFrom(s.cfg.ServerIP, uint16(s.cfg.TFTPPort)).String())
	if err != nil {
		return abort(fmt.Errorf("boot: tftp: %w", err))
	}
	s.growReadBuffer(tconn, "tftp")
	topts := tftp.Options{MaxBlockSize: s.tftpBlockSize(), MaxWindow: s.cfg.TFTPWindowSize, Extra: s.chainFile}
	if s.observer != nil {
		topts.Sent = s.observer.TFTPTransfer
	}
	ts, err := tftp.New(s.cfg.IPXEDir, topts, s.log)
	if err != nil {
		tconn.Close()
		return abort(err)
	}
	wg.Go(func() { fail("tftp", ts.Serve(tconn)) })
	context.AfterFunc(ctx, ts.Shutdown)

	hl, hs, err := s.listenHTTP(ctx, netip.AddrPortFrom(s.cfg.ServerIP, uint16(s.cfg.HTTPPort)).String())
	if err != nil {
		return abort(fmt.Errorf("boot: http: %w", err))
	}
	wg.Go(func() {
		if err := hs.Serve(hl); !errors.Is(err, http.ErrServerClosed) {
			fail("http", err)
		}
	})
	context.AfterFunc(ctx, func() { hs.Close() })
	s.log.Info("boot server listening", "mode", string(s.cfg.Mode), "interface", s.cfg.Interface, "server", s.cfg.ServerIP.String(),
		"tftp", s.cfg.TFTPPort, "http", s.cfg.HTTPPort)
	wg.Wait()
	return first
}

// tftpBlockSize is the largest TFTP block size the server agrees to: TFTPBlockSize, and
// no more than fits one datagram of the interface's MTU (less 20 bytes of IPv4 header, 8
// of UDP and 4 of TFTP), so that no block is fragmented.
func (s *Server) tftpBlockSize() int {
	n := s.cfg.TFTPBlockSize
	if ifc, err := net.InterfaceByName(s.cfg.Interface); err == nil && ifc.MTU-32 >= 512 {
		n = min(n, ifc.MTU-32)
	}
	return n
}

// httpListenConfig listens with a send buffer of n bytes, which the accepted connections
// inherit; n <= 0 leaves the buffers to the kernel's autotuning. In BenchmarkBootStorm,
// where every machine is through TFTP within seconds and a thousand downloads run at once,
// autotuned buffers took the kernel's TCP memory to 1.4 GB, near its pressure mark, and
// the last machine finished 13-44 s into the storm; with 512 KiB 17.6-75 s; with 256 KiB
// 9.6-15.5 s.
func httpListenConfig(n int) net.ListenConfig {
	var lc net.ListenConfig
	if n > 0 {
		lc.Control = func(_, _ string, c syscall.RawConn) error {
			var err error
			cerr := c.Control(func(fd uintptr) {
				err = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_SNDBUF, n)
			})
			return errors.Join(cerr, err)
		}
	}
	return lc
}

// listenBuffer is the receive buffer each listening UDP socket asks for. A storm of a
// thousand machines sends its DHCPDISCOVERs, and then its TFTP read requests, within a
// second or so; the kernel's default of about 200 KiB holds some 150 of them, and the rest
// were dropped (504-1,155 DHCP datagrams in each storm of BenchmarkBootStorm), each
// costing a firmware a resend 4 s later for DHCP, 2-3 s for TFTP.
const listenBuffer = 4 << 20

// growReadBuffer asks for a receive buffer of listenBuffer bytes on conn, and logs the
// size granted if it is smaller.
func (s *Server) growReadBuffer(conn net.PacketConn, what string) {
	got, err := growReadBuffer(conn, listenBuffer)
	if err != nil || got/2 < listenBuffer {
		s.log.Warn("small receive buffer: a boot storm may see drops", "socket", what, "bytes", got, "err", err)
	}
}

// growReadBuffer asks for a receive buffer of n bytes on conn: SO_RCVBUFFORCE, which
// net.core.rmem_max does not cap, as root (CAP_NET_ADMIN), else SO_RCVBUF up to that cap.
// It returns the buffer the kernel granted (twice the payload it holds, as
// getsockopt reports it).
func growReadBuffer(conn net.PacketConn, n int) (int, error) {
	sc, ok := conn.(syscall.Conn)
	if !ok {
		return 0, errors.New("not a socket")
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return 0, err
	}
	var got int
	cerr := rc.Control(func(fd uintptr) {
		if err = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUFFORCE, n); err != nil {
			err = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, n)
		}
		got, _ = syscall.GetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF)
	})
	return got, errors.Join(cerr, err)
}

// Close releases the lease file and directories. Call it after Run returned.
func (s *Server) Close() error {
	var errs []error
	if s.leases != nil {
		errs = append(errs, s.leases.Close())
	}
	for _, r := range []*os.Root{s.ipxeRoot, s.ramdiskRoot} {
		if r != nil {
			errs = append(errs, r.Close())
		}
	}
	return errors.Join(errs...)
}

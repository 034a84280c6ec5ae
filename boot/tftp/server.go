package tftp

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"io/fs"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/pin/tftp/v3"

	"github.com/better-compute/better-compute/lograte"
)

// Options tune the server; the zero value of each field takes the default.
type Options struct {
	// MaxBlockSize caps the blksize a client may negotiate (default 1468: one Ethernet
	// frame of 1500 bytes less the IP, UDP and TFTP headers). The server does not look
	// at the MTU of the interface a request came in on: the caller caps MaxBlockSize.
	MaxBlockSize int
	// Timeout is the wait for an acknowledgement before a block is resent (default 2 s).
	Timeout time.Duration
	// Sent is told of each read that ended: sent whole or not, and the bytes sent. Nil
	// tells no one.
	Sent func(ok bool, bytes int64)
	// MaxWindow caps the windowsize a client may negotiate (RFC 7440; default 8): a
	// client that asks for one gets up to this many blocks per acknowledgement.
	MaxWindow int
	// Extra serves names that are not files of the directory (a file elsewhere, or text
	// made on the spot, which may depend on the client's address): it is asked first,
	// with the name as Resolve returns it and the client's address, and opens the content
	// anew for every request; ok false leaves the name to the directory. The listening
	// port's check of a request, which only asks whether the name is served, passes a
	// nil client. Nil for none.
	Extra func(name string, client net.Addr) (f io.ReadSeekCloser, ok bool, err error)
	// MaxTransfers caps the reads in flight at once (default 2048, twice a boot storm of
	// a thousand machines). Each holds a socket, an open file and a goroutine until its
	// last block is acknowledged or it gives up, about 12 s after a request no one
	// acknowledges; without a cap, a host sending read requests it never acknowledges
	// took a socket and a file for each, until the process had no file descriptor left
	// for anything (the HTTP listener's connections, the cache's files, the lease file).
	// A read request beyond the cap is dropped unanswered, as if lost: its client sends
	// it again.
	MaxTransfers int
	// MaxPerClient caps the reads in flight at once from one client address (default
	// 16). A machine has a few: its firmware's size probe, then its read, and a read
	// again for each request it sent again because the answer was lost, each living up
	// to about 12 s. Without it one host, at a few hundred unacknowledged requests a
	// second, held every one of MaxTransfers' places and every other machine's read was
	// dropped; now it takes that many addresses. A read request beyond it is dropped
	// unanswered, as one beyond MaxTransfers is.
	MaxPerClient int
}

// Server is a read-only TFTP server over one directory. A client that negotiates an RFC
// 7440 windowsize is served by the server's own windowed sender (sendWindowed), since
// pin/tftp has none; any other gets pin/tftp's one block per acknowledgement (its
// sender anticipation stalls for good after one lost block with clients that do not
// negotiate a window, docs/boot.md has the measurements, so it stays off).
type Server struct {
	root      *os.Root
	extra     func(string, net.Addr) (io.ReadSeekCloser, bool, error)
	srv       *tftp.Server
	log       *slog.Logger
	maxBlock  int
	maxWindow int
	timeout   time.Duration
	// windowed are the windowed transfers in flight.
	windowed sync.WaitGroup
	sent     func(ok bool, bytes int64)

	// inFlight counts the reads in flight: a place taken by the gate (admit), given back
	// when the read ends (leave). handed is set while pin/tftp starts the transfer of the request the
	// gate last let through: the read handler gives its place back once it runs, and the
	// hook does when the start failed (pin/tftp's socket did not open), so that no place
	// is lost; handedTo is that request's client. perClient counts the places of each
	// client address that holds any. droppedWarn warns of the requests dropped, at most
	// once a minute.
	mu           sync.Mutex
	inFlight     int
	maxTransfers int
	perClient    map[netip.Addr]int
	maxPerClient int
	handed       bool
	handedTo     netip.Addr
	droppedWarn  lograte.Limiter

	// writeRefused, missing and refused bound check's lines of the requests it refuses:
	// anyone may send them, as fast as it can, and none takes a place.
	writeRefused, missing, refused lograte.Limiter
}

// New returns a server of the files under dir.
func New(dir string, opts Options, log *slog.Logger) (*Server, error) {
	root, err := os.OpenRoot(dir)
	if err != nil {
		return nil, err
	}
	s := &Server{root: root, extra: opts.Extra, log: log, sent: opts.Sent, perClient: map[netip.Addr]int{}}
	s.srv = tftp.NewServer(s.read, nil)
	if opts.MaxBlockSize == 0 {
		opts.MaxBlockSize = 1468
	}
	if opts.Timeout == 0 {
		opts.Timeout = 2 * time.Second
	}
	if opts.MaxWindow == 0 {
		opts.MaxWindow = 8
	}
	if opts.MaxTransfers == 0 {
		opts.MaxTransfers = 2048
	}
	if opts.MaxPerClient == 0 {
		opts.MaxPerClient = 16
	}
	s.maxBlock, s.maxWindow, s.timeout, s.maxTransfers, s.maxPerClient = opts.MaxBlockSize, opts.MaxWindow, opts.Timeout, opts.MaxTransfers, opts.MaxPerClient
	s.srv.SetBlockSize(opts.MaxBlockSize)
	// pin/tftp's own cap looks up the interface each request came in on, by the index
	// in its IP_PKTINFO; now and then that index is 0 (about 5 of 300 requests read at
	// once over loopback), the lookup fails, and the transfer silently falls back to
	// 512-byte blocks, three times the datagrams of 1468. MaxBlockSize is the cap.
	s.srv.SetBlockSizeNegotiation(false)
	s.srv.SetTimeout(opts.Timeout)
	s.srv.SetHook(hook{log: log, s: s})
	return s, nil
}

// Serve answers requests on conn until Shutdown. The requests the server refuses are
// answered before pin/tftp sees them (gate), with the codes of RFC 1350, since pin/tftp
// sends every error it answers with code 1, "file not found", and the error's own text.
func (s *Server) Serve(conn net.PacketConn) error {
	return s.srv.Serve(gate{PacketConn: conn, s: s})
}

// Shutdown stops serving, waits for transfers in flight, and closes the root.
func (s *Server) Shutdown() {
	s.srv.Shutdown()
	s.windowed.Wait()
	s.root.Close()
}

// The TFTP opcodes and error codes (RFC 1350) the gate uses.
const (
	opRRQ            = 1
	opWRQ            = 2
	opERROR          = 5
	errNotFound      = 1
	errAccess        = 2
	errIllegal       = 4
	maxErrorDatagram = 512
)

// gate is the listening socket as pin/tftp reads it: a read request the server will not
// serve, a write request, and anything else that is not a read request are answered
// here, from the listening port, with a fixed message (the reason, which may hold system
// call text, goes only to the log), and pin/tftp never sees them; nor does a read
// request that finds MaxTransfers reads in flight, or MaxPerClient of its client's, which
// is dropped (admit). pin/tftp
// reads a gate through ReadFrom, without IP_PKTINFO, so each transfer's socket is bound
// to the wildcard address and the kernel picks its source address by route: the address
// of the interface towards the client.
type gate struct {
	net.PacketConn
	s *Server
}

func (g gate) ReadFrom(p []byte) (int, net.Addr, error) {
	g.s.started()
	for {
		n, from, err := g.PacketConn.ReadFrom(p)
		if err != nil || n < 2 {
			return n, from, err
		}
		code, msg, refused := g.s.check(p[:n], from)
		if !refused {
			if !g.s.admit(from) || g.s.window(p[:n], from) {
				continue
			}
			g.s.hand(from)
			return n, from, nil
		}
		if code != 0 {
			g.PacketConn.WriteTo(errorDatagram(code, msg), from)
		}
	}
}

// admit takes a place for a read request from client, or drops it, warning at most once
// a minute, when MaxTransfers reads are in flight or MaxPerClient of client's.
func (s *Server) admit(client net.Addr) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	ip := clientIP(client)
	if s.inFlight < s.maxTransfers && s.perClient[ip] < s.maxPerClient {
		s.inFlight++
		s.perClient[ip]++
		return true
	}
	s.droppedWarn.Warn(s.log, time.Now(), "dropped", "tftp read requests dropped unanswered: the most reads the server sends at once, or the most of one client address, "+
		"are in flight; their clients send them again. A host sending read requests it never acknowledges holds them (client is the last dropped)",
		"inFlight", s.inFlight, "clientInFlight", s.perClient[ip], "client", client.String())
	return false
}

// clientIP is the address a client's places are counted under.
func clientIP(client net.Addr) netip.Addr {
	if u, ok := client.(*net.UDPAddr); ok {
		return u.AddrPort().Addr().Unmap()
	}
	return netip.Addr{}
}

// leave gives back the place of client's read that ended.
func (s *Server) leave(client net.Addr) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.release(clientIP(client))
}

// release gives back a place of ip's. The caller holds s.mu.
func (s *Server) release(ip netip.Addr) {
	s.inFlight--
	if s.perClient[ip]--; s.perClient[ip] <= 0 {
		delete(s.perClient, ip)
	}
}

// hand marks the place of the request from client the gate lets through as pin/tftp's
// to start.
func (s *Server) hand(client net.Addr) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.handed, s.handedTo = true, clientIP(client)
}

// started is called as pin/tftp reads its next request, the last one's start over:
// its read handler holds its place from now (it gave it back through the hook when the
// start failed).
func (s *Server) started() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.handed = false
}

// startFailed gives back the place of the request pin/tftp could not start a transfer
// for, if the gate handed it one.
func (s *Server) startFailed() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.handed {
		s.handed = false
		s.release(s.handedTo)
	}
}

// window starts a windowed transfer for a read request that negotiates a windowsize
// (RFC 7440) in octet mode, and reports whether it did; pin/tftp serves the others.
func (s *Server) window(b []byte, from net.Addr) bool {
	client, ok := from.(*net.UDPAddr)
	if !ok || binary.BigEndian.Uint16(b) != opRRQ {
		return false
	}
	r, err := parseRequest(b[2:])
	if err != nil || r.mode != "octet" || !negotiate(r, s.maxBlock, s.maxWindow, 0).agreed("windowsize") {
		return false
	}
	f, err := s.open(r.name, client)
	if err != nil {
		return false // pin/tftp answers it
	}
	s.windowed.Go(func() {
		defer s.leave(client)
		s.sendWindowed(r, f, client)
	})
	return true
}

// check says whether the server refuses a datagram that came to the listening port,
// and with which error code and message; code 0 is a refusal without answer. Each kind
// of refusal is logged at most once a minute, with how many it stands for.
func (s *Server) check(b []byte, from net.Addr) (code uint16, msg string, refused bool) {
	switch binary.BigEndian.Uint16(b) {
	case opRRQ:
	case opWRQ:
		s.writeRefused.Log(s.log, slog.LevelInfo, time.Now(), "requests", "tftp write request refused"+atMostOnceAMinute, "client", from.String())
		return errAccess, "access violation: this server is read-only", true
	case opERROR:
		return 0, "", true // never answer an error, lest two peers loop
	default:
		return errIllegal, "illegal TFTP operation: only read requests come to this port", true
	}
	fields := bytes.SplitN(b[2:], []byte{0}, 3)
	if len(fields) < 3 || len(fields[0]) == 0 || len(fields[1]) == 0 {
		return errIllegal, "illegal TFTP operation: a read request is a file name and a mode, each ended by a NUL", true
	}
	name := string(fields[0])
	f, err := s.open(name, nil)
	if err == nil {
		f.Close()
		return 0, "", false
	}
	if errors.Is(err, fs.ErrNotExist) {
		s.missing.Log(s.log, slog.LevelInfo, time.Now(), "requests", "tftp request refused"+atMostOnceAMinute, "file", name, "client", from.String(), "err", err)
		return errNotFound, "file not found", true
	}
	s.refused.Warn(s.log, time.Now(), "requests", "tftp request refused"+atMostOnceAMinute, "file", name, "client", from.String(), "err", err)
	return errAccess, "access violation: only plain names of regular files in the boot directory are served", true
}

// atMostOnceAMinute ends the message of a refusal check logs.
const atMostOnceAMinute = ": requests counts them since the last such line (at most one a minute); the other attributes are the last's"

// errorDatagram is an ERROR datagram of code with msg.
func errorDatagram(code uint16, msg string) []byte {
	b := binary.BigEndian.AppendUint16(nil, opERROR)
	b = binary.BigEndian.AppendUint16(b, code)
	return append(append(b, msg[:min(len(msg), maxErrorDatagram-5)]...), 0)
}

// read answers one read request the gate let through. A client that asked for tsize
// gets the file's size in the option acknowledgement; UEFI firmware asks for it first
// and then aborts, which the hook logs as a size probe rather than a failure. pin/tftp
// sends the text of the error read returns: it never carries the system's.
func (s *Server) read(name string, rf io.ReaderFrom) error {
	var client net.Addr = &net.UDPAddr{}
	if ot, ok := rf.(tftp.OutgoingTransfer); ok {
		a := ot.RemoteAddr()
		client = &a
	}
	defer s.leave(client)
	f, err := s.open(name, client)
	if err != nil { // the file went away or changed since the gate looked
		s.log.Warn("tftp request refused", "file", name, "err", err)
		return errors.New("file not found")
	}
	defer f.Close()
	if size, err := f.Seek(0, io.SeekEnd); err == nil {
		if _, err := f.Seek(0, io.SeekStart); err != nil {
			return errors.New("file not readable")
		}
		if ot, ok := rf.(tftp.OutgoingTransfer); ok {
			ot.SetSize(size)
		}
	}
	n, err := rf.ReadFrom(f)
	if s.sent != nil {
		s.sent(err == nil, n)
	}
	return err
}

// open opens what a requested name serves to client: an Extra name's content, else the
// directory's file.
func (s *Server) open(name string, client net.Addr) (io.ReadSeekCloser, error) {
	if rel, err := Resolve(name); err == nil && s.extra != nil {
		if f, ok, err := s.extra(rel, client); ok {
			return f, err
		}
	}
	return Open(s.root, name)
}

// hook logs each transfer's end, and gives back the place of a request whose transfer
// did not start.
type hook struct {
	log *slog.Logger
	s   *Server
}

func (h hook) OnSuccess(st tftp.TransferStats) {
	h.log.Info("tftp sent", "file", st.Filename, "client", st.RemoteAddr.String(), "blksize", st.Opts["blksize"], "datagrams", st.DatagramsSent, "duration", st.Duration)
}

// OnFailure logs a failed transfer. pin/tftp puts a client's error message into err
// with its ending NUL, which is dropped here, as is the error of reading the listening
// socket once it is closed (no file: the server is shutting down).
func (h hook) OnFailure(st tftp.TransferStats, err error) {
	if st.Filename == "" { // pin/tftp's listening loop: a request it could not start, or the socket closed
		h.s.startFailed()
		h.log.Debug("tftp listener", "err", err)
		return
	}
	err = errors.New(strings.ReplaceAll(err.Error(), "\x00", ""))
	if _, probe := st.Opts["tsize"]; probe && st.DatagramsSent <= 1 {
		h.log.Info("tftp size probe", "file", st.Filename, "client", st.RemoteAddr.String(), "err", err)
		return
	}
	h.log.Warn("tftp transfer failed", "file", st.Filename, "client", st.RemoteAddr.String(), "err", err)
}

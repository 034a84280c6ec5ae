package tftp

import (
	"context"
	"errors"
	"io"
	"io/fs"
	"log/slog"
	"net"
	"os"
	"time"

	"github.com/pin/tftp/v3"
)

// Options tune the server; the zero value of each field takes the default.
type Options struct {
	// MaxBlockSize caps the blksize a client may negotiate (default 1468: one Ethernet
	// frame of 1500 bytes less the IP, UDP and TFTP headers). The server does not look
	// at the MTU of the interface a request came in on: the caller caps MaxBlockSize.
	MaxBlockSize int
	// Timeout is the wait for an acknowledgement before a block is resent (default 2 s).
	Timeout time.Duration
}

// Server is a read-only TFTP server over one directory. It sends one block per
// acknowledgement: pin/tftp has no RFC 7440 windowsize, and its sender anticipation
// stalls for good after one lost block with clients that do not negotiate a window
// (docs/boot.md has the measurements), so it stays off.
type Server struct {
	root *os.Root
	srv  *tftp.Server
	log  *slog.Logger
}

// New returns a server of the files under dir.
func New(dir string, opts Options, log *slog.Logger) (*Server, error) {
	root, err := os.OpenRoot(dir)
	if err != nil {
		return nil, err
	}
	s := &Server{root: root, log: log}
	s.srv = tftp.NewServer(s.read, nil)
	if opts.MaxBlockSize == 0 {
		opts.MaxBlockSize = 1468
	}
	if opts.Timeout == 0 {
		opts.Timeout = 2 * time.Second
	}
	s.srv.SetBlockSize(opts.MaxBlockSize)
	// pin/tftp's own cap looks up the interface each request came in on, by the index
	// in its IP_PKTINFO; now and then that index is 0 (about 5 of 300 requests read at
	// once over loopback), the lookup fails, and the transfer silently falls back to
	// 512-byte blocks, three times the datagrams of 1468. MaxBlockSize is the cap.
	s.srv.SetBlockSizeNegotiation(false)
	s.srv.SetTimeout(opts.Timeout)
	s.srv.SetHook(hook{log})
	return s, nil
}

// Serve answers requests on conn until Shutdown.
func (s *Server) Serve(conn net.PacketConn) error {
	return s.srv.Serve(conn)
}

// Shutdown stops serving, waits for transfers in flight, and closes the root.
func (s *Server) Shutdown() {
	s.srv.Shutdown()
	s.root.Close()
}

// read answers one read request. A client that asked for tsize gets the file's size in
// the option acknowledgement; UEFI firmware asks for it first and then aborts, which the
// hook logs as a size probe rather than a failure.
func (s *Server) read(name string, rf io.ReaderFrom) error {
	f, err := Open(s.root, name)
	if err != nil {
		level := slog.LevelWarn
		if errors.Is(err, fs.ErrNotExist) {
			level = slog.LevelInfo
		}
		s.log.Log(context.Background(), level, "tftp request refused", "file", name, "err", err)
		return err
	}
	defer f.Close()
	if st, err := f.Stat(); err == nil {
		if ot, ok := rf.(tftp.OutgoingTransfer); ok {
			ot.SetSize(st.Size())
		}
	}
	_, err = rf.ReadFrom(f)
	return err
}

// hook logs each transfer's end.
type hook struct{ log *slog.Logger }

func (h hook) OnSuccess(st tftp.TransferStats) {
	h.log.Info("tftp sent", "file", st.Filename, "client", st.RemoteAddr.String(), "blksize", st.Opts["blksize"], "datagrams", st.DatagramsSent, "duration", st.Duration)
}

func (h hook) OnFailure(st tftp.TransferStats, err error) {
	if _, probe := st.Opts["tsize"]; probe && st.DatagramsSent <= 1 {
		h.log.Info("tftp size probe", "file", st.Filename, "client", st.RemoteAddr.String(), "err", err)
		return
	}
	h.log.Warn("tftp transfer failed", "file", st.Filename, "client", st.RemoteAddr.String(), "err", err)
}

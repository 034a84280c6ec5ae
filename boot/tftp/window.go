package tftp

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"time"
)

// The TFTP opcodes of a transfer (RFC 1350, RFC 2347).
const (
	opDATA = 3
	opACK  = 4
	opOACK = 6
)

// request is a read request: its file name, mode and options (RFC 2347), the options'
// names in lower case and in the order sent.
type request struct {
	name, mode string
	opts       []option
}

type option struct{ name, value string }

// parseRequest reads a read request's datagram after its opcode: a file name and a mode,
// then option name and value pairs, each ended by a NUL. An option without its value
// is an error; a repeated option counts once, the first.
func parseRequest(b []byte) (request, error) {
	fields := bytes.Split(b, []byte{0})
	if len(fields) < 3 || len(fields[0]) == 0 || len(fields[1]) == 0 || len(fields[len(fields)-1]) != 0 {
		return request{}, errors.New("a read request is a file name and a mode, each ended by a NUL")
	}
	fields = fields[:len(fields)-1]
	r := request{name: string(fields[0]), mode: strings.ToLower(string(fields[1]))}
	rest := fields[2:]
	if len(rest)%2 != 0 {
		return request{}, errors.New("an option without its value")
	}
	for i := 0; i < len(rest); i += 2 {
		name := strings.ToLower(string(rest[i]))
		if name == "" || r.opt(name) != "" {
			continue
		}
		r.opts = append(r.opts, option{name, string(rest[i+1])})
	}
	return r, nil
}

// opt is the value of the option name, "" when the request has none.
func (r request) opt(name string) string {
	for _, o := range r.opts {
		if o.name == name {
			return o.value
		}
	}
	return ""
}

// windowed is a transfer's terms as the server agrees to them.
type windowed struct {
	blksize, window int
	// oack are the options acknowledged, in the order asked.
	oack []option
}

// negotiate agrees to the options of r the server knows (RFC 2347): blksize (8-65464,
// capped at maxBlock), windowsize (1-65535, capped at maxWindow: RFC 7440) and tsize
// (answered with size). An option out of its range is left out of the acknowledgement,
// which the client reads as refused; so are options the server does not know.
func negotiate(r request, maxBlock, maxWindow int, size int64) windowed {
	w := windowed{blksize: 512, window: 1}
	for _, o := range r.opts {
		n, err := strconv.Atoi(o.value)
		switch {
		case o.name == "blksize" && err == nil && n >= 8 && n <= 65464:
			w.blksize = min(n, maxBlock)
			w.oack = append(w.oack, option{o.name, strconv.Itoa(w.blksize)})
		case o.name == "windowsize" && err == nil && n >= 1 && n <= 65535:
			w.window = min(n, maxWindow)
			w.oack = append(w.oack, option{o.name, strconv.Itoa(w.window)})
		case o.name == "tsize" && err == nil:
			w.oack = append(w.oack, option{o.name, strconv.FormatInt(size, 10)})
		}
	}
	return w
}

// agreed reports whether the server acknowledges the option name.
func (w windowed) agreed(name string) bool {
	for _, o := range w.oack {
		if o.name == name {
			return true
		}
	}
	return false
}

// maxRetries is how often the server sends a window again without an acknowledgement
// before it gives the transfer up.
const maxRetries = 5

// sendWindowed sends f to client in windows (RFC 7440): each window's blocks back to
// back, then the client's acknowledgement of the last block it holds in order, from
// which the next window starts; after Timeout without one the window from there is sent
// again. It runs on a socket of its own, connected to the client.
func (s *Server) sendWindowed(r request, f io.ReadSeekCloser, client *net.UDPAddr) {
	defer f.Close()
	began := time.Now()
	logFail := func(err error) {
		s.log.Warn("tftp transfer failed", "file", r.name, "client", client.IP.String(), "windowsize", r.opt("windowsize"), "err", err)
	}
	size, err := f.Seek(0, io.SeekEnd)
	if err != nil {
		logFail(err)
		return
	}
	conn, err := net.DialUDP("udp4", nil, client)
	if err != nil {
		logFail(err)
		return
	}
	defer conn.Close()
	w := negotiate(r, s.maxBlock, s.maxWindow, size)
	blocks := size/int64(w.blksize) + 1 // the last is shorter than blksize, maybe empty
	acked := int64(-1)                  // -1: the OACK is not acknowledged yet (its ACK is block 0)
	if s.sent != nil {
		// Told as pin/tftp's transfers are: whole or not, and the bytes acknowledged.
		defer func() { s.sent(acked == blocks, min(max(acked, 0)*int64(w.blksize), size)) }()
	}
	var datagrams, acks int
	// send sends what must go before acknowledgement acked can come: the OACK (acked
	// -1), or the window of blocks after block acked.
	buf := make([]byte, 4+w.blksize)
	send := func(acked int64) error {
		if acked < 0 {
			b := binary.BigEndian.AppendUint16(nil, opOACK)
			for _, o := range w.oack {
				b = append(append(append(append(b, o.name...), 0), o.value...), 0)
			}
			datagrams++
			_, err := conn.Write(b)
			return err
		}
		for n := acked + 1; n <= min(acked+int64(w.window), blocks); n++ {
			if _, err := f.Seek((n-1)*int64(w.blksize), io.SeekStart); err != nil {
				return err
			}
			k, err := io.ReadFull(f, buf[4:])
			if err != nil && !errors.Is(err, io.ErrUnexpectedEOF) && !errors.Is(err, io.EOF) {
				return err
			}
			binary.BigEndian.PutUint16(buf[0:], opDATA)
			binary.BigEndian.PutUint16(buf[2:], uint16(n))
			datagrams++
			if _, err := conn.Write(buf[:4+k]); err != nil {
				return err
			}
		}
		return nil
	}
	in := make([]byte, 516)
	for retries := 0; acked < blocks; {
		if retries > maxRetries {
			logFail(fmt.Errorf("no acknowledgement after %d tries", retries))
			return
		}
		if err := send(acked); err != nil {
			logFail(err)
			return
		}
		next, err := s.awaitAck(conn, in, acked, min(acked+int64(w.window), blocks))
		switch {
		case err != nil && errors.Is(err, errTimeout):
			retries++
		case err != nil:
			if acked < 0 && r.opt("tsize") != "" {
				s.log.Info("tftp size probe", "file", r.name, "client", client.IP.String(), "err", err)
			} else {
				logFail(err)
			}
			return
		default:
			acks++
			acked, retries = next, 0
		}
	}
	s.log.Info("tftp sent", "file", r.name, "client", client.IP.String(), "blksize", w.blksize, "windowsize", w.window,
		"datagrams", datagrams, "acks", acks, "duration", time.Since(began))
}

// errTimeout is awaitAck's error when no acknowledgement came within the timeout.
var errTimeout = errors.New("timeout")

// awaitAck waits for an acknowledgement of a block after acked up to last, the window
// sent (block numbers are 16 bits, and wrap); it returns that block's absolute number.
// An acknowledgement of an earlier block, a stray datagram, or one of another window is
// passed over; an ERROR from the client ends the transfer.
func (s *Server) awaitAck(conn *net.UDPConn, in []byte, acked, last int64) (int64, error) {
	conn.SetReadDeadline(time.Now().Add(s.timeout))
	for {
		n, err := conn.Read(in)
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				return 0, errTimeout
			}
			if errors.Is(err, net.ErrClosed) {
				return 0, err
			}
			continue // ICMP unreachable and the like: the client may yet answer
		}
		if n < 4 {
			continue
		}
		switch binary.BigEndian.Uint16(in) {
		case opERROR:
			msg, _, _ := bytes.Cut(in[4:n], []byte{0})
			return 0, fmt.Errorf("the client ended the transfer: code %d, %q", binary.BigEndian.Uint16(in[2:]), msg)
		case opACK:
			block := binary.BigEndian.Uint16(in[2:])
			if acked < 0 {
				if block == 0 {
					return 0, nil
				}
				continue
			}
			for k := acked + 1; k <= last; k++ {
				if uint16(k) == block {
					return k, nil
				}
			}
		}
	}
}

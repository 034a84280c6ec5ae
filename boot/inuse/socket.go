package inuse

import (
	"errors"
	"fmt"
	"net"
	"os"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// ARPWait is how long the kernel holds an echo to an address of the segment that nothing
// answers at before it gives up on ARP: mcast_solicit (3) probes retrans_time_ms (1 s)
// apart, its defaults. The echo holds room in the socket's send buffer and an entry of
// the neighbour table meanwhile, however short the check's own wait.
const ARPWait = 3 * time.Second

// echoRoom is the send buffer an echo request takes while it waits (its skb's truesize):
// 832 bytes measured on Linux 6.18 (512 echoes fill a raw socket's 425,984), rounded up so
// that the room counted is never more than the kernel's.
const echoRoom = 1024

// maxEchoes bounds the echoes a socket's send buffer is sized for, whatever the checks'
// pace: 16 MiB at most, and more than any neighbour table's default holds.
const maxEchoes = 16384

// SendBufferFor is the send buffer asked of the kernel (SO_SNDBUF, which
// net.core.wmem_max caps without CAP_NET_ADMIN) for echoes echoes waiting at once on a
// datagram socket; a raw one asks half. The kernel sets SO_SNDBUF to twice what it is
// asked (its bookkeeping), and a datagram socket takes echoes up to SO_SNDBUF, a raw one
// up to twice it.
func SendBufferFor(echoes int) int { return min(echoes, maxEchoes) * echoRoom / 2 }

// icmpSocket is an ICMP socket opened for the checks: its send buffer sized for the echoes
// they hold at once, a send that never blocks, and on a raw socket the kernel's refusals
// after the send reported (IP_RECVERR).
type icmpSocket struct {
	net.PacketConn
	rc  syscall.RawConn
	raw bool
	// echoes is how many echoes waiting for ARP the send buffer the kernel granted holds.
	echoes int
}

// listenICMP opens a datagram ICMP socket, else a raw one, its send buffer sized for
// echoes echoes waiting at once.
func listenICMP(echoes int) (*icmpSocket, error) {
	s, err := openICMP(unix.SOCK_DGRAM)
	if err != nil {
		var rawErr error
		if s, rawErr = openICMP(unix.SOCK_RAW); rawErr != nil {
			return nil, fmt.Errorf("inuse: no ICMP socket (datagram: %w; raw: %w)", err, rawErr)
		}
	}
	if s.echoes, err = s.sizeSendBuffer(echoes); err != nil {
		s.Close()
		return nil, err
	}
	return s, nil
}

// icmpFilter is the raw ICMP socket option (SOL_RAW) of the ICMP types the kernel drops
// before they reach the socket, one bit a type (linux/icmp.h's ICMP_FILTER).
const icmpFilter = 1

// onlyEchoReplies is the ICMP_FILTER mask that drops every type but the echo reply (0):
// all 32 bits but the lowest, as the int32 setsockopt takes.
const onlyEchoReplies = -2

// openICMP opens an ICMP socket of type typ (SOCK_DGRAM or SOCK_RAW) bound to every
// address. A raw one reports the errors of the neighbour table (IP_RECVERR): without it
// the kernel takes an echo it dropped there as sent; and it is given echo replies only
// (ICMP_FILTER), as a datagram one is given its own only: a raw socket is otherwise given
// every ICMP datagram the host receives, a flood of echo requests at the host included,
// whose room in its receive buffer the replies need.
func openICMP(typ int) (*icmpSocket, error) {
	fd, err := unix.Socket(unix.AF_INET, typ|unix.SOCK_CLOEXEC|unix.SOCK_NONBLOCK, unix.IPPROTO_ICMP)
	if err != nil {
		return nil, os.NewSyscallError("socket", err)
	}
	raw := typ == unix.SOCK_RAW
	if raw {
		err = os.NewSyscallError("setsockopt IP_RECVERR", unix.SetsockoptInt(fd, unix.IPPROTO_IP, unix.IP_RECVERR, 1))
		if err == nil {
			err = os.NewSyscallError("setsockopt ICMP_FILTER", unix.SetsockoptInt(fd, unix.SOL_RAW, icmpFilter, onlyEchoReplies))
		}
	} else {
		err = os.NewSyscallError("bind", unix.Bind(fd, &unix.SockaddrInet4{}))
	}
	if err != nil {
		unix.Close(fd)
		return nil, err
	}
	f := os.NewFile(uintptr(fd), "icmp")
	defer f.Close()
	conn, err := net.FilePacketConn(f)
	if err != nil {
		return nil, err
	}
	rc, err := conn.(syscall.Conn).SyscallConn()
	if err != nil {
		conn.Close()
		return nil, err
	}
	return &icmpSocket{PacketConn: conn, rc: rc, raw: raw}, nil
}

// sizeSendBuffer asks for a send buffer that holds echoes echoes (at most maxEchoes):
// SO_SNDBUFFORCE, past net.core.wmem_max, where the process may (CAP_NET_ADMIN), else
// SO_SNDBUF, which wmem_max caps. It returns how many echoes the buffer the kernel granted
// holds, as getsockopt reads it back: a raw socket takes echoes up to twice SO_SNDBUF, a
// datagram one up to SO_SNDBUF.
func (s *icmpSocket) sizeSendBuffer(echoes int) (int, error) {
	need, ask := min(echoes, maxEchoes)*echoRoom, SendBufferFor(echoes)
	// limit is the bytes of echoes a SO_SNDBUF of sndbuf takes.
	limit := func(sndbuf int) int { return sndbuf }
	if s.raw {
		limit, ask = func(sndbuf int) int { return 2 * sndbuf }, ask/2
	}
	var granted int
	var err error
	if cerr := s.rc.Control(func(fd uintptr) {
		if granted, err = unix.GetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_SNDBUF); err != nil || limit(granted) >= need {
			return
		}
		if unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_SNDBUFFORCE, ask) != nil {
			// Not permitted (no CAP_NET_ADMIN): net.core.wmem_max caps it instead.
			unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_SNDBUF, ask)
		}
		granted, err = unix.GetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_SNDBUF)
	}); cerr != nil {
		return 0, cerr
	}
	if err != nil {
		return 0, os.NewSyscallError("getsockopt SO_SNDBUF", err)
	}
	return limit(granted) / echoRoom, nil
}

// WriteTo sends b without waiting: a datagram socket whose send buffer is full refuses it
// (EAGAIN) rather than block the check, which then tells nothing, for seconds.
func (s *icmpSocket) WriteTo(b []byte, to net.Addr) (int, error) {
	var sa unix.SockaddrInet4
	switch a := to.(type) {
	case *net.IPAddr:
		copy(sa.Addr[:], a.IP.To4())
	case *net.UDPAddr:
		copy(sa.Addr[:], a.IP.To4())
	default:
		return 0, fmt.Errorf("inuse: not an IPv4 address: %v", to)
	}
	var err error
	if werr := s.rc.Write(func(fd uintptr) bool {
		err = unix.Sendto(int(fd), b, unix.MSG_DONTWAIT, &sa)
		return true
	}); werr != nil {
		err = werr
	}
	if err != nil {
		return 0, &net.OpError{Op: "write", Net: "ip4:icmp", Addr: to, Err: os.NewSyscallError("sendto", err)}
	}
	return len(b), nil
}

// ReadFrom reads the next datagram. On a raw socket an ICMP error about an echo sent
// (a host unreachable once ARP gave up) comes as a read error (IP_RECVERR): it is dropped
// with its entry of the error queue, which would otherwise fill the receive buffer that
// the replies need, and the read goes on.
func (s *icmpSocket) ReadFrom(b []byte) (int, net.Addr, error) {
	for {
		n, from, err := s.PacketConn.ReadFrom(b)
		if !s.raw || !icmpReported(err) {
			return n, from, err
		}
		s.dropErrors()
	}
}

// icmpReported tells an error the kernel reports from an ICMP error message (RFC 1122
// 3.2.2.1's unreachables, time exceeded, parameter problem) from one of the socket itself.
func icmpReported(err error) bool {
	var errno syscall.Errno
	if !errors.As(err, &errno) {
		return false
	}
	switch errno {
	case unix.EHOSTUNREACH, unix.ENETUNREACH, unix.ENOPROTOOPT, unix.ECONNREFUSED, unix.EMSGSIZE,
		unix.EOPNOTSUPP, unix.ENONET, unix.EHOSTDOWN, unix.EACCES, unix.EPROTO:
		return true
	}
	return false
}

// dropErrors empties the socket's error queue.
func (s *icmpSocket) dropErrors() {
	buf, oob := make([]byte, 576), make([]byte, 256)
	s.rc.Read(func(fd uintptr) bool {
		for {
			if _, _, _, _, err := unix.Recvmsg(int(fd), buf, oob, unix.MSG_ERRQUEUE|unix.MSG_DONTWAIT); err != nil {
				return true
			}
		}
	})
}

// room is how many echoes waiting for ARP the socket's send buffer holds.
func (s *icmpSocket) room() int { return s.echoes }

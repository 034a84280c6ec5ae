package boot

import (
	"io"
	"net/http"

	"github.com/better-compute/better-compute/boot/dhcp"
	"github.com/insomniacslk/dhcp/dhcpv4"
)

// Observer is told of what the boot server serves: bcd site's metrics. Its methods are
// called on the serving goroutines and must return quickly.
type Observer interface {
	// DHCPReply is a reply sent: offer, ack or nak (lower case), or another type.
	DHCPReply(kind string)
	// DHCPDropped is a request left unanswered (not a network-boot client, of no
	// subnet served here, no address to offer, another server's offer chosen, ...).
	DHCPDropped()
	// DHCPPoolExhausted is a DHCPDISCOVER left unanswered because no address of its
	// subnet's range is free.
	DHCPPoolExhausted()
	// DHCPUnknownRefused is a DHCPDISCOVER of a machine the site does not know left
	// unanswered because such machines hold their share of its subnet's range
	// (Config.UnknownShare).
	DHCPUnknownRefused()
	// DHCPAddressInUse is an address a host answered at when the server checked it
	// before an offer (Config.ConflictCheck): held away, and another offered.
	DHCPAddressInUse()
	// DHCPCheckUnsent is a DHCPDISCOVER left unanswered because the echo of its
	// address's check (Config.ConflictCheck) was not sent: no buffer, no route. It is a
	// drop (DHCPDropped) too.
	DHCPCheckUnsent()
	// DHCPHeldAwayShare is an address offered without its check, or found in use or
	// declined and not held away, because the addresses held away take their share of
	// the subnet's range (Config.HeldAwayShare).
	DHCPHeldAwayShare()
	// TFTPTransfer is a TFTP read that ended, whole (ok) or not, and the bytes sent.
	TFTPTransfer(ok bool, bytes int64)
	// HTTPServed is an HTTP answer of kind (script, ramdisk, ipxe, image) and the body
	// bytes sent.
	HTTPServed(kind string, status int, bytes int64)
}

// observeDHCP counts h's replies and drops.
func observeDHCP(h dhcp.Handler, o Observer) dhcp.Handler {
	return func(req *dhcpv4.DHCPv4) (*dhcpv4.DHCPv4, bool) {
		resp, ok := h(req)
		switch {
		case !ok:
			o.DHCPDropped()
		case resp.MessageType() == dhcpv4.MessageTypeOffer:
			o.DHCPReply("offer")
		case resp.MessageType() == dhcpv4.MessageTypeAck:
			o.DHCPReply("ack")
		case resp.MessageType() == dhcpv4.MessageTypeNak:
			o.DHCPReply("nak")
		default:
			o.DHCPReply("other")
		}
		return resp, ok
	}
}

// observeHTTP counts the answers of h as kind, and their body bytes. The writer keeps
// the ResponseWriter's ReadFrom, so a file is still sent with sendfile.
func observeHTTP(kind string, h http.Handler, o Observer) http.Handler {
	if o == nil {
		return h
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		cw := &countingWriter{ResponseWriter: w, status: http.StatusOK}
		h.ServeHTTP(cw, r)
		o.HTTPServed(kind, cw.status, cw.n)
	})
}

// countingWriter counts the body bytes written through it.
type countingWriter struct {
	http.ResponseWriter
	status int
	n      int64
}

func (w *countingWriter) WriteHeader(status int) {
	w.status = status
	w.ResponseWriter.WriteHeader(status)
}

func (w *countingWriter) Write(b []byte) (int, error) {
	n, err := w.ResponseWriter.Write(b)
	w.n += int64(n)
	return n, err
}

// ReadFrom hands r to the ResponseWriter's own ReadFrom (net/http's: sendfile for a
// file), counting what it sent.
func (w *countingWriter) ReadFrom(r io.Reader) (int64, error) {
	if rf, ok := w.ResponseWriter.(io.ReaderFrom); ok {
		n, err := rf.ReadFrom(r)
		w.n += n
		return n, err
	}
	n, err := io.Copy(struct{ io.Writer }{w}, r)
	return n, err
}

// Unwrap is the ResponseWriter underneath, for http.ResponseController.
func (w *countingWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

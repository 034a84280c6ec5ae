package boot

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/insomniacslk/dhcp/dhcpv4"
)

// counts is an Observer recording what it is told.
type counts struct{ dhcp []string }

func (c *counts) DHCPReply(kind string)         { c.dhcp = append(c.dhcp, kind) }
func (c *counts) DHCPDropped()                  { c.dhcp = append(c.dhcp, "dropped") }
func (c *counts) DHCPPoolExhausted()            {}
func (c *counts) DHCPUnknownRefused()           {}
func (c *counts) DHCPAddressInUse()             {}
func (c *counts) DHCPCheckUnsent()              {}
func (c *counts) DHCPHeldAwayShare()            {}
func (c *counts) TFTPTransfer(bool, int64)      {}
func (c *counts) HTTPServed(string, int, int64) {}

// TestDHCPRepliesAreObservedByType: each reply is counted by its type and each request
// left unanswered as a drop.
func TestDHCPRepliesAreObservedByType(t *testing.T) {
	answers := []dhcpv4.MessageType{dhcpv4.MessageTypeOffer, dhcpv4.MessageTypeAck, dhcpv4.MessageTypeNak, dhcpv4.MessageTypeNone}
	i := 0
	h := func(req *dhcpv4.DHCPv4) (*dhcpv4.DHCPv4, bool) {
		t := answers[i]
		i++
		if t == dhcpv4.MessageTypeNone {
			return nil, false
		}
		resp, _ := dhcpv4.NewReplyFromRequest(req, dhcpv4.WithMessageType(t))
		return resp, true
	}
	c := &counts{}
	observed := observeDHCP(h, c)
	req, err := dhcpv4.NewDiscovery(net.HardwareAddr{0x52, 0x54, 0, 0, 0, 1})
	if err != nil {
		t.Fatal(err)
	}
	for range answers {
		observed(req)
	}
	if got := strings.Join(c.dhcp, " "); got != "offer ack nak dropped" {
		t.Errorf("observed %q", got)
	}
}

// readerFromWriter is a ResponseWriter whose ReadFrom records that it was used.
type readerFromWriter struct {
	httptest.ResponseRecorder
	readFrom bool
}

func (w *readerFromWriter) ReadFrom(r io.Reader) (int64, error) {
	w.readFrom = true
	return io.Copy(&w.ResponseRecorder, r)
}

// TestCountedHTTPKeepsReadFrom: a file served through the counting writer still reaches
// the ResponseWriter's own ReadFrom (net/http's, which is sendfile), and its bytes and
// status are counted under the route's kind.
func TestCountedHTTPKeepsReadFrom(t *testing.T) {
	var got string
	obs := &httpCounts{served: func(kind string, status int, n int64) { got = fmt.Sprintf("%s %d %d", kind, status, n) }}
	h := observeHTTP("image", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.ServeContent(w, r, "", time.Time{}, strings.NewReader(strings.Repeat("x", 5000)))
	}), obs)
	w := &readerFromWriter{ResponseRecorder: *httptest.NewRecorder()}
	req := httptest.NewRequest("GET", "/images/sha256/x", nil)
	req.Header.Set("Range", "bytes=0-999")
	h.ServeHTTP(w, req)
	if !w.readFrom || got != "image 206 1000" {
		t.Errorf("ReadFrom used: %v; observed %q, want image 206 1000", w.readFrom, got)
	}
}

// httpCounts is an Observer of HTTP answers only.
type httpCounts struct {
	counts
	served func(kind string, status int, n int64)
}

func (c *httpCounts) HTTPServed(kind string, status int, n int64) { c.served(kind, status, n) }

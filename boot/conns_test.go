package boot

import (
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestIdleConnectionsFromOneAddressAreBounded is a host opening connections to the boot
// server's HTTP port and sending nothing on them: each held some 16 KiB and a file
// descriptor for the 10 s header timeout, as many as the host could open. Now one
// address keeps at most httpConnsPerClient open, the rest closed as they come, and a
// machine at another address downloads its kernel meanwhile.
func TestIdleConnectionsFromOneAddressAreBounded(t *testing.T) {
	base := startHTTP(t, newServer(t, entries{}, nil, nil))
	const conns = 200
	idle := dialIdle(t, base, "127.0.0.1", conns)
	if open := stillOpen(idle); open > httpConnsPerClient {
		t.Errorf("%d of %d idle connections from one address open, want at most %d", open, conns, httpConnsPerClient)
	}
	if body, err := getFrom(base+"/ramdisk/vmlinuz", "127.0.0.2"); err != nil || body != "0123456789" {
		t.Errorf("a machine's download from another address: %q, %v", body, err)
	}
}

// TestHTTPConnectionsAreBoundedInAll is hosts at several addresses opening idle
// connections, each within its own bound: past the listener's bound for all, the
// connections are closed as they come; once some close, new ones are served.
func TestHTTPConnectionsAreBoundedInAll(t *testing.T) {
	s := newServer(t, entries{}, nil, nil)
	l, hs, err := s.listenHTTP(t.Context(), "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	const max = 48
	l.(*stallListener).conns.max = max
	go hs.Serve(l)
	t.Cleanup(func() { hs.Close() })
	base := "http://" + l.Addr().String()
	var idle []net.Conn
	for _, from := range []string{"127.0.0.3", "127.0.0.4"} {
		idle = append(idle, dialIdle(t, base, from, httpConnsPerClient)...)
	}
	if open := stillOpen(idle); open != max {
		t.Errorf("%d of %d idle connections open, want the bound, %d", open, len(idle), max)
	}
	if _, err := getFrom(base+"/ramdisk/vmlinuz", "127.0.0.5"); err == nil {
		t.Error("a download served past the bound of all connections")
	}
	for _, c := range idle {
		c.Close()
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		body, err := getFrom(base+"/ramdisk/vmlinuz", "127.0.0.5")
		if err == nil && body == "0123456789" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no download once the idle connections closed: %q, %v", body, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// dialIdle opens n connections to base from the local address from, sending nothing;
// the test closes them when it ends.
func dialIdle(t *testing.T, base, from string, n int) []net.Conn {
	t.Helper()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}}
	var conns []net.Conn
	for range n {
		c, err := d.Dial("tcp4", strings.TrimPrefix(base, "http://"))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		conns = append(conns, c)
	}
	return conns
}

// stillOpen is how many of conns the server has not closed: a read that waits half a
// second for nothing, rather than ending.
func stillOpen(conns []net.Conn) int {
	var (
		mu   sync.Mutex
		open int
		wg   sync.WaitGroup
	)
	for _, c := range conns {
		wg.Go(func() {
			c.SetReadDeadline(time.Now().Add(500 * time.Millisecond))
			_, err := c.Read(make([]byte, 1))
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				mu.Lock()
				open++
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return open
}

// getFrom GETs url from the local address from and returns the body of a 200.
func getFrom(url, from string) (string, error) {
	client := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{DisableKeepAlives: true,
		DialContext: (&net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}}).DialContext}}
	resp, err := client.Get(url)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err == nil && resp.StatusCode != http.StatusOK {
		err = errors.New(resp.Status)
	}
	return string(body), err
}

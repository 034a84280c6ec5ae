package boot

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/insomniacslk/dhcp/dhcpv4"
	"github.com/insomniacslk/dhcp/dhcpv4/server4"
	"github.com/insomniacslk/dhcp/iana"
)

// stormSpec is a boot storm: Clients machines that start at once and each do what iPXE
// does: DHCP (user class iPXE) with retransmissions, fetch the script from the boot file
// URL, then the kernel and initrd it names.
type stormSpec struct {
	Interface string
	Clients   int
	Timeout   time.Duration
}

// stormResult is what a storm measured.
type stormResult struct {
	Booted, Failed int
	Wall           time.Duration
	P50, P99       time.Duration
	Bytes          int64
	Errors         []string
}

// stormHelper runs a storm from the spec file and prints its result as JSON.
func stormHelper(specFile string) int {
	var spec stormSpec
	b, err := os.ReadFile(specFile)
	if err == nil {
		err = json.Unmarshal(b, &spec)
	}
	if err == nil {
		var r stormResult
		r, err = storm(spec)
		json.NewEncoder(os.Stdout).Encode(r)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "storm:", err)
		return 1
	}
	return 0
}

// dhcpMux shares one client socket among the simulated machines, by transaction id.
type dhcpMux struct {
	conn net.PacketConn
	mu   sync.Mutex
	wait map[dhcpv4.TransactionID]chan *dhcpv4.DHCPv4
}

func (m *dhcpMux) run() {
	buf := make([]byte, 1500)
	for {
		n, _, err := m.conn.ReadFrom(buf)
		if err != nil {
			return
		}
		r, err := dhcpv4.FromBytes(buf[:n])
		if err != nil || r.OpCode != dhcpv4.OpcodeBootReply {
			continue
		}
		m.mu.Lock()
		ch := m.wait[r.TransactionID]
		m.mu.Unlock()
		if ch != nil {
			select {
			case ch <- r:
			default:
			}
		}
	}
}

// exchange sends req until a reply of type want comes, with firmware-like backoff.
func (m *dhcpMux) exchange(req *dhcpv4.DHCPv4, want dhcpv4.MessageType) (*dhcpv4.DHCPv4, error) {
	ch := make(chan *dhcpv4.DHCPv4, 4)
	m.mu.Lock()
	m.wait[req.TransactionID] = ch
	m.mu.Unlock()
	defer func() { m.mu.Lock(); delete(m.wait, req.TransactionID); m.mu.Unlock() }()
	to := &net.UDPAddr{IP: net.IPv4bcast, Port: dhcpv4.ServerPort}
	for wait := time.Second; wait <= 8*time.Second; wait *= 2 {
		if _, err := m.conn.WriteTo(req.ToBytes(), to); err != nil {
			return nil, err
		}
		timer := time.NewTimer(wait)
		for waiting := true; waiting; {
			select {
			case r := <-ch:
				if r.MessageType() == want {
					timer.Stop()
					return r, nil
				}
			case <-timer.C:
				waiting = false
			}
		}
	}
	return nil, fmt.Errorf("no %s", want)
}

func storm(spec stormSpec) (stormResult, error) {
	conn, err := server4.NewIPv4UDPConn(spec.Interface, &net.UDPAddr{Port: dhcpv4.ClientPort})
	if err != nil {
		return stormResult{}, err
	}
	defer conn.Close()
	mux := &dhcpMux{conn: conn, wait: map[dhcpv4.TransactionID]chan *dhcpv4.DHCPv4{}}
	go mux.run()
	client := &http.Client{Timeout: spec.Timeout, Transport: &http.Transport{DisableKeepAlives: true}}
	ctx, cancel := context.WithTimeout(context.Background(), spec.Timeout)
	defer cancel()

	var (
		mu     sync.Mutex
		res    stormResult
		times  []time.Duration
		wg     sync.WaitGroup
		start  = time.Now()
		result = func(d time.Duration, n int64, err error) {
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				res.Failed++
				if len(res.Errors) < 5 {
					res.Errors = append(res.Errors, err.Error())
				}
				return
			}
			res.Booted++
			res.Bytes += n
			times = append(times, d)
		}
	)
	for i := range spec.Clients {
		wg.Go(func() {
			mac := net.HardwareAddr{0x02, 0xbb, 0, 0, byte(i >> 8), byte(i)}
			n, err := bootOne(ctx, mux, client, mac)
			result(time.Since(start), n, err)
		})
	}
	wg.Wait()
	res.Wall = time.Since(start)
	slices.Sort(times)
	if len(times) > 0 {
		res.P50, res.P99 = times[len(times)/2], times[len(times)*99/100]
	}
	return res, nil
}

// bootOne is one machine's boot: DHCP, script, kernel, initrd. It returns the bytes
// downloaded.
func bootOne(ctx context.Context, mux *dhcpMux, client *http.Client, mac net.HardwareAddr) (int64, error) {
	mods := []dhcpv4.Modifier{dhcpv4.WithHwAddr(mac), dhcpv4.WithBroadcast(true), dhcpv4.WithUserClass("iPXE", false),
		dhcpv4.WithOption(dhcpv4.OptClassIdentifier("PXEClient:Arch:00000:UNDI:002001")),
		dhcpv4.WithOption(dhcpv4.OptClientArch(iana.INTEL_X86PC))}
	disc, err := dhcpv4.New(append(mods, dhcpv4.WithMessageType(dhcpv4.MessageTypeDiscover))...)
	if err != nil {
		return 0, err
	}
	offer, err := mux.exchange(disc, dhcpv4.MessageTypeOffer)
	if err != nil {
		return 0, fmt.Errorf("%s: %w", mac, err)
	}
	req, err := dhcpv4.NewRequestFromOffer(offer, mods...)
	if err != nil {
		return 0, err
	}
	ack, err := mux.exchange(req, dhcpv4.MessageTypeAck)
	if err != nil {
		return 0, fmt.Errorf("%s: %w", mac, err)
	}
	get := func(url string, body func(io.Reader) error) (int64, error) {
		r, err := http.NewRequestWithContext(ctx, "GET", url, nil)
		if err != nil {
			return 0, err
		}
		resp, err := client.Do(r)
		if err != nil {
			return 0, err
		}
		defer resp.Body.Close()
		if resp.StatusCode != 200 {
			return 0, fmt.Errorf("%s: %s", url, resp.Status)
		}
		cr := &countingReader{r: resp.Body}
		err = body(cr)
		return cr.n, err
	}
	var kernel, initrd string
	total, err := get(ack.BootFileName, func(r io.Reader) error {
		sc := bufio.NewScanner(r)
		for sc.Scan() {
			f := strings.Fields(sc.Text())
			if len(f) == 0 {
				continue
			}
			for _, w := range f[1:] {
				if strings.HasPrefix(w, "http://") {
					switch f[0] {
					case "kernel":
						kernel = w
					case "initrd":
						initrd = w
					}
					break
				}
			}
		}
		return sc.Err()
	})
	if err != nil {
		return 0, err
	}
	if kernel == "" || initrd == "" {
		return 0, fmt.Errorf("%s: script %s names no kernel and initrd", mac, ack.BootFileName)
	}
	for _, u := range []string{kernel, initrd} {
		n, err := get(u, func(r io.Reader) error { _, err := io.Copy(io.Discard, r); return err })
		if err != nil {
			return 0, err
		}
		total += n
	}
	return total, nil
}

type countingReader struct {
	r io.Reader
	n int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}

// randomFile writes n random bytes to path.
func randomFile(path string, n int) error {
	b := make([]byte, n)
	rand.Read(b)
	return os.WriteFile(path, b, 0o644)
}

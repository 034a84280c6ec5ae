package main_test

import (
	"errors"
	"io"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/better-compute/better-compute/agent/bcdconf"
	"github.com/better-compute/better-compute/proto/joinwire"
	"github.com/better-compute/better-compute/testkit"
)

// trickle is a request body that sends its first byte, then nothing until its request
// is closed (the answer came) or the test stops: a body sent as slowly as the registry
// lets it.
type trickle struct {
	sent   bool
	closed chan struct{}
	once   sync.Once
	stop   <-chan struct{}
}

func (b *trickle) Read(p []byte) (int, error) {
	if !b.sent {
		b.sent = true
		p[0] = '{'
		return 1, nil
	}
	select {
	case <-b.closed:
	case <-b.stop:
	}
	return 0, errors.New("the trickle stopped")
}

func (b *trickle) Close() error {
	b.once.Do(func() { close(b.closed) })
	return nil
}

// TestAStrangersSlowJoinsLeaveRoomForMachines, as the attacker through the real serve
// and bcd join: a stranger on 127.0.0.2 keeps 64 join.join calls open, each body
// trickling its first byte and sending it again as soon as the registry gives up on it,
// which costs the stranger nothing (a body that did not arrive is TIMEOUT, no refused
// token). A real bcd join from 127.0.0.1 with a valid token meanwhile joins. Before, the
// stranger's 64 bodies held every one of the 64 joins the registry serves at once: bcd
// join was answered UNAVAILABLE 21 times in a row and gave up, and so would every
// machine for as long as the stranger kept at it.
func TestAStrangersSlowJoinsLeaveRoomForMachines(t *testing.T) {
	reg := testkit.StartRegistry(t, "")
	testkit.JSON(t, reg.AdminConfig, nil, "sites", "create", "rack-a")
	// Over HTTP/2, as a client may: a join's stream the registry gave up on is opened
	// again on the same connection, at once.
	tr := transportFrom(t, reg, "127.0.0.2")
	tr.ForceAttemptHTTP2 = true
	client := &http.Client{Transport: tr}
	stop := make(chan struct{})
	var holders sync.WaitGroup
	defer holders.Wait()
	defer close(stop)
	for range 64 {
		holders.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				body := &trickle{closed: make(chan struct{}), stop: stop}
				req, _ := http.NewRequest(http.MethodPost, reg.URL+"/v1/"+joinwire.JoinMethod, body)
				req.Header.Set("Content-Type", "application/json")
				req.ContentLength = 600
				if resp, err := client.Do(req); err == nil {
					io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
				}
				body.Close()
			}
		})
	}
	time.Sleep(time.Second) // the stranger's bodies are all trickling
	j := newJoiner(t, mint(t, reg, "--kind", "provisioned", "--node-id", "node-1", "--site", "rack-a"))
	if res := testkit.BCD(t, j.args(reg.URL, "node-1", "node", reg.Pins)...); res.Code != 0 {
		t.Fatalf("bcd join beside the stranger's slow joins: exit %d\n%s", res.Code, res.Stderr)
	}
	if _, err := bcdconf.Load(j.configDir); err != nil {
		t.Errorf("after the join: %v", err)
	}
}

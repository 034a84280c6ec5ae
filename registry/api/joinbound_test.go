package api

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/better-compute/better-compute/proto"
	"github.com/better-compute/better-compute/proto/joinwire"
)

// answeringJoiner answers each join as its node id says, counting the joins it is asked;
// "hold" waits until release is closed, telling inside first.
type answeringJoiner struct {
	asked           atomic.Int64
	inside, release chan struct{}
}

func (j *answeringJoiner) Join(_ context.Context, _ string, req joinwire.Request) (joinwire.Response, error) {
	j.asked.Add(1)
	switch req.NodeID {
	case "joins", "hold":
		if req.NodeID == "hold" {
			j.inside <- struct{}{}
			<-j.release
		}
		return joinwire.Response{Payload: "signed"}, nil
	case "unknown-token":
		return joinwire.Response{}, proto.Errorf(proto.Unauthenticated, "the join token is not valid").WithReason(proto.ReasonTokenInvalid)
	case "used-token":
		return joinwire.Response{}, proto.Errorf(proto.Unauthenticated, "join token was already used").WithReason(proto.ReasonTokenUsed)
	case "other-node":
		return joinwire.Response{}, proto.Errorf(proto.Forbidden, "minted for another node").WithReason(proto.ReasonIdentity)
	case "site-gone":
		return joinwire.Response{}, proto.Errorf(proto.NotFound, "site does not exist").WithPath("site")
	case "store-down":
		return joinwire.Response{}, proto.Errorf(proto.Unavailable, "the store is unavailable")
	}
	return joinwire.Response{}, fmt.Errorf("the disk failed")
}

// credentialsSeen is a CredentialObserver counting what it is told.
type credentialsSeen struct {
	seen
	countsMu sync.Mutex
	counts   map[string]int
}

func (c *credentialsSeen) APICredentialChecked(credential string, valid bool) {
	c.countsMu.Lock()
	defer c.countsMu.Unlock()
	c.counts[fmt.Sprintf("%s valid=%t", credential, valid)]++
}

func (c *credentialsSeen) APISourceRefused(credential string) {
	c.countsMu.Lock()
	defer c.countsMu.Unlock()
	c.counts[credential+" refused"]++
}

// joinServer is a server with join.join answered by j and test.private, a method any
// bearer credential reaches, bounded at burst failed checks a source.
func joinServer(t *testing.T, j Joiner, burst int) (*httptest.Server, *credentialsSeen) {
	s := NewServer(nil, slog.New(slog.DiscardHandler))
	s.LimitFailures(FailureLimits{Burst: burst, Refill: time.Hour}, time.Now)
	s.RegisterJoin(j)
	s.Register("test.private", Method{Call: func(context.Context, *Caller, []byte) (any, error) { return struct{}{}, nil }})
	obs := &credentialsSeen{counts: map[string]int{}}
	s.Observe(obs)
	srv := httptest.NewServer(s)
	t.Cleanup(srv.Close)
	return srv, obs
}

func joinAs(t *testing.T, srv *httptest.Server, node string) (int, string, proto.Error) {
	t.Helper()
	return call(t, srv, joinwire.JoinMethod, "application/json", `{"nodeId":"`+node+`","role":"node","publicKey":"","sealedToken":""}`)
}

// TestJoinTokenRefusalsCostTheirSource: of a source's joins, only those whose token is
// refused (unknown, used, of another node, naming a site that is gone) cost it a failed
// check; joins that succeed, malformed requests and a failing registry cost nothing. Once
// its failures are spent, its joins, valid or not, and its bearer calls (the same bucket)
// are refused source-failures with Retry-After before the join is asked, and counted.
func TestJoinTokenRefusalsCostTheirSource(t *testing.T) {
	j := &answeringJoiner{}
	srv, obs := joinServer(t, j, 4)
	for range 30 {
		if status, _, e := joinAs(t, srv, "joins"); status != http.StatusOK {
			t.Fatalf("a join that succeeds: %d %+v", status, e)
		}
	}
	for node, want := range map[string]proto.Code{"store-down": proto.Unavailable, "disk-fails": proto.Internal} {
		for range 10 {
			if _, _, e := joinAs(t, srv, node); e.Code != want {
				t.Fatalf("%s: %+v, want %s", node, e, want)
			}
		}
	}
	for range 10 {
		if _, _, e := call(t, srv, joinwire.JoinMethod, "application/json", `{"nodeId":"x","made":"up"}`); e.Code != proto.InvalidInput {
			t.Fatalf("a malformed request: %+v", e)
		}
	}
	for _, node := range []string{"unknown-token", "used-token", "other-node", "site-gone"} {
		if status, _, e := joinAs(t, srv, node); status == http.StatusServiceUnavailable {
			t.Fatalf("%s within the burst of 4 refused tokens: %d %+v", node, status, e)
		}
	}
	asked := j.asked.Load()
	for _, node := range []string{"joins", "unknown-token"} {
		status, retry, e := joinAs(t, srv, node)
		if status != http.StatusServiceUnavailable || e.Code != proto.Unavailable || e.Details.Reason != proto.ReasonSourceFailures ||
			retry == "" || !strings.Contains(e.Message, "tokens create") {
			t.Errorf("%s beyond the burst: %d, Retry-After %q, %+v", node, status, retry, e)
		}
	}
	if status, _, e := callAs(t, srv, "bcc_made.up", "test.private", "application/json", "{}"); e.Details.Reason != proto.ReasonSourceFailures {
		t.Errorf("a bearer call from the same source: %d %+v", status, e)
	}
	if n := j.asked.Load() - asked; n != 0 {
		t.Errorf("the join was asked %d times for refused calls", n)
	}
	want := map[string]int{"join-token valid=true": 30, "join-token valid=false": 4, "join-token refused": 2, "bearer refused": 1}
	if fmt.Sprint(obs.counts) != fmt.Sprint(want) {
		t.Errorf("observed %v, want %v", obs.counts, want)
	}
}

// TestJoinsRefusedAsTooManyAtOnceCostNothing: a join refused UNAVAILABLE because 64 are
// being served costs its source nothing (its one failure is still there after), and a
// source's joins under way at once, all succeeding, are never refused for it whatever the
// burst.
func TestJoinsRefusedAsTooManyAtOnceCostNothing(t *testing.T) {
	j := &answeringJoiner{inside: make(chan struct{}), release: make(chan struct{})}
	srv, _ := joinServer(t, j, 1)
	var held sync.WaitGroup
	for range maxPublic {
		held.Go(func() {
			if status, _, e := joinAs(t, srv, "hold"); status != http.StatusOK {
				t.Errorf("a join under way with 63 others, from a source with a burst of 1: %d %+v", status, e)
			}
		})
		<-j.inside
	}
	for range 5 {
		if status, retry, e := joinAs(t, srv, "unknown-token"); status != http.StatusServiceUnavailable || e.Details.Reason != "" || retry != "1" {
			t.Errorf("a join over the 64 at once: %d, Retry-After %q, %+v", status, retry, e)
		}
	}
	close(j.release)
	held.Wait()
	if _, _, e := joinAs(t, srv, "used-token"); e.Code != proto.Unauthenticated {
		t.Errorf("the source's one failure, after 5 joins refused as too many: %+v", e)
	}
	if _, _, e := joinAs(t, srv, "joins"); e.Details.Reason != proto.ReasonSourceFailures {
		t.Errorf("after that failure: %+v", e)
	}
}

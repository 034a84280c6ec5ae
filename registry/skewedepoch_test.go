package registry

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/better-compute/better-compute/proto"
	"github.com/better-compute/better-compute/proto/joinwire"

	"github.com/better-compute/better-compute/registry/api"
	"github.com/better-compute/better-compute/registry/store"
	"github.com/better-compute/better-compute/registry/store/storetest"
)

// replicaSkew is how far behind the other replica's clock is in TestCutOffAcrossSkewedClocks:
// well past the few calls between an epoch's move on one replica and a workflow's start on
// the other, well within a run claim's and a lease's lifetime (30s), which the replicas
// read on each other's clocks too.
const replicaSkew = 20 * time.Second

// TestCutOffAcrossSkewedClocks: two registries share one etcd store (a real three-member
// cluster), the second's clock 20 seconds behind the first's. An operator revokes a
// node's agents through the first (its identity epoch moves, at the first's time), then
// inspects the node through the second: the inspect is created just after the move, at
// the second's earlier time, and runs at the new epoch (its relay to the rack's agent,
// absent here, waits). A second revocation through the first cuts that inspect off and
// fails it at once (the answer's failedWorkflowId names it), whichever replica's clock
// wrote the run and the epoch. Before runs recorded the epoch they run at, the registry
// compared the epoch's time with the run's creation, written by two clocks: it took the
// inspect for one created before the move, and left it running, to wait out its step's
// timeout.
func TestCutOffAcrossSkewedClocks(t *testing.T) {
	ahead, behind := startSkewedReplicas(t, nil, newShiftedClock(-replicaSkew))
	n := storetest.Node(t, ahead.r.st, store.Node{Tenant: "acme", Pool: "gpu", MACs: []string{"52:54:00:00:0b:01"}, State: store.NodeReady})

	first, err := call[api.CertificatesRevoked](ahead.tenants["acme"], "metal.revokeCertificates", api.RevokeNodeCertificatesRequest{NodeID: n.ID, Reason: "rotating"})
	if err != nil {
		t.Fatalf("the first revocation: %v", err)
	}
	if first.FailedWorkflowID != "" {
		t.Fatalf("the first revocation failed workflow %s, with none running", first.FailedWorkflowID)
	}
	inspect, err := call[api.TransitionStarted](behind.tenants["acme"], "metal.inspect", api.TransitionRequest{NodeID: n.ID})
	if err != nil {
		t.Fatalf("metal.inspect on the replica behind: %v", err)
	}
	var run store.Run
	if err := behind.r.st.View(func(tx *store.Tx) (err error) { run, err = tx.Run(inspect.WorkflowID); return err }); err != nil {
		t.Fatalf("reading the inspect: %v", err)
	}
	if run.State != store.RunRunning || !run.CreatedAt.Before(first.RevokedAt) {
		t.Fatalf("the inspect is %s, created at %v; want it running, created before the epoch's move at %v by the other clock", run.State, run.CreatedAt, first.RevokedAt)
	}

	second, err := call[api.CertificatesRevoked](ahead.tenants["acme"], "metal.revokeCertificates", api.RevokeNodeCertificatesRequest{NodeID: n.ID, Reason: "OS compromised"})
	if err != nil {
		t.Fatalf("the second revocation: %v", err)
	}
	if second.FailedWorkflowID != inspect.WorkflowID {
		t.Errorf("the second revocation failed workflow %q, want the inspect %s, which runs at the epoch it moved", second.FailedWorkflowID, inspect.WorkflowID)
	}
	if err := behind.r.st.View(func(tx *store.Tx) (err error) { run, err = tx.Run(inspect.WorkflowID); return err }); err != nil {
		t.Fatalf("reading the inspect: %v", err)
	}
	if run.Cancelled == nil {
		t.Errorf("the inspect is %s, not failed, after the revocation cut it off", run.State)
	}
}

// TestTokenReuseAcrossSkewedClocks: two registries share one etcd store (a real
// three-member cluster), the second's clock 20 seconds behind the first's. A node's
// installed OS joins with a provisioned token an operator minted (`bcd join` through one
// replica, from 127.0.0.1), and the node's agents are revoked through the other, before
// or after that join; then another host presents the used token again, from 127.0.0.2.
// Whether the agent that joined with it still holds the node's identity is told by the
// identity epoch its join recorded on the token, whichever clocks wrote the join and the
// epoch's move: a join just after the move, through the replica behind, is contained
// (the epoch moves again); a join before the move, when the move went through the
// replica behind, moves nothing (its certificate is refused already, and a host that
// kept a used token must not cut each new installed agent off). Before tokens recorded
// the epoch, the registry compared the token's use with the epoch's move, written by two
// clocks, and got both the wrong way round.
func TestTokenReuseAcrossSkewedClocks(t *testing.T) {
	ahead, behind := startSkewedReplicas(t, nil, newShiftedClock(-replicaSkew))
	for i, c := range []struct {
		name          string
		revokeThrough *busyFleet
		joinFirst     bool
		joinThrough   *busyFleet
		contained     bool
	}{
		{name: "joined just after the move, through the replica behind", revokeThrough: ahead, joinThrough: behind, contained: true},
		{name: "joined before the move, which went through the replica behind", revokeThrough: behind, joinFirst: true, joinThrough: ahead},
	} {
		t.Run(c.name, func(t *testing.T) {
			n := storetest.Node(t, ahead.r.st, store.Node{Tenant: "acme", Pool: "gpu", MACs: []string{fmt.Sprintf("52:54:00:00:0c:%02x", i)}, State: store.NodeReady})
			var token string
			join := func() {
				// The revocation deletes the node's unused tokens: the token is minted
				// just before its join.
				token = ahead.mint(store.TokenProvisioned, n.ID)
				if _, err := c.joinThrough.join(n.ID, "node", token); err != nil {
					t.Fatalf("the installed OS's join through the replica %s: %v", clockOf(c.joinThrough, ahead), err)
				}
			}
			if c.joinFirst {
				join()
			}
			if _, err := call[api.CertificatesRevoked](c.revokeThrough.tenants["acme"], "metal.revokeCertificates", api.RevokeNodeCertificatesRequest{NodeID: n.ID, Reason: "rotating"}); err != nil {
				t.Fatalf("the revocation: %v", err)
			}
			if !c.joinFirst {
				join()
			}
			before := epochOf(t, ahead, n.ID)

			err := presentFrom(behind.r.Info().URL, "127.0.0.2", n.ID, "node", token)
			if e := proto.AsError(err); e.Code != proto.Unauthenticated || e.Details.Reason != proto.ReasonTokenUsed {
				t.Fatalf("the token presented again from 127.0.0.2: %v, want UNAUTHENTICATED %s", err, proto.ReasonTokenUsed)
			}
			events, err := call[api.EventList](ahead.tenants["acme"], "metal.events", api.EventsRequest{NodeID: n.ID})
			if err != nil {
				t.Fatal(err)
			}
			var detail string
			for _, e := range events.Events {
				if e.Kind == store.EventTokenReused {
					detail = e.Detail
				}
			}
			after := epochOf(t, ahead, n.ID)
			switch {
			case c.contained && (after != before+1 || !strings.Contains(detail, "The registry moved the node's identity epoch")):
				t.Errorf("the node's identity epoch went from %d to %d; the token.reused event: %q; want it contained (the epoch moved on once)", before, after, detail)
			case !c.contained && (after != before || !strings.Contains(detail, "so nothing was changed")):
				t.Errorf("the node's identity epoch went from %d to %d; the token.reused event: %q; want nothing changed", before, after, detail)
			}
		})
	}
}

// clockOf names the replica f, of the two startSkewedReplicas started, by its clock.
func clockOf(f, ahead *busyFleet) string {
	if f == ahead {
		return "ahead"
	}
	return "behind"
}

// epochOf is node's identity epoch as f's store reads it.
func epochOf(t *testing.T, f *busyFleet, node string) int64 {
	t.Helper()
	var n store.Node
	if err := f.r.st.View(func(tx *store.Tx) (err error) { n, err = tx.Node(node); return err }); err != nil {
		t.Fatal(err)
	}
	return n.IdentityEpoch
}

// presentFrom presents token to the registry at url, from the local address local, as
// a host that read it would to join as node's agent of role, and returns the registry's
// answer: nil when the join was admitted, its error otherwise.
func presentFrom(url, local, node, role, token string) error {
	body, err := joinRequest(url, node, role, token)
	if err != nil {
		return err
	}
	return postJoin(url, local, body)
}

// joinRequest is the body of a join as node's agent of role with token, sealed to the
// join encryption key of the registry at url's well-known document, for a fresh key.
func joinRequest(url, node, role, token string) ([]byte, error) {
	client := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
	res, err := client.Get(url + joinwire.WellKnownPath)
	if err != nil {
		return nil, err
	}
	doc, err := io.ReadAll(res.Body)
	res.Body.Close()
	if err != nil {
		return nil, err
	}
	anchors, err := joinwire.ParseWellKnown(doc)
	if err != nil {
		return nil, err
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	spki, err := x509.MarshalPKIXPublicKey(key.Public())
	if err != nil {
		return nil, err
	}
	sealed, err := joinwire.SealToken(anchors.JoinEncryptionKey, joinwire.AAD(node, role, spki), token)
	if err != nil {
		return nil, err
	}
	return json.Marshal(joinwire.Request{NodeID: node, Role: role,
		PublicKey: base64.StdEncoding.EncodeToString(spki), SealedToken: base64.StdEncoding.EncodeToString(sealed)})
}

// postJoin sends the join request body to the registry at url from the local address
// local, and returns the registry's answer: nil when the join was admitted, its error
// otherwise.
func postJoin(url, local string, body []byte) error {
	client := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{
		DialContext:     (&net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(local)}}).DialContext,
		TLSClientConfig: &tls.Config{InsecureSkipVerify: true},
	}}
	res, err := client.Post(url+"/v1/"+joinwire.JoinMethod, "application/json", bytes.NewReader(body))
	if err != nil {
		return err
	}
	defer res.Body.Close()
	answer, err := io.ReadAll(res.Body)
	if err != nil || res.StatusCode == http.StatusOK {
		return err
	}
	var e proto.Error
	if err := json.Unmarshal(answer, &e); err != nil || e.Code == "" {
		return fmt.Errorf("status %d: %s", res.StatusCode, answer)
	}
	return &e
}

package join

import (
	"context"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/better-compute/better-compute/proto"
	"github.com/better-compute/better-compute/proto/joinwire"
	"github.com/better-compute/better-compute/registry/pki"
	"github.com/better-compute/better-compute/registry/store"
	"github.com/better-compute/better-compute/registry/store/etcdtest"
	"github.com/better-compute/better-compute/registry/store/storetest"
)

// armedClock is the real time; armed, the next time it is read (the join issuing its
// certificate, inside its transaction, before the commit) it calls then once.
type armedClock struct {
	armed atomic.Bool
	then  func()
}

func (c *armedClock) Now() time.Time {
	if c.armed.CompareAndSwap(true, false) {
		c.then()
	}
	return time.Now()
}

// TestAJoinAnsweredUnavailableAfterItsCommitIsAnsweredWhenSentAgain: a registry on etcd
// (a real three-member cluster, reached through a proxy) joins a node's installed OS, and
// the cluster's answer to the join's commit comes after the store's timeout: the join is
// refused UNAVAILABLE, "the write may have been made or not", and it was made (the token
// reads used). bcd join sends a join refused UNAVAILABLE again, the same request, which
// must then be admitted, with a certificate for the key it asked for. Before, it was
// refused token-used: the machine could not join, its token spent by a join whose answer
// it never got.
func TestAJoinAnsweredUnavailableAfterItsCommitIsAnsweredWhenSentAgain(t *testing.T) {
	cluster := etcdtest.Start(t)
	proxy := cluster.Proxy(t, 0)
	st, err := store.OpenEtcd(store.EtcdConfig{Endpoints: []string{proxy.Endpoint}, Prefix: etcdtest.Prefix(t), Timeout: 2 * time.Second}, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	storetest.Fill(t, st)
	clk := &armedClock{then: proxy.Hold}
	keys, err := pki.LoadOrCreate(t.TempDir(), clk)
	if err != nil {
		t.Fatal(err)
	}
	svc := NewService(st, keys, []string{"127.0.0.1:7444"}, slog.New(slog.DiscardHandler))
	node := storetest.Node(t, st, store.Node{MACs: []string{"52:54:00:00:0e:01"}}).ID
	var tok store.JoinToken
	var secret string
	storetest.Update(t, st, func(tx *store.Tx) (err error) {
		tok, secret, err = MintToken(tx, store.TokenFor{Kind: store.TokenProvisioned, NodeID: node, Site: storetest.Site}, 0)
		return err
	})
	req, key := request(t, keys.JoinEncryptionKey(), node, joinwire.RoleNode, secret)

	clk.armed.Store(true)
	_, err = svc.Join(context.Background(), "192.0.2.2", req)
	proxy.Release()
	if proto.CodeOf(err) != proto.Unavailable || !strings.Contains(err.Error(), "may have been made") {
		t.Fatalf("the join whose commit was answered late: %v, want UNAVAILABLE", err)
	}
	var used store.JoinToken
	for deadline := time.Now().Add(20 * time.Second); used.UsedAt.IsZero(); time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("token %s unused after the join's commit: the store did not make it", tok.ID)
		}
		if err := st.View(func(tx *store.Tx) (err error) { used, err = tx.JoinTokenOf(secret); return err }); err != nil {
			t.Fatal(err)
		}
	}

	resp, err := svc.Join(context.Background(), "192.0.2.2", req)
	if err != nil {
		t.Fatalf("the join sent again, as bcd join sends an UNAVAILABLE one: %v", err)
	}
	p, err := joinwire.VerifyResponse(keys.JoinSigningKey(), resp)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := joinwire.ParseCertificatePEM(p.Certificate)
	if err != nil {
		t.Fatal(err)
	}
	if !key.PublicKey.Equal(cert.PublicKey) || cert.Subject.CommonName != node {
		t.Errorf("the answer certifies %v for %q, want the request's key for %q", cert.PublicKey, cert.Subject.CommonName, node)
	}
}

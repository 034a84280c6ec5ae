package registry

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/better-compute/better-compute/agent/session"
	"github.com/better-compute/better-compute/proto"
	"github.com/better-compute/better-compute/registry/store"
	"github.com/better-compute/better-compute/registry/store/etcdtest"
	"github.com/better-compute/better-compute/registry/workflow"
)

// TestRamdiskSessionEnd: a ramdisk's join admitted is no session yet; its real session
// (QUIC, through the agent endpoint) that its agent closes is recorded as ended, when it ended, and one that comes back is
// live again; the registry's own stop records no end but when it asked its agents back
// by (the end of its stream), so after a restart the join log gives the ramdisk its
// reconnect time from the new run's start or that moment, whichever is later, not a gone
// ramdisk. On a bbolt registry and on a replica on etcd.
func TestRamdiskSessionEnd(t *testing.T) {
	backends := map[string]func(t *testing.T) Config{
		"bbolt": func(*testing.T) Config { return Config{} },
		"etcd": func(t *testing.T) Config {
			cluster := etcdtest.Start(t)
			return Config{Store: StoreConfig{Backend: "etcd", EtcdEndpoints: cluster.Endpoints}, KEKFile: filepath.Join(t.TempDir(), "kek")}
		},
	}
	for name, config := range backends {
		t.Run(name, func(t *testing.T) {
			cfg := config(t)
			f := serveBusy(t, cfg)
			f.populate()
			const node = "nd_ramdisk"
			creds, err := f.join(node, "ramdisk", f.mint(store.TokenRamdisk, node))
			if err != nil {
				t.Fatal(err)
			}
			a := f.newAgent(node, creds)
			presence := func(r *Registry) workflow.Presence {
				p, err := r.plane.joins.Presence(context.Background(), node, "ramdisk")
				if err != nil {
					t.Fatal(err)
				}
				return p
			}

			// The join admitted is recorded as the ramdisk's join too; a session's opening
			// is recorded once the endpoint holds it.
			admitted := presence(f.r)
			if !admitted.Current || admitted.Live {
				t.Errorf("the ramdisk's join admitted, no session yet: %+v, want it current, not live", admitted)
			}
			opened := func(since time.Time) func() bool {
				return func() bool {
					p := presence(f.r)
					return f.r.plane.ep.Connected(node, proto.RoleRamdisk) && p.Live && p.JoinedAt.After(since)
				}
			}
			end := a.session(t.Context(), a.start())
			f.wait("the ramdisk's session", opened(admitted.JoinedAt))
			joined := presence(f.r).JoinedAt
			before := time.Now()
			end()
			f.wait("the end of the ramdisk's session is recorded", func() bool { return presence(f.r).Recorded })
			if p := presence(f.r); p.Live || !p.JoinedAt.Equal(joined) || p.EndedAt.Before(before) || p.EndedAt.After(time.Now()) {
				t.Errorf("the session the ramdisk closed: %+v, want it ended after %v", p, before)
			}

			defer a.session(t.Context(), a.start())()
			f.wait("the ramdisk's new session", opened(joined))
			joined = presence(f.r).JoinedAt

			// The registry stops with the session open, asking its one agent back at once
			// (the stream of one agent ends moments after the stop), and starts again on
			// another port the agent does not know: it does not come back.
			stopping := time.Now()
			if err := f.r.Close(); err != nil {
				t.Fatal(err)
			}
			stopped := time.Now()
			cfg.DataDir = f.dir
			restarted := newTestRegistry(t, cfg)
			p := presence(restarted)
			if p.Live || p.Recorded || !p.JoinedAt.Equal(joined) {
				t.Errorf("after the registry's restart: %+v, want an unrecorded end", p)
			}
			// Back by the stream's end and three times the least re-slot spread, a
			// second (proto.ReslotSpread): a return refused is tried again within it, up
			// to three times.
			if p.ReturnBy.Before(stopping.Add(3*time.Second)) || p.ReturnBy.After(stopped.Add(4*time.Second)) {
				t.Errorf("after the registry's restart, the ramdisk was asked back by %v, want the end of the stop's stream and three seconds, between three seconds after %v and four after %v", p.ReturnBy, stopping, stopped)
			}
			want := restarted.holder.Started
			if p.ReturnBy.After(want) {
				want = p.ReturnBy
			}
			if !p.EndedAt.Equal(want) {
				t.Errorf("after the registry's restart, the session ended at %v, want at %v: the new run's start or the return asked, whichever is later", p.EndedAt, want)
			}
		})
	}
}

// TestReconnectGraceCoversTheAgentsReturn: an agent learns within its keep-alive period
// that its session is gone, and tries again within its longest backoff: the reconnect
// grace a workflow gives a ramdisk must hold both, with room for the try's handshake, or
// a ramdisk on its way back would be booted again.
func TestReconnectGraceCoversTheAgentsReturn(t *testing.T) {
	if need := session.DefaultKeepAlive + session.DefaultMaxBackoff; workflow.ReconnectGrace <= need {
		t.Errorf("reconnect grace %v, want more than the keep-alive period and the longest backoff, %v", workflow.ReconnectGrace, need)
	}
}

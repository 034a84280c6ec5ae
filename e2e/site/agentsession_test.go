package site

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/better-compute/better-compute/registry/api"
	"github.com/better-compute/better-compute/testkit"
)

// TestSitesShowWhetherTheirAgentIsConnected: sites list and sites inventory say a
// site's agent never connected, then connected since its session opened, then, once
// `bcd site` stopped, disconnected and when it was last seen; the table's AGENT column
// says the same. A tenant's credential gets neither: sites are the platform's.
func TestSitesShowWhetherTheirAgentIsConnected(t *testing.T) {
	work := t.TempDir()
	reg := testkit.StartRegistry(t, t.TempDir(), "--agent-listen", "127.0.0.1:0")
	admin := reg.AdminConfig
	testkit.JSON(t, admin, nil, "sites", "create", "rack-a")
	agent := func() api.SiteAgent { return listedAgent(t, admin) }
	// inventory checks that sites inventory says what sites list said last.
	inventory := func(want api.SiteAgent) {
		t.Helper()
		var inv api.SiteInventory
		testkit.JSON(t, admin, &inv, "sites", "inventory", "rack-a")
		if s := inv.Session; s == nil || s.ID != want.ID || s.Connected != want.Connected || !s.Since.Equal(want.Since) || !s.LastSeen.Equal(want.LastSeen) {
			t.Errorf("sites inventory shows the agent %+v, sites list %+v", inv.Session, want)
		}
	}
	table := func() string {
		t.Helper()
		res := testkit.CLI(t, admin, "sites", "list")
		if res.Code != 0 {
			t.Fatalf("sites list: exit %d\n%s", res.Code, res.Stderr)
		}
		return res.Stdout
	}
	if a := agent(); a.ID != "rack-a" || a.Connected || !a.Since.IsZero() || !strings.Contains(table(), "never connected") {
		t.Fatalf("before its agent joined, the site shows %+v:\n%s", a, table())
	} else {
		inventory(a)
	}

	sa := startSiteAgent(t, reg, work, map[string]any{"dir": filepath.Join(work, "cache")})
	waitFor(t, "rack-a's agent connected", func() bool { return agent().Connected })
	up := agent()
	if up.Since.IsZero() || up.LastSeen.Before(up.Since) || !strings.Contains(table(), " connected ") {
		t.Errorf("a connected agent shows %+v:\n%s", up, table())
	}
	inventory(up)

	sa.stop()
	waitFor(t, "rack-a's agent disconnected", func() bool { return !agent().Connected })
	down := agent()
	if !down.Since.Equal(up.Since) || !down.LastSeen.After(up.LastSeen) || !strings.Contains(table(), "disconnected") {
		t.Errorf("after bcd site stopped, the site shows %+v (connected it showed %+v):\n%s", down, up, table())
	}
	inventory(down)

	tenant := filepath.Join(work, "acme.conf")
	testkit.JSON(t, admin, nil, "tenants", "create", "acme")
	testkit.JSON(t, admin, nil, "credentials", "create", "--tenant", "acme", "--actions", "compute:sites:manage,compute:nodes:read", "--out", tenant)
	for _, args := range [][]string{{"sites", "list"}, {"sites", "inventory", "rack-a"}} {
		res := testkit.CLI(t, tenant, append(args, "--format", "json")...)
		if out := res.Stdout + res.Stderr; res.Code == 0 || !strings.Contains(out, "FORBIDDEN") || strings.Contains(out, "connected") || strings.Contains(out, "lastSeen") {
			t.Errorf("a tenant's %v: exit %d\n%s", args, res.Code, out)
		}
	}
}

// TestSiteAgentGoneWithItsRegistry: a registry killed while it held a site agent's
// session never records the session's end. When the agent is gone too by the time the
// registry is back (it stopped while the registry was down), the restarted registry
// says the site's agent is disconnected, last seen at its session's hello: the session
// was that registry run's, and a new run holds none of the old one's sessions.
func TestSiteAgentGoneWithItsRegistry(t *testing.T) {
	work, dataDir := t.TempDir(), t.TempDir()
	reg := testkit.StartRegistry(t, dataDir, "--agent-listen", "127.0.0.1:0")
	admin := reg.AdminConfig
	testkit.JSON(t, admin, nil, "sites", "create", "rack-a")
	agent := func() api.SiteAgent { return listedAgent(t, admin) }
	sa := startSiteAgent(t, reg, work, map[string]any{"dir": filepath.Join(work, "cache")})
	waitFor(t, "rack-a's agent connected", func() bool { return agent().Connected })
	up := agent()

	reg.Kill()
	sa.stop()
	testkit.StartRegistry(t, dataDir, "--agent-listen", reg.AgentEndpoint)
	if a := agent(); a.Connected || !a.Since.Equal(up.Since) || !a.LastSeen.Equal(up.LastSeen) {
		t.Errorf("after its registry was killed and the agent stopped, the restarted registry shows rack-a's agent %+v (before the kill %+v)", a, up)
	}
}

// listedAgent is the agent of the one site sites list shows through admin.
func listedAgent(t *testing.T, admin string) api.SiteAgent {
	t.Helper()
	var list api.SiteList
	testkit.JSON(t, admin, &list, "sites", "list")
	if len(list.Sites) != 1 || list.Sites[0].Agent == nil {
		t.Fatalf("sites list shows no agent: %+v", list.Sites)
	}
	return *list.Sites[0].Agent
}

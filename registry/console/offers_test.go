package console_test

import (
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/better-compute/better-compute/registry/api"
	"github.com/better-compute/better-compute/testkit"
)

// TestNodePageOffersWhatTheNodeTakes: a node's page offers the requests its state takes
// now (metal.get's requests, the lifecycle table's) and no other, beside the revocation
// of its agents' certificates. A node whose enrollment waits for its site's agent takes
// only cancel; cancelled, it is failed and takes retry, release and retire, of which the
// console offers release. A cancel posted to the failed node anyway, as a stale page
// would, is the API's INVALID_STATE and changes nothing. Before, every page offered
// deploy, release and cancel whatever the node's state.
func TestNodePageOffersWhatTheNodeTakes(t *testing.T) {
	reg, acme, acmeNode, _ := twoTenants(t)
	b := newClient(t, reg)
	b.signIn(acme)
	offers := func(want ...string) {
		t.Helper()
		var v api.NodeView
		testkit.JSON(t, acme, &v, "nodes", "get", acmeNode.ID)
		p := b.get("/ui/nodes/" + acmeNode.ID)
		var got []string
		for _, a := range []string{"deploy", "release", "cancel", "revoke-certificates"} {
			if strings.Contains(p.body, `id="action-`+a+`"`) {
				got = append(got, a)
			}
		}
		if !slices.Equal(got, want) {
			t.Errorf("the page of the node, %s and taking %v, offers %v, want %v", v.State, v.Requests, got, want)
		}
	}
	var v api.NodeView
	testkit.JSON(t, acme, &v, "nodes", "get", acmeNode.ID)
	if v.State != "enrolling" || !slices.Equal(v.Requests, []string{"cancel"}) {
		t.Fatalf("a node enrolling: %s, takes %v, want [cancel]", v.State, v.Requests)
	}
	offers("cancel", "revoke-certificates")

	testkit.JSON(t, acme, nil, "nodes", "cancel", acmeNode.ID)
	for deadline := time.Now().Add(30 * time.Second); v.State != api.NodeFailed; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the cancelled node is %s, not failed", v.State)
		}
		testkit.JSON(t, acme, &v, "nodes", "get", acmeNode.ID)
	}
	if !slices.Equal(v.Requests, []string{"retry", "release", "retire", "rescue"}) {
		t.Errorf("a failed node takes %v, want [retry release retire rescue]", v.Requests)
	}
	if out := testkit.CLI(t, acme, "nodes", "get", acmeNode.ID).Stdout; !strings.Contains(out, "takes now: retry, release, retire, rescue (`nodes REQUEST "+acmeNode.ID+"`)") {
		t.Errorf("nodes get does not say what the node takes:\n%s", out)
	}
	offers("release", "revoke-certificates")

	path := "/ui/nodes/" + acmeNode.ID + "/cancel"
	p := b.post(path, url.Values{"csrf": {b.csrf(path)}})
	if p.status == http.StatusSeeOther || !strings.Contains(p.body, "INVALID_STATE") {
		t.Errorf("a cancel posted to a failed node (%d):\n%s", p.status, p.body)
	}
	if n := nodeOf(t, reg, "acme", acmeNode.ID); n.State != api.NodeFailed || n.Rev != v.Rev {
		t.Errorf("the refused cancel changed the node: %s, rev %d (was %d)", n.State, n.Rev, v.Rev)
	}
}

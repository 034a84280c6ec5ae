package console

import (
	"slices"
	"testing"
	"time"

	"github.com/better-compute/better-compute/registry/api"
)

// TestOfferedRevocationFollowsTheIdentity: the revocation of a node's agents'
// certificates is offered until the node's identity is revoked for good, as
// metal.revokeCertificates takes it, whatever the state: a retiring node past its
// metal.revokeIdentity step is not offered it (its workflow takes only cancel), and a
// node of any state with its identity intact is. Before, the console offered it by
// state, to a retiring node the API refuses.
func TestOfferedRevocationFollowsTheIdentity(t *testing.T) {
	names := func(node api.NodeView) (out []string) {
		for _, a := range offered(node) {
			out = append(out, a.Name)
		}
		return out
	}
	node := func(state string, requests []string, revokedAt time.Time) api.NodeView {
		return api.NodeView{Node: api.Node{State: state, IdentityRevokedAt: revokedAt}, Requests: requests}
	}
	revoked := time.Date(2026, 12, 3, 6, 0, 0, 0, time.UTC)
	for _, c := range []struct {
		node api.NodeView
		want []string
	}{
		{node("retiring", []string{"cancel"}, time.Time{}), []string{actionCancel, actionRevoke}},
		{node("retiring", []string{"cancel"}, revoked), []string{actionCancel}},
		{node("retired", []string{}, revoked), nil},
		{node("active", []string{"release", "retire", "rescue", "remediate"}, time.Time{}), []string{actionRelease, actionRevoke}},
	} {
		if got := names(c.node); !slices.Equal(got, c.want) {
			t.Errorf("a %s node (identity revoked at %v) is offered %v, want %v", c.node.State, c.node.IdentityRevokedAt, got, c.want)
		}
	}
}

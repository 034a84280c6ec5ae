package cli_test

import (
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/better-compute/better-compute/registry/api"
	"github.com/better-compute/better-compute/registry/store"
	"github.com/better-compute/better-compute/testkit"
)

// TestAStateRefusalSaysWhereAndTheTenantsCommand: a request the node's state refuses
// (INVALID_STATE: a deploy of a node whose deploy runs, a release of a ready node) is at
// nodeId, the request's field that named the node, and the command it suggests, made by
// the root tenant's admin for tenant acme, carries --tenant acme, so that pasted as it is
// it acts on acme's node; acme's own credential is told the command without the flag.
// Before, the refusal had no path, and `nodes cancel ID` pasted by the root admin was
// NOT_FOUND in the root tenant.
func TestAStateRefusalSaysWhereAndTheTenantsCommand(t *testing.T) {
	reg := testkit.StartRegistry(t, "")
	admin := reg.AdminConfig
	configs := acmeAndBeta(t, admin, "compute:nodes:manage,compute:nodes:read,compute:profiles:read")
	testkit.JSON(t, admin, nil, "profiles", "create", writeDoc(t, joinsAsNode), "--tenant", "acme")
	var busy, ready store.Node
	testkit.JSON(t, configs["acme"], &busy, "nodes", "enroll", "--pool", "gpu", "--mac", "52:54:00:00:00:01", "--bmc-driver", "redfish", "--bmc-address", "https://127.0.0.2")
	testkit.JSON(t, configs["acme"], &ready, "nodes", "enroll", "--pool", "gpu", "--mac", "52:54:00:00:00:02", "--bmc-driver", "redfish", "--bmc-address", "https://127.0.0.2")
	answeringSite(t, reg, "rack-a")
	waitState(t, configs["acme"], busy.ID, store.NodeReady)
	before := waitState(t, configs["acme"], ready.ID, store.NodeReady)
	// The deploy waits for an installed OS that never joins (2 minutes): its workflow runs.
	testkit.JSON(t, admin, nil, "nodes", "deploy", busy.ID, "--profile", "joins-as-node", "--tenant", "acme")

	deployAgain := []string{"nodes", "deploy", busy.ID, "--profile", "joins-as-node"}
	cancel := "`nodes cancel " + busy.ID + "`"
	e := testkit.Fails(t, configs["acme"], deployAgain...)
	if e.Code != "INVALID_STATE" || e.Details.Path != "nodeId" || e.Details.Reason != store.NodeDeploying || !strings.Contains(e.Message, cancel) {
		t.Errorf("acme deploying its deploying node: %+v, want INVALID_STATE at nodeId suggesting %s", e, cancel)
	}
	e = testkit.Fails(t, admin, append(deployAgain, "--tenant", "acme")...)
	forAcme := "`nodes cancel " + busy.ID + " --tenant acme`"
	if e.Code != "INVALID_STATE" || e.Details.Path != "nodeId" || !strings.Contains(e.Message, forAcme) {
		t.Fatalf("root deploying acme's deploying node: %+v, want INVALID_STATE at nodeId suggesting %s", e, forAcme)
	}
	if res := testkit.CLI(t, admin, append(deployAgain, "--tenant", "acme")...); res.Code != 1 || !strings.Contains(res.Stderr, "  path: nodeId\n") {
		t.Errorf("the refusal as text: exit %d\n%s", res.Code, res.Stderr)
	}
	// The command suggested, pasted as it is, cancels acme's deploy.
	pasted := regexp.MustCompile("`(nodes cancel [^`]*)`").FindStringSubmatch(e.Message)
	if res := testkit.CLI(t, admin, strings.Fields(pasted[1])...); res.Code != 0 {
		t.Errorf("%s: exit %d\n%s%s", pasted[1], res.Code, res.Stdout, res.Stderr)
	}
	waitState(t, configs["acme"], busy.ID, store.NodeFailed)

	// A release of a ready node: the refusal is at nodeId, and changes nothing.
	e = testkit.Fails(t, admin, "nodes", "release", ready.ID, "--tenant", "acme")
	if e.Code != "INVALID_STATE" || e.Details.Path != "nodeId" || e.Details.Reason != store.NodeReady {
		t.Errorf("root releasing acme's ready node: %+v, want INVALID_STATE at nodeId reason ready", e)
	}
	var after store.Node
	testkit.JSON(t, admin, &after, "nodes", "get", ready.ID, "--tenant", "acme")
	if after.State != store.NodeReady || after.Rev != before.Rev {
		t.Errorf("the refused release changed the node: %+v", after)
	}
}

// TestADeployOfAnotherTenantsPrivateProfileSaysHowToReachIt: the root tenant's admin
// deploying, on tenant acme's node, a profile that only a tenant's private row holds (root's
// own, beta's) is told how acme's deploy can reach it, and each way it names works as
// pasted: make root's public and deploy it by its id, or copy beta's into acme. Before,
// it was told to add --tenant root, which looks for the node in root's tenant: NOT_FOUND
// at nodeId, a loop with no way out.
func TestADeployOfAnotherTenantsPrivateProfileSaysHowToReachIt(t *testing.T) {
	reg := testkit.StartRegistry(t, "")
	admin := reg.AdminConfig
	configs := acmeAndBeta(t, admin, "compute:nodes:manage,compute:nodes:read")
	var first, second store.Node
	testkit.JSON(t, configs["acme"], &first, "nodes", "enroll", "--pool", "gpu", "--mac", "52:54:00:00:00:01", "--bmc-driver", "redfish", "--bmc-address", "https://127.0.0.2")
	testkit.JSON(t, configs["acme"], &second, "nodes", "enroll", "--pool", "gpu", "--mac", "52:54:00:00:00:02", "--bmc-driver", "redfish", "--bmc-address", "https://127.0.0.2")
	answeringSite(t, reg, "rack-a")
	waitState(t, configs["acme"], first.ID, store.NodeReady)
	waitState(t, configs["acme"], second.ID, store.NodeReady)
	testkit.JSON(t, admin, nil, "profiles", "create", writeDoc(t, joinsAsNode))
	testkit.JSON(t, admin, nil, "profiles", "create", writeDoc(t, strings.Replace(joinsAsNode, `"joins-as-node"`, `"beta-host"`, 1)), "--tenant", "beta")
	command := func(message, starts string) []string {
		t.Helper()
		m := regexp.MustCompile("`(" + starts + " [^`]*)`").FindStringSubmatch(message)
		if m == nil {
			t.Fatalf("%q names no `%s ...`", message, starts)
		}
		return strings.Fields(m[1])
	}

	// Root's private profile: make it public, as the refusal says, and acme deploys it.
	e := testkit.Fails(t, admin, "nodes", "deploy", first.ID, "--profile", "joins-as-node", "--tenant", "acme")
	if e.Code != "NOT_FOUND" || e.Details.Path != "profileId" || strings.Contains(e.Message, "add --tenant root") {
		t.Errorf("root's private profile on acme's node: %+v, want NOT_FOUND at profileId without add --tenant root", e)
	}
	testkit.JSON(t, admin, nil, command(e.Message, "profiles update")...)
	testkit.JSON(t, admin, nil, "nodes", "deploy", first.ID, "--profile", "joins-as-node", "--tenant", "acme")

	// Beta's private profile: copy it into acme, as the refusal says, and acme deploys the copy.
	e = testkit.Fails(t, admin, "nodes", "deploy", second.ID, "--profile", "beta-host", "--tenant", "acme")
	if e.Code != "NOT_FOUND" || e.Details.Path != "profileId" || strings.Contains(e.Message, "add --tenant beta") || !strings.Contains(e.Message, "beta/beta-host") {
		t.Errorf("beta's private profile on acme's node: %+v, want NOT_FOUND at profileId naming beta/beta-host", e)
	}
	var shown api.ProfileView
	testkit.JSON(t, admin, &shown, command(e.Message, "profiles get")...)
	create := command(e.Message, "profiles create")
	create[slices.Index(create, "FILE")] = writeDoc(t, string(shown.Document))
	testkit.JSON(t, admin, nil, create...)
	testkit.JSON(t, admin, nil, "nodes", "deploy", second.ID, "--profile", "beta-host", "--tenant", "acme")
}

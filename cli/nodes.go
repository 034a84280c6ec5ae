package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	flag "github.com/spf13/pflag"

	"github.com/better-compute/better-compute/cmdline"
	"github.com/better-compute/better-compute/proto"
	"github.com/better-compute/better-compute/registry/api"
)

var nodeCommands = []command{{
	path: "nodes enroll",
	usage: "--pool P (--mac M[,M] | --product-uuid U) --bmc-driver D --bmc-address A [--bmc-credential secret://...] " +
		"[--hardware-profile H] [--label k=v ...] [--driver concern=driver ...] [--tenant T]",
	summary: "enroll a machine in a pool with its MACs or product UUID and its BMC",
	long: "enroll a machine; its driver bindings come from the BMC, the hardware profile and the " +
		"overrides. The BMC's address must be an IP address in the site's BMC networks; its " +
		"credential a `secret://` reference to the tenant's secret, or `secret://platform/NAME` " +
		"(the root tenant's, root-tenant credentials only) (docs/nodes.md). A node is kept for ever, a retired one too: " +
		"one the tenant enrolls past its bound (serve `--tenant-nodes`) is `INVALID_STATE` reason `quota`, one a root-tenant " +
		"credential enrolls for it is not refused (docs/security.md#what-a-tenant-may-hold-in-the-store)",
	define: func(fs *flag.FlagSet) func(x *exec) error {
		tenant := tenantFlag(fs)
		req := api.EnrollRequest{Labels: map[string]string{}, Drivers: map[string]api.Binding{}}
		fs.StringVar(&req.Pool, "pool", "", "the pool (required)")
		macs := fs.String("mac", "", "the machine's boot MACs, comma-separated")
		fs.StringVar(&req.ProductUUID, "product-uuid", "", "the machine's SMBIOS product UUID")
		fs.StringVar(&req.BMC.Driver, "bmc-driver", "", "the BMC's driver: redfish or qmp (required)")
		fs.StringVar(&req.BMC.Address, "bmc-address", "", "the BMC's address (required)")
		fs.StringVar(&req.BMC.CredentialRef, "bmc-credential", "", "a secret:// reference to the BMC's credential, never the secret")
		fs.StringVar(&req.HardwareProfile, "hardware-profile", "", "the node's hardware profile (default: the pool's)")
		fs.Func("label", "a label k=v (repeat)", keyValue("label", func(k, v string) { req.Labels[k] = v }))
		fs.Func("driver", "a per-node driver binding concern=driver (repeat)", keyValue("driver", func(k, v string) { req.Drivers[k] = api.Binding{Driver: v} }))
		return func(x *exec) error {
			req.TenantID, req.MACs = *tenant, csv(*macs)
			var out api.Node
			if err := x.call("metal.enroll", req, &out); err != nil {
				return err
			}
			x.print(out, func(w *tabwriter.Writer) { nodeTable(w, []api.Node{out}) })
			return nil
		}
	},
}, {
	path:    "nodes update-bmc",
	usage:   "ID [--bmc-driver D] [--bmc-address A] [--bmc-credential secret://...] [--tenant T]",
	summary: "bind a node's BMC again: what is given replaces its driver, address or credential reference (\"\" removes it)",
	long: "bind a node's BMC again under the rules of enrollment; a tenant's change drops a " +
		"credential the platform bound (`secret://platform/...`), which only root binds again",
	nargs: 1,
	define: func(fs *flag.FlagSet) func(x *exec) error {
		tenant := tenantFlag(fs)
		req := api.UpdateBMCRequest{}
		fs.StringVar(&req.Driver, "bmc-driver", "", "the BMC's driver: redfish or qmp")
		fs.StringVar(&req.Address, "bmc-address", "", "the BMC's address")
		fs.Func("bmc-credential", "a secret:// reference to the BMC's credential, never the secret", func(v string) error {
			req.CredentialRef = &v
			return nil
		})
		return func(x *exec) error {
			req.TenantID, req.NodeID = *tenant, x.args[0]
			var out api.Node
			if err := x.call("metal.updateBmc", req, &out); err != nil {
				return err
			}
			x.print(out, func(w *tabwriter.Writer) { nodeTable(w, []api.Node{out}) })
			return nil
		}
	},
}, {
	path:    "nodes confirm-mac",
	usage:   "ID --mac M [--force] [--tenant T]",
	summary: "bind the MAC PXE discovery proposed for a node enrolled by its product UUID alone (metal.confirmMac)",
	long: "bind the MAC PXE discovery proposed (`nodes get` shows it) for a node enrolled by its " +
		"product UUID alone; a pool with `policy.trustProvisioningNetwork` binds it at once. A MAC " +
		"the machine's BMC does not list among its NICs is refused unless `--force` (docs/nodes.md)",
	nargs: 1,
	define: func(fs *flag.FlagSet) func(x *exec) error {
		tenant := tenantFlag(fs)
		mac := fs.String("mac", "", "the proposed `MAC`, as nodes get shows it (required)")
		force := fs.Bool("force", false, "bind it although the machine's BMC does not list it among its NICs (a boot NIC the BMC does not see)")
		return func(x *exec) error {
			var out api.Node
			req := api.ConfirmMACRequest{TenantID: *tenant, NodeID: x.args[0], MAC: *mac, Force: *force}
			if err := x.call("metal.confirmMac", req, &out); err != nil {
				return err
			}
			x.print(out, func(w *tabwriter.Writer) { nodeTable(w, []api.Node{out}) })
			return nil
		}
	},
}, {
	path:    "nodes get",
	usage:   "ID [--tenant T]",
	summary: "show one node: state, last transition and workflow, where it failed from and why, last remediation and why, identity epoch and the last revocation of its agents' certificates, BMC, driver bindings, host section, last disk wipe",
	long: "one node: state, its last transition and workflow, its last remediation and why, its " +
		"identity epoch (`identityEpoch`: the installation its agents' certificates must name) and " +
		"when it was raised (`identityEpochAt`), the last revocation of its agents' certificates (`agentsRevoked`: epoch, when, reason, by which credential, the workflow it failed), BMC, " +
		"driver bindings, PXE discovery's MAC proposal or the MAC it bound, the state it failed " +
		"from and why, a retire's unverified wipe, host section; its agent's applied NodeSpec " +
		"generation and last host convergence; the requests it takes now (`requests`, the lifecycle table's: every other is INVALID_STATE); the last disk wipe of its last workflow and whether " +
		"the registry attested it; what its inventory warns of (`warnings`: a disk hiding capacity from a wipe)",
	nargs: 1,
	define: func(fs *flag.FlagSet) func(x *exec) error {
		tenant := tenantFlag(fs)
		return func(x *exec) error {
			var out api.NodeView
			if err := x.call("metal.get", api.NodeKey{TenantID: *tenant, NodeID: x.args[0]}, &out); err != nil {
				return err
			}
			x.print(out, func(w *tabwriter.Writer) { nodeDetail(w, out); agentDetail(w, out.Agent); wipeDetail(w, out.Wipe) })
			return nil
		}
	},
}, {
	path:    "nodes list",
	usage:   "[--pool P] [--state S] [--tenant T] [--cursor C]",
	summary: "list the tenant's nodes, or one pool's, or those in one state, 200 a page",
	define: func(fs *flag.FlagSet) func(x *exec) error {
		tenant := tenantFlag(fs)
		pool := fs.String("pool", "", "list only this pool's nodes")
		state := new(string)
		fs.Var(cmdline.OneOf(state, api.NodeStates()), "state", "list only the nodes in this state ("+strings.Join(api.NodeStates(), ", ")+")")
		cursor := fs.String("cursor", "", "resume after a previous page")
		return func(x *exec) error {
			var out api.NodeList
			req := api.ListNodesRequest{TenantID: *tenant, Pool: *pool, State: *state, ListRequest: api.ListRequest{Cursor: *cursor}}
			if err := x.call("metal.list", req, &out); err != nil {
				return err
			}
			x.print(out, func(w *tabwriter.Writer) {
				nodeTable(w, out.Nodes)
				nextPage(w, out.NextCursor)
			})
			return nil
		}
	},
}, {
	path:    "nodes deploy",
	usage:   "ID --profile P [--profile-version N] [--wait [--progress-every D]] [--tenant T]",
	summary: "deploy a profile on a ready node; --wait follows the workflow step by step until it ends",
	long: "deploy a profile on a `ready` node; `--wait` prints each step's state changes and " +
		"progress, and exits 1 if the workflow fails; while no step changes, it says on stderr which " +
		"step still runs and for how long, every `--progress-every`. An `active` node is refused " +
		"(`INVALID_STATE`, at `nodeId`): release it first. A profile another tenant holds " +
		"privately is `NOT_FOUND` at `profileId`, and a root credential deploying for a tenant is " +
		"told how that tenant's deploy reaches it: public, or a copy (docs/nodes.md#deploying)",
	nargs: 1,
	define: func(fs *flag.FlagSet) func(x *exec) error {
		tenant := tenantFlag(fs)
		prof := fs.String("profile", "", "the profile to deploy (required)")
		version := new(int)
		fs.Var(cmdline.Decimal(version, 0), "profile-version", "the profile version (default: the latest)")
		wait := waitFlags(fs)
		return func(x *exec) error {
			var out api.DeployStarted
			req := api.DeployRequest{TenantID: *tenant, NodeID: x.args[0], ProfileID: *prof, ProfileVersion: *version}
			if err := x.call("metal.deploy", req, &out); err != nil {
				return err
			}
			if !wait.on {
				x.print(out, func(w *tabwriter.Writer) {
					fmt.Fprintf(w, "deploying %s@%d on %s: workflow %s\n", out.Profile.ID, out.Profile.Version, out.NodeID, out.WorkflowID)
				})
				return nil
			}
			return x.follow(wait.every, *tenant, out.WorkflowID, out.NodeID,
				fmt.Sprintf("deploying %s@%d on node %s", out.Profile.ID, out.Profile.Version, out.NodeID))
		}
	},
}}

// waiting is how a command that starts a workflow follows it: --wait, and how often,
// while no step changes, it says which step still runs (--progress-every).
type waiting struct {
	on    bool
	every time.Duration
}

// waitFlags declares --wait and --progress-every on fs.
func waitFlags(fs *flag.FlagSet) *waiting {
	w := &waiting{every: defaultProgressEvery}
	fs.BoolVar(&w.on, "wait", false, "follow the workflow until it ends; exit 1 if it fails, or if interrupted (the workflow goes on)")
	fs.Func("progress-every", fmt.Sprintf("with --wait, how often to say on stderr which step still runs and for how long, while no step changes (a `DURATION` of at least %v; default %v)", minProgressEvery, defaultProgressEvery), func(v string) error {
		d, err := time.ParseDuration(v)
		if err != nil || d < minProgressEvery {
			return fmt.Errorf("--progress-every takes a duration of at least %v, such as 30s or 2m, not %q", minProgressEvery, v)
		}
		w.every = d
		return nil
	})
	return w
}

// defaultProgressEvery and minProgressEvery are --progress-every's default and least
// value: a 15-minute wait.agentJoined says it still runs 30 times at most.
const (
	defaultProgressEvery = 30 * time.Second
	minProgressEvery     = time.Second
)

// lifecycleCommands are the node lifecycle's requests, one command each.
var lifecycleCommands = []struct {
	verb, method, summary, long string
}{
	{"inspect", "metal.inspect", "inspect a ready node: boot its ramdisk and refresh its inventory (metal-inspect)", "`ready` -> `inspecting` (metal-inspect@2: boot the ramdisk, refresh the inventory) -> `ready` (docs/nodes.md)"},
	{"commission", "metal.commission", "commission a ready node: GPU diagnostics, a quick wipe, power off (metal-commission)", "`ready` -> `commissioning` (metal-commission@1: GPU diagnostics, quick wipe, power off) -> `ready`"},
	{"release", "metal.release", "release an active (or failed) node: wipe its disks and power it off, then it is ready (metal-release)", "`active` or `failed` -> `releasing` (metal-release@1, its wipe in the mode given, quick by default) -> `ready`, or `failed` with `UNVERIFIED_WIPE` when the registry did not attest the wipe"},
	{"retire", "metal.retire", "retire a node for good: crypto-erase, power off, revoke its identity (metal-retire)", "`ready`, `active`, `rescue` or `failed` -> `retiring` (metal-retire@1) -> `retired`: identity revoked, nothing but reading it any more. A machine whose ramdisk never boots does not hold the retire up: its wipe fails at once (`UNAVAILABLE`, `no-ramdisk`) and is recorded as unverified"},
	{"rescue", "metal.rescue", "boot an active or failed node into its ramdisk for repairs (metal-rescue)", "`active` -> `rescue` (metal-rescue@1: the machine runs its ramdisk); `UNSUPPORTED` on a pool with `agent: none`, which offers no rescue. " +
		"`failed` -> `rescue` -> `failed` again, its failure kept and its ramdisk running, to mend what failed it there (a disk hiding capacity from a wipe), then `nodes release ID` or `nodes retry ID` " +
		"(a rescue from `failed` that fails or is cancelled keeps the failure too, and its retry); `INVALID_STATE` on a pool with `agent: none`"},
	{"unrescue", "metal.unrescue", "boot a node in rescue back into its installed OS, then it is active (metal-unrescue)", "`rescue` -> (metal-unrescue@1: boot the disk, wait for the node's agent) -> `active`"},
	{"retry", "metal.retry", "run again the workflow a failed node failed in", "`failed` -> the workflow it failed in, again, with the same profile document"},
	{"cancel", "metal.cancel", "cancel a node's running workflow: its attempt is abandoned, its cleanup runs, the node fails (reason cancelled)", "stop a node's running workflow: the attempt is abandoned, its cleanup runs, the node is `failed` with reason `cancelled`"},
}

func init() {
	for _, lc := range lifecycleCommands {
		usage := "ID [--wait [--progress-every D]] [--tenant T]"
		if lc.verb == "release" {
			usage = "ID [--wipe none|quick|secure-erase|crypto-erase] [--wait [--progress-every D]] [--tenant T]"
		}
		nodeCommands = append(nodeCommands, command{path: "nodes " + lc.verb, usage: usage, summary: lc.summary, long: lc.long, nargs: 1,
			define: func(fs *flag.FlagSet) func(x *exec) error {
				tenant := tenantFlag(fs)
				wait := waitFlags(fs)
				req := api.TransitionRequest{}
				if lc.verb == "release" {
					fs.Var(cmdline.OneOf(&req.Wipe, proto.WipeModes), "wipe", "the disk wipe mode, replacing metal-release's quick: "+strings.Join(proto.WipeModes, ", "))
				}
				return func(x *exec) error {
					req.TenantID, req.NodeID = *tenant, x.args[0]
					var out api.TransitionStarted
					if err := x.call(lc.method, req, &out); err != nil {
						return err
					}
					return x.transitioned(lc.verb, *tenant, wait, out)
				}
			}})
	}
	nodeCommands = append(nodeCommands, command{path: "nodes remediate",
		usage:   "ID --profile remediate-reboot|remediate-gpu-reset [--reason R] [--wait [--progress-every D]] [--tenant T]",
		summary: "remediate an active node with a shipped remediation profile (metal.remediate); the reason is recorded on the node",
		long:    "`active` -> `remediating` (the remediation profile: a restart or a GPU power cycle, the host config again) -> `active`; the reason is recorded on the node. A pool's `policy.remediation.agentGoneAfter` starts `remediate-reboot` by itself (docs/nodes.md)",
		nargs:   1,
		define: func(fs *flag.FlagSet) func(x *exec) error {
			tenant := tenantFlag(fs)
			wait := waitFlags(fs)
			req := api.RemediateRequest{}
			fs.StringVar(&req.Profile, "profile", "", "the remediation profile: remediate-reboot or remediate-gpu-reset (required)")
			fs.StringVar(&req.Reason, "reason", "", "why, recorded on the node (at most 256 bytes; default: an operator asked)")
			return func(x *exec) error {
				req.TenantID, req.NodeID = *tenant, x.args[0]
				var out api.TransitionStarted
				if err := x.call("metal.remediate", req, &out); err != nil {
					return err
				}
				return x.transitioned("remediate", *tenant, wait, out)
			}
		}})
	nodeCommands = append(nodeCommands, command{path: "nodes revoke-identity",
		usage:   "ID [--reason R] [--tenant T]",
		summary: "revoke every certificate the node's agents hold now (installed OS and ramdisk), without retiring it; they join again with a new token",
		long: "revoke every certificate of the node's agents (its installed OS's `bcd node` and its ramdisk's) issued so far, and every copy of them: " +
			"the node's identity epoch moves, their sessions end, and hello, secrets, renewals, signed results, answers and reports are refused (`FORBIDDEN`, reason `revoked`); " +
			"the node's unused join tokens are deleted, and the revocation is recorded on the node and in its events with the reason. " +
			"A workflow of the node running at the epoch that moved, whose agents and join tokens are cut off, fails at once (`FORBIDDEN`, reason `agents-revoked`; the answer's `failedWorkflowId`, " +
			"and `failedWorkflowNext`, what works for its kind): `nodes retry ID` runs it again, but one that works with the installed OS (a remediation, an unrescue), " +
			"which holds no certificate the registry takes, only with that OS joining again (`failedWorkflowNext` says when) or after a redeploy. " +
			"The node keeps its state: its OS joins again with a token minted now (`tokens create --kind provisioned --node-id ID`, then `bcd join`), " +
			"or a redeploy installs it anew (docs/nodes.md)",
		nargs: 1,
		define: func(fs *flag.FlagSet) func(x *exec) error {
			tenant := tenantFlag(fs)
			req := api.RevokeNodeCertificatesRequest{}
			fs.StringVar(&req.Reason, "reason", "", "why, recorded on the node and in its events (at most 256 bytes; default: an operator asked)")
			return func(x *exec) error {
				req.TenantID, req.NodeID = *tenant, x.args[0]
				var out api.CertificatesRevoked
				if err := x.call("metal.revokeCertificates", req, &out); err != nil {
					return err
				}
				x.print(out, func(w *tabwriter.Writer) {
					revokedLines(w, "node "+out.NodeID+"'s agents", out,
						"better-compute tokens create --kind provisioned --node-id "+out.NodeID+", then bcd join with it on the machine (or redeploy it)")
				})
				return nil
			}
		}})
}

// revokedLines says what a revocation of whose certificates did, and the way back.
func revokedLines(w *tabwriter.Writer, whose string, out api.CertificatesRevoked, back string) {
	fmt.Fprintf(w, "revoked: every certificate of %s issued before %s (identity epoch now %d)\n", whose, out.RevokedAt.Format(time.RFC3339), out.IdentityEpoch)
	fmt.Fprintf(w, "reason: %s\n", out.Reason)
	fmt.Fprintf(w, "unused join tokens deleted: %d\n", out.JoinTokensDeleted)
	if out.FailedWorkflowID != "" {
		fmt.Fprintf(w, "failed workflow: %s (FORBIDDEN, %s: it ran at the epoch that moved, so its agents and join tokens were cut off); once the machine is trusted, %s\n",
			out.FailedWorkflowID, proto.ReasonAgentsRevoked, out.FailedWorkflowNext)
	}
	fmt.Fprintf(w, "to join again: %s\n", back)
}

// transitioned shows what a lifecycle request started, or follows its workflow with
// wait; a request that failed the node at once is the node's error.
func (x *exec) transitioned(verb, tenant string, wait *waiting, out api.TransitionStarted) error {
	n := out.Node
	if f := n.Failure; f != nil && out.WorkflowID == "" {
		// The request failed the node at once, starting nothing.
		e := *f.Error
		e.Message = fmt.Sprintf("node %s is failed (from %s): %s", n.ID, n.FailedFrom, e.Message)
		return &e
	}
	if !wait.on {
		x.print(out, func(w *tabwriter.Writer) { transitionLine(w, verb, out) })
		return nil
	}
	return x.follow(wait.every, tenant, out.WorkflowID, n.ID, fmt.Sprintf("%s: node %s is %s, running %s@%d", verb, n.ID, n.State, out.Profile.ID, out.Profile.Version))
}

// transitionLine says what a lifecycle request started.
func transitionLine(w *tabwriter.Writer, verb string, out api.TransitionStarted) {
	n := out.Node
	switch {
	case verb == "cancel":
		fmt.Fprintf(w, "cancelling workflow %s of node %s: its cleanup runs, then the node is failed\n", out.WorkflowID, n.ID)
	default:
		fmt.Fprintf(w, "node %s is %s: workflow %s runs %s@%d\n", n.ID, n.State, out.WorkflowID, out.Profile.ID, out.Profile.Version)
	}
}

var workflowCommands = []command{{
	path:    "workflows get",
	usage:   "ID [--tenant T]",
	summary: "show a workflow run: its steps with their state, attempts, errors and progress",
	long: "a workflow run: every step's state, tries, duration, error or progress, and for a " +
		"node-signed step (`disk.wipe`) `attested` or why not (docs/workflows.md)",
	nargs: 1,
	define: func(fs *flag.FlagSet) func(x *exec) error {
		tenant := tenantFlag(fs)
		return func(x *exec) error {
			var out api.WorkflowView
			if err := x.call("workflows.get", api.GetWorkflowRequest{TenantID: *tenant, ID: x.args[0]}, &out); err != nil {
				return err
			}
			x.print(out, func(w *tabwriter.Writer) { workflowTable(w, out) })
			return nil
		}
	},
}}

// keyValue parses a repeated k=v flag into set.
func keyValue(name string, set func(k, v string)) func(string) error {
	return func(s string) error {
		k, v, ok := strings.Cut(s, "=")
		if !ok || k == "" {
			return fmt.Errorf("--%s takes key=value, not %q", name, s)
		}
		set(k, v)
		return nil
	}
}

// follow prints each change of a workflow's steps until it ends, after the headline:
// one line per step state change (step, where it runs, state, duration) and per progress
// report, then the node's state and its warnings (a disk hiding capacity from a wipe). With --format json the lines go to stderr and the
// finished workflow to stdout. While no step changes for every, it says on stderr which
// steps still run and for how long (stillRunning), once each every. A failed workflow is
// the command's error: its failing step and the step's error; so is a node that failed
// at the workflow's end (an unverified wipe); so is an interrupt (stoppedFollowing).
func (x *exec) follow(every time.Duration, tenant, workflowID, nodeID, headline string) error {
	err := x.followRun(every, tenant, workflowID, nodeID, headline)
	if err != nil && x.ctx.Err() != nil {
		return stoppedFollowing(x, tenant, workflowID, nodeID)
	}
	return err
}

// stoppedFollowing is the error of a wait the operator interrupted: the call it cut off
// did not fail to reach the registry, and the workflow goes on there, so the error says
// so and how to watch or stop it, rather than to start the registry and try again (a
// request again would be refused while the workflow runs).
func stoppedFollowing(x *exec, tenant, workflowID, nodeID string) error {
	of := ""
	if tenant != "" {
		of = " --tenant " + tenant
	}
	return proto.Errorf(proto.Unavailable, "stopped following (%v): workflow %s goes on at the registry; "+
		"`workflows get %s%s` shows its steps, `nodes events %s --follow%s` follows it, `nodes cancel %s%s` stops it",
		context.Cause(x.ctx), workflowID, workflowID, of, nodeID, of, nodeID, of)
}

// lostFollowing is the error of a call that failed while following a workflow the
// command started (the registry stopped, or its address no longer answers): the workflow
// is the registry's to run whatever the call met, so the error says how to see it once
// the registry answers, not only to try again, which runs the request again.
func lostFollowing(err error, tenant, workflowID string) error {
	of := ""
	if tenant != "" {
		of = " --tenant " + tenant
	}
	e := *proto.AsError(err)
	e.Message += fmt.Sprintf("; workflow %s was started, and runs on at the registry: `workflows get %s%s` shows it once the registry answers", workflowID, workflowID, of)
	return amended{err: err, e: &e}
}

// amended is an error whose error object says more than err's (a next step), and that
// keeps the rest of what err carries (the Retry-After of a call refused for now).
type amended struct {
	err error
	e   *proto.Error
}

func (a amended) Error() string { return a.e.Error() }
func (a amended) Unwrap() error { return a.err }

// As gives the amended error object to whoever looks for one (proto.AsError).
func (a amended) As(target any) bool {
	if p, ok := target.(**proto.Error); ok {
		*p = a.e
		return true
	}
	return false
}

// followRun is follow until the workflow ends or a call fails.
func (x *exec) followRun(every time.Duration, tenant, workflowID, nodeID, headline string) error {
	c, err := x.client()
	if err != nil {
		return err
	}
	lines := textWriter{x.env.Stdout}
	if x.format == "json" {
		lines = textWriter{x.env.Stderr}
	}
	fmt.Fprintf(lines, "workflow %s: %s\n", workflowID, headline)
	seen := map[string]string{}
	quiet := time.NewTicker(every)
	defer quiet.Stop()
	var run api.WorkflowView
	for run.State == "" || run.State == api.RunRunning {
		req := api.GetWorkflowRequest{TenantID: tenant, ID: workflowID, AfterRev: run.Rev}
		next, err := watchSaying(x.ctx, c, req, quiet.C, func(now time.Time) { stillRunning(x.env.Stderr, run, now) })
		if err != nil {
			return lostFollowing(err, tenant, workflowID)
		}
		run = next
		for _, s := range run.Steps {
			key, line := s.Path(), stepLine(s)
			if s.State != api.StepPending && seen[key] != line {
				fmt.Fprintln(lines, line)
				seen[key] = line
				quiet.Reset(every)
			}
		}
	}
	var node api.NodeView
	if err := c.Call(x.ctx, "metal.get", api.NodeKey{TenantID: tenant, NodeID: nodeID}, &node); err != nil {
		return lostFollowing(err, tenant, workflowID)
	}
	fmt.Fprintf(lines, "workflow %s %s; node %s is %s\n", run.ID, run.State, node.ID, node.State)
	for _, warning := range node.Warnings {
		fmt.Fprintf(lines, "warning: %s\n", warning)
	}
	f := run.Failure
	if f == nil && node.State == api.NodeFailed && node.Failure != nil && node.Failure.RunID == run.ID {
		f = node.Failure
	}
	if f != nil {
		e := *f.Error
		e.Message = f.Step + ": " + e.Message
		return &e
	}
	if x.format == "json" {
		x.print(run, nil)
	}
	return nil
}

// watchSaying makes the workflows.get call req, which waits for the run to change (at most
// 25 seconds), and calls say on each tick of quiet while it waits.
func watchSaying(ctx context.Context, c *api.Client, req api.GetWorkflowRequest, quiet <-chan time.Time, say func(now time.Time)) (api.WorkflowView, error) {
	type answer struct {
		run api.WorkflowView
		err error
	}
	answered := make(chan answer, 1)
	go func() {
		var a answer
		a.err = c.Call(ctx, "workflows.get", req, &a.run)
		answered <- a
	}()
	for {
		select {
		case a := <-answered:
			return a.run, a.err
		case now := <-quiet:
			say(now)
		}
	}
}

// stillRunning says on w which of run's steps still run, and for how long (by the
// operator's clock, from when the registry started them) of their timeout: a wait of
// many minutes (wait.agentJoined, boot.kexec) that no state change or progress report
// shows.
func stillRunning(w io.Writer, run api.WorkflowView, now time.Time) {
	for _, s := range run.Steps {
		if s.State != api.StepRunning {
			continue
		}
		line := fmt.Sprintf("%s %s on %s: still running after %s", s.Path(), s.Use, s.On, max(now.Sub(s.StartedAt), 0).Round(time.Second))
		if t := s.Timeout(); t != "" {
			line += " (timeout " + t + ")"
		}
		fmt.Fprintln(textWriter{w}, line)
	}
}

// stepLine is how follow shows a step's state.
func stepLine(s api.RunStep) string {
	line := fmt.Sprintf("%-16s %-26s %-14s %s", s.Path(), s.Use, s.On, s.State)
	switch {
	case s.State == api.StepSkipped:
		line += "  (" + s.Reason + ")"
	case !s.FinishedAt.IsZero():
		line += "  " + s.FinishedAt.Sub(s.StartedAt).Round(time100ms).String()
	}
	if s.Error != nil {
		line += "  " + string(s.Error.Code) + ": " + s.Error.Message
	}
	if s.State == api.StepRunning {
		if n := len(s.Attempts); n > 1 {
			line += fmt.Sprintf("  attempt %d", n)
		}
		if len(s.Progress) > 0 {
			line += "  " + api.ProgressText(s.Progress)
		}
	}
	return line
}

const time100ms = 100 * time.Millisecond

func nodeTable(w *tabwriter.Writer, nodes []api.Node) {
	fmt.Fprintln(w, "NODE\tPOOL\tSITE\tSTATE\tMACS\tPRODUCT UUID\tBMC\tWORKFLOW")
	for _, n := range nodes {
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\t%s %s\t%s\n", n.ID, n.Pool, n.Site, n.State, dash(strings.Join(n.MACs, ",")),
			dash(n.ProductUUID), n.BMC.Driver, n.BMC.Address, dash(n.Workflow))
	}
}

// nodeDetail shows a node: its row, its last transition and the requests it takes now
// (each a command of its own), what it failed of, its identity and its bindings.
func nodeDetail(w *tabwriter.Writer, v api.NodeView) {
	n := v.Node
	nodeTable(w, []api.Node{n})
	fmt.Fprintln(w)
	if n.Transition != "" {
		fmt.Fprintf(w, "state %s; last transition %s, workflow %s\n", n.State, n.Transition, dash(n.Workflow))
	}
	if len(v.Requests) == 0 {
		fmt.Fprintln(w, "takes no request now")
	} else {
		fmt.Fprintf(w, "takes now: %s (`nodes REQUEST %s`)\n", strings.Join(v.Requests, ", "), n.ID)
	}
	for _, warning := range v.Warnings {
		fmt.Fprintf(w, "\nwarning: %s\n", warning)
	}
	if f := n.Failure; f != nil {
		fmt.Fprintf(w, "\nfailed from %s at %s %s (workflow %s): %s: %s", n.FailedFrom, dash(f.Step), dash(f.Use), dash(f.RunID), f.Error.Code, f.Error.Message)
		if f.Error.Details.Reason != "" {
			fmt.Fprintf(w, " (reason %s)", f.Error.Details.Reason)
		}
		fmt.Fprintln(w)
	}
	if f := n.UnverifiedWipe; f != nil {
		fmt.Fprintf(w, "\nretired with an unverified wipe at %s (workflow %s): %s\n", f.Step, f.RunID, f.Error.Message)
	}
	if n.UnwipedRelease != "" {
		fmt.Fprintf(w, "\nits last release (workflow %s) wiped no disk: a pool whose machines run the agent deploys it once a commissioning wiped them (`nodes commission %s`)\n", n.UnwipedRelease, n.ID)
	}
	if p := n.MACProposal; p != nil {
		fmt.Fprintf(w, "\nPXE discovery proposes MAC %s (seen at site %s since %s): `nodes confirm-mac %s --mac %s` binds it\n", p.MAC, p.Site, p.SeenAt.Format(time.RFC3339), n.ID, p.MAC)
		if len(n.BMCMACs) > 0 && !slices.Contains(n.BMCMACs, p.MAC) {
			fmt.Fprintf(w, "the machine's BMC lists the NICs %s and not %s: check which machine sent it\n", strings.Join(n.BMCMACs, ", "), p.MAC)
		}
	}
	if n.BoundMAC != "" {
		fmt.Fprintf(w, "\nMAC %s was bound from PXE discovery; inventory.refresh requires the machine's NICs to include it\n", n.BoundMAC)
	}
	if n.Profile != nil {
		fmt.Fprintf(w, "\ndeployed %s@%d (tenant %s) as %s\n", n.Profile.ID, n.Profile.Version, n.Profile.Tenant, n.Role)
	}
	if r := n.Remediation; r != nil {
		by := "requested"
		if r.Automatic {
			by = fmt.Sprintf("automatic (pool policy.remediation, %d in a row)", r.Streak)
		}
		fmt.Fprintf(w, "\nlast remediation %s@%d at %s, %s, workflow %s: %s\n", r.Profile.ID, r.Profile.Version, r.At.Format(time.RFC3339), by, r.Workflow, r.Reason)
	}
	fmt.Fprintln(w, "\n"+identityEpoch(n))
	if r := n.AgentsRevoked; r != nil {
		fmt.Fprintln(w, revocation("the machine's agents' certificates", r))
	}
	fmt.Fprintln(w, "\nCONCERN\tDRIVER\tCONFIG")
	concerns := make([]string, 0, len(n.Drivers))
	for c := range n.Drivers {
		concerns = append(concerns, c)
	}
	sort.Strings(concerns)
	for _, c := range concerns {
		fmt.Fprintf(w, "%s\t%s\t%s\n", c, n.Drivers[c].Driver, dash(string(n.Drivers[c].Config)))
	}
	if len(n.Host) > 0 {
		fmt.Fprintln(w, "\nHOST UNIT\tSETTINGS")
		for _, u := range n.Host {
			fmt.Fprintf(w, "%s\t%s\n", u.Unit, dash(string(u.Settings)))
		}
	}
}

// identityEpoch says which installation of the machine its agents' certificates must
// name, and since when.
func identityEpoch(n api.Node) string {
	switch {
	case n.IdentityEpoch == 0:
		return "identity epoch 0: never raised (no deploy, release or retire started yet)"
	case n.IdentityEpochAt.IsZero():
		return fmt.Sprintf("identity epoch %d (when it was raised is not recorded): agent certificates of earlier epochs are refused", n.IdentityEpoch)
	}
	return fmt.Sprintf("identity epoch %d, raised %s: agent certificates of earlier epochs are refused", n.IdentityEpoch, n.IdentityEpochAt.Format(time.RFC3339))
}

// revocation says when an operator revoked whose certificates, who and why.
func revocation(whose string, r *api.Revocation) string {
	line := fmt.Sprintf("%s revoked %s by %s (identity epoch %d): %s", whose, r.At.Format(time.RFC3339), dash(r.By), r.Epoch, r.Reason)
	if r.FailedWorkflowID != "" {
		line += "; failed workflow " + r.FailedWorkflowID
	}
	if r.FailedWorkflowNext != "" {
		line += "; once the machine is trusted, " + r.FailedWorkflowNext
	}
	return line
}

// agentDetail shows what the node's agent applied and its last host convergence.
func agentDetail(w *tabwriter.Writer, a *api.NodeAgent) {
	if a == nil {
		return
	}
	fmt.Fprintf(w, "\nagent applied NodeSpec generation %d of %d\n", a.ObservedGeneration, a.DesiredGeneration)
	if a.ApplyError != nil {
		fmt.Fprintf(w, "last apply failed: %s: %s\n", a.ApplyError.Code, a.ApplyError.Message)
	}
	var host struct {
		Generation int64
		Units      []struct{ Unit, Status, Message string }
	}
	if json.Unmarshal(a.Host, &host) != nil || len(host.Units) == 0 {
		return
	}
	fmt.Fprintf(w, "\nUNIT\tSTATUS\tMESSAGE (generation %d)\n", host.Generation)
	for _, u := range host.Units {
		fmt.Fprintf(w, "%s\t%s\t%s\n", u.Unit, u.Status, dash(u.Message))
	}
}

func workflowTable(w *tabwriter.Writer, r api.WorkflowView) {
	fmt.Fprintf(w, "workflow %s (%s of %s@%d on node %s): %s\n\n", r.ID, r.Kind, r.Profile.ID, r.Profile.Version, r.NodeID, r.State)
	fmt.Fprintln(w, "STEP\tUSE\tON\tSTATE\tTRIES\tDURATION\tDETAIL")
	for _, s := range r.Steps {
		duration := "-"
		if !s.FinishedAt.IsZero() {
			duration = s.FinishedAt.Sub(s.StartedAt).Round(time100ms).String()
		}
		detail := s.Reason
		switch {
		case s.Error != nil:
			detail = string(s.Error.Code) + ": " + s.Error.Message
		case len(s.Progress) > 0 && s.State == api.StepRunning:
			detail = api.ProgressText(s.Progress)
		case s.ViaFallback:
			detail = "succeeded through its fallback"
		case attestationDetail(s) != "":
			detail = attestationDetail(s)
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%d\t%s\t%s\n", s.Path(), s.Use, s.On, s.State, len(s.Attempts), duration, dash(detail))
	}
	if f := r.Failure; f != nil {
		fmt.Fprintf(w, "\nfailed at %s %s: %s\n", f.Step, f.Use, f.Error.Code)
	}
}

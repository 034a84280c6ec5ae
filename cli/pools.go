package cli

import (
	"fmt"
	"strings"
	"text/tabwriter"

	flag "github.com/spf13/pflag"

	"github.com/better-compute/better-compute/cmdline"
	"github.com/better-compute/better-compute/jsondoc"
	"github.com/better-compute/better-compute/registry/api"
)

var poolCommands = []command{{
	path:    "pools create",
	usage:   "NAME --site S [--prewarm REF,REF] [--policy POLICY.json] [--tenant T]",
	summary: "create a pool of the tenant at a site, with its policy: pre-warm images, hardware profile, agent, host units",
	long: "create a pool at a site with its policy: pre-warm images, hardware profile, agent, what " +
		"its machines go through after enrolling (`enrollment`), whether commissioning requires " +
		"GPUs (`requireGpus`), whether PXE discovery's MACs bind at once " +
		"(`trustProvisioningNetwork`), the MIG layout `from: pool` takes (`migLayout`), automatic " +
		"health remediation (`remediation`), extra initrds of its ramdisk boots (`ramdiskExtras`: " +
		"the NVIDIA driver and DCGM), host units (docs/nodes.md). A pool is kept for ever: one past the " +
		"tenant's bound (serve `--tenant-pools`) is `INVALID_STATE` reason `quota` (docs/security.md#what-a-tenant-may-hold-in-the-store)",
	nargs: 1,
	define: func(fs *flag.FlagSet) func(x *exec) error {
		tenant := fs.String("tenant", "", "tenant the pool belongs to (default: the caller's)")
		site := fs.String("site", "", "site of the pool (required)")
		prewarm, policy := policyFlags(fs)
		return func(x *exec) error {
			req := api.CreatePoolRequest{TenantID: *tenant, Name: x.args[0], SiteID: *site}
			if *policy != "" {
				if err := readPolicy(*policy, &req.Policy); err != nil {
					return err
				}
			}
			if prewarm.refs != nil {
				req.Policy.PrewarmImages = *prewarm.refs
			}
			var p api.Pool
			if err := x.call("pools.create", req, &p); err != nil {
				return err
			}
			x.print(p, func(w *tabwriter.Writer) { poolDetail(w, p) })
			return nil
		}
	},
}, {
	path:    "pools get",
	usage:   "NAME [--tenant T]",
	summary: "show one pool and its policy",
	long: "show one pool and its policy: its row, its ramdisk boots' extra initrds, the host units it " +
		"sets",
	nargs: 1,
	define: func(fs *flag.FlagSet) func(x *exec) error {
		tenant := fs.String("tenant", "", "tenant the pool belongs to (default: the caller's)")
		return func(x *exec) error {
			var p api.Pool
			if err := x.call("pools.get", api.PoolRequest{TenantID: *tenant, Name: x.args[0]}, &p); err != nil {
				return err
			}
			x.print(p, func(w *tabwriter.Writer) { poolDetail(w, p) })
			return nil
		}
	},
}, {
	path:    "pools update",
	usage:   "NAME [--prewarm REF,REF] [--policy POLICY.json] [--tenant T]",
	summary: "replace a pool's policy (--policy) or only its pre-warm images (--prewarm; '' clears them)",
	nargs:   1,
	define: func(fs *flag.FlagSet) func(x *exec) error {
		tenant := fs.String("tenant", "", "tenant the pool belongs to (default: the caller's)")
		prewarm, policy := policyFlags(fs)
		return func(x *exec) error {
			if prewarm.refs == nil && *policy == "" {
				return cmdline.Usagef("--policy", "pools update needs --policy POLICY.json, --prewarm REF,REF (or '' to clear the list) or both")
			}
			req := api.UpdatePoolRequest{TenantID: *tenant, Name: x.args[0], PrewarmImages: prewarm.refs}
			if *policy != "" {
				req.Policy = &api.PoolPolicy{}
				if err := readPolicy(*policy, req.Policy); err != nil {
					return err
				}
			}
			var p api.Pool
			if err := x.call("pools.update", req, &p); err != nil {
				return err
			}
			x.print(p, func(w *tabwriter.Writer) { poolDetail(w, p) })
			return nil
		}
	},
}, {
	path:    "pools list",
	usage:   "[--tenant T] [--cursor C]",
	summary: "list the tenant's pools",
	define: func(fs *flag.FlagSet) func(x *exec) error {
		tenant := fs.String("tenant", "", "tenant whose pools to list (default: the caller's)")
		cursor := fs.String("cursor", "", "resume after a previous page")
		return func(x *exec) error {
			var out api.PoolList
			if err := x.call("pools.list", api.ListPoolsRequest{TenantID: *tenant, ListRequest: api.ListRequest{Cursor: *cursor}}, &out); err != nil {
				return err
			}
			x.print(out, func(w *tabwriter.Writer) {
				poolTable(w, out.Pools)
				nextPage(w, out.NextCursor)
			})
			return nil
		}
	},
}}

// policyFlags declares --prewarm and --policy.
func policyFlags(fs *flag.FlagSet) (*listFlag, *string) {
	prewarm := &listFlag{}
	fs.Var(prewarm, "prewarm", "comma-separated name@version (or TENANT/name@version) refs for policy.prewarmImages; they replace the policy file's")
	policy := fs.String("policy", "", "a JSON file holding the policy: prewarmImages, ramdiskExtras, secureBoot, imageSources, hardwareProfile, agent, hugepages, kernelModules, cpu, iommu, gpu, kubernetes, gpuSharing")
	return prewarm, policy
}

// listFlag is a comma-separated list flag (--prewarm, --image-sources): refs is nil
// when the flag is not given and an empty list when it is given empty.
type listFlag struct{ refs *[]string }

func (f *listFlag) String() string {
	if f.refs == nil {
		return ""
	}
	return strings.Join(*f.refs, ",")
}

// Type names the value in help.
func (f *listFlag) Type() string { return "list" }

func (f *listFlag) Set(s string) error {
	refs := csv(s)
	if refs == nil {
		refs = []string{}
	}
	f.refs = &refs
	return nil
}

// readPolicy reads a policy file strictly: an unknown field is INVALID_INPUT.
func readPolicy(path string, p *api.PoolPolicy) error {
	data, err := readFile(path)
	if err != nil {
		return err
	}
	return jsondoc.Decoder{Name: path, File: true}.Decode(data, p)
}

func poolTable(w *tabwriter.Writer, pools []api.Pool) {
	fmt.Fprintln(w, "TENANT\tPOOL\tSITE\tHARDWARE PROFILE\tAGENT\tPREWARM")
	for _, p := range pools {
		agent := p.Policy.Agent
		if agent == "" {
			agent = api.AgentBCD
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\n", p.Tenant, p.Name, p.Site, dash(p.Policy.HardwareProfile), agent,
			dash(strings.Join(p.Policy.PrewarmImages, ",")))
	}
}

// poolDetail is one pool: its row, its ramdisk boots' extra initrds, then the host
// units its policy sets.
func poolDetail(w *tabwriter.Writer, p api.Pool) {
	poolTable(w, []api.Pool{p})
	if len(p.Policy.RamdiskExtras) > 0 {
		fmt.Fprintf(w, "\nRAMDISK EXTRAS\t%s\n", strings.Join(p.Policy.RamdiskExtras, ","))
	}
	if p.Policy.SecureBoot {
		fmt.Fprintf(w, "\nSECURE BOOT\tthe ramdisk boots through the signed chain (shim, GRUB)\n")
	}
	if units := p.Policy.Units(); len(units) > 0 {
		fmt.Fprintln(w, "\nHOST UNIT\tSETTINGS")
		for _, u := range units {
			fmt.Fprintf(w, "%s\t%s\n", u.Unit, u.Settings)
		}
	}
}

package cli

import (
	"fmt"
	"log/slog"
	"strings"
	"text/tabwriter"

	flag "github.com/spf13/pflag"

	"github.com/better-compute/better-compute/cmdline"
	"github.com/better-compute/better-compute/proto"
	"github.com/better-compute/better-compute/registry"
	"github.com/better-compute/better-compute/registry/api"
)

var serveCommands = []command{{
	path:     "serve",
	hostOnly: true,
	usage:    "--data-dir DIR [--store bbolt|etcd] [--etcd-endpoints URL,URL,URL] [--etcd-prefix P] [--etcd-ca FILE --etcd-cert FILE --etcd-key FILE] [--listen HOST:PORT] [--agent-listen HOST:PORT] [--metrics-listen HOST:PORT] [--userdata-config FILE] [--hardware-profiles FILE] [--allow-unsigned-images] [--kek-file FILE] [--secrets-key-lost] [--pki-lost] [--agent-endpoints HOST:PORT,...] [--api-running N] [--api-tenant-waiting N] [--api-tenant-watching N] [--auth-failure-burst N] [--auth-failure-refill DURATION] [--tenant-secrets N] [--tenant-images N] [--tenant-profile-versions N] [--tenant-credentials N] [--tenant-pools N] [--tenant-nodes N] [--gc-percent N] [--memory-limit SIZE|auto|none] [--log-format text|json]",
	summary:  "run the registry (HTTPS API and admin socket); the first start writes DIR/admin.conf",
	long: "run the registry and its agents' QUIC endpoint; prints its URL, agent endpoint and pins; " +
		"resumes running workflows. `DIR` is made 0700 and refused when its group or others can " +
		"enter it. `--allow-unsigned-images` lets a tenant deploy its own unsigned OS images " +
		"(development only). `--userdata-config`: controlPlaneUrl, bcdUrl, bcdSha256, pins, " +
		"templates, tokenTtlSeconds (docs/userdata.md); `--hardware-profiles`: docs/nodes.md; " +
		"`--kek-file` seals the keys in the store for several registries on one store, `--agent-endpoints` the agent endpoints of every replica (docs/ARCHITECTURE.md#replicas); " +
		"a start whose secrets key (DIR/pki/secrets.key) is not the one the store's secrets are sealed with is refused, and `--secrets-key-lost` starts it once the key is known lost (docs/security.md#the-secrets-key); " +
		"so is a start whose PKI (DIR/pki's CAs and join keys) is not the one the store's agents joined with and its join tokens were minted for, and `--pki-lost` starts it once the PKI is known lost, every agent then joining again (docs/security.md#the-pki); " +
		"`--store etcd` keeps the records in an etcd cluster instead of DIR/registry.db (docs/store.md); " +
		"`--api-running`, `--api-tenant-waiting` and `--api-tenant-watching` bound the authenticated API calls, shared fairly between tenants, and `--auth-failure-burst` and `--auth-failure-refill` " +
		"the failed credential checks of each source address, API calls, console sign-ins and join tokens together, and `--tenant-secrets`, `--tenant-images`, `--tenant-profile-versions`, `--tenant-credentials`, `--tenant-pools` and `--tenant-nodes` what each tenant may hold in the store (docs/security.md#what-strangers-can-cost); " +
		"`--gc-percent` and `--memory-limit` set the registry's garbage collection (the soft memory limit by default 90% of the memory limit of the registry's container or unit), GOGC and GOMEMLIMIT in the environment winning over them (docs/operations.md#memory)",
	define: func(fs *flag.FlagSet) func(x *exec) error {
		dataDir := fs.String("data-dir", "", "directory of the store, PKI, admin.conf and admin socket, made 0700; refused when its group or others can enter it (required)")
		listen := fs.String("listen", "127.0.0.1:7443", "address of the HTTPS API")
		agentListen := fs.String("agent-listen", "127.0.0.1:7444", "agents' QUIC endpoint (UDP), as agents dial it")
		metricsListen := fs.String("metrics-listen", "", "serve Prometheus metrics at http://HOST:PORT/metrics, without credential (default: none)")
		logFormat := fs.String("log-format", "text", "log format on stderr: text or json")
		userDataConfig := fs.String("userdata-config", "", "JSON file: controlPlaneUrl, bcdUrl, bcdSha256, pins, templates, tokenTtlSeconds (docs/userdata.md)")
		hardware := fs.String("hardware-profiles", "", "hardware profiles file (default DIR/hardware-profiles.json when it exists)")
		allowUnsigned := fs.Bool("allow-unsigned-images", false, "let a tenant deploy its own unsigned OS images: for development only")
		agentEndpoints := fs.String("agent-endpoints", "", "agent endpoints advertised to agents, HOST:PORT,...: every replica's, the same list on each (default: this registry's own)")
		kekFile := fs.String("kek-file", "", "key-encryption key file (0600): the registry's keys are kept sealed with it in the store, shared by every registry on that store; made on first start, copied by the operator to the others; needed with --store etcd (docs/security.md)")
		secretsKeyLost := fs.Bool("secrets-key-lost", false, "start although DIR/pki/secrets.key is not the key the store's secrets are sealed with, which is lost: they never open again, and the store records this key from then on; give it once, after no backup of the key is left (docs/security.md#the-secrets-key)")
		pkiLost := fs.Bool("pki-lost", false, "start although DIR/pki's CAs and join keys are not the PKI the store's agents joined with and its join tokens were minted for, which is lost: every agent joins again with a new token and the new pins, and the store records this PKI from then on; give it once, after no backup of DIR/pki is left (docs/security.md#the-pki)")
		backend := fs.String("store", "bbolt", "where the records are: bbolt (DIR/registry.db) or etcd (--etcd-endpoints; docs/store.md)")
		etcd := defineEtcd(fs, "etcd-endpoints", "etcd-prefix")
		var limits api.Limits
		fs.Var(cmdline.SignedDecimal(&limits.Running, 0), "api-running", "authenticated API calls run at once, every tenant's; each freed slot goes to the waiting tenants in turn (0: four per CPU)")
		fs.Var(cmdline.SignedDecimal(&limits.Waiting, 0), "api-tenant-waiting", fmt.Sprintf("API calls one tenant may have waiting for a slot; one more is refused UNAVAILABLE (reason %s) with Retry-After (0: %d)", proto.ReasonTenantBusy, api.DefaultWaiting))
		fs.Var(cmdline.SignedDecimal(&limits.Watching, 0), "api-tenant-watching", fmt.Sprintf("long polls (events --follow, a workflow's progress) one tenant may have waiting for a change; one more is refused the same way (0: %d)", api.DefaultWatching))
		var failures api.FailureLimits
		fs.Var(cmdline.SignedDecimal(&failures.Burst, api.DefaultFailureBurst), "auth-failure-burst", fmt.Sprintf("failed credential checks one source address (IPv4; IPv6 /64) may have in a row, API calls, console sign-ins and join.join's tokens together; its calls beyond them are refused UNAVAILABLE (reason %s) with Retry-After before their check, valid or not (0: no bound; at most %d)", proto.ReasonSourceFailures, api.MaxFailureBurst))
		fs.DurationVar(&failures.Refill, "auth-failure-refill", api.DefaultFailureRefill, fmt.Sprintf("how long a source address takes to regain one failed credential check (%v to %v)", api.MinFailureRefill, api.MaxFailureRefill))
		var bounds registry.TenantBounds
		fs.Var(cmdline.SignedDecimal(&bounds.Secrets, 0), "tenant-secrets", fmt.Sprintf("secrets one tenant may hold; one more is refused INVALID_STATE (reason %s) until it deletes one; the root tenant is not bounded (0: %d)", proto.ReasonQuota, registry.DefaultTenantSecrets))
		fs.Var(cmdline.SignedDecimal(&bounds.Images, 0), "tenant-images", fmt.Sprintf("catalog images one tenant may hold, kept for ever; one more is refused the same way (0: %d)", registry.DefaultTenantImages))
		fs.Var(cmdline.SignedDecimal(&bounds.ProfileVersions, 0), "tenant-profile-versions", fmt.Sprintf("profile versions one tenant may hold, deleted ones a workflow ran too until the daily prune after their last run and node (an unused one deleted frees its place at once); one more is refused the same way (0: %d)", registry.DefaultTenantProfileVersions))
		fs.Var(cmdline.SignedDecimal(&bounds.Credentials, 0), "tenant-credentials", fmt.Sprintf("credentials one tenant may hold, revoked and expired ones too until they are pruned; one more is refused the same way (0: %d)", registry.DefaultTenantCredentials))
		fs.Var(cmdline.SignedDecimal(&bounds.Pools, 0), "tenant-pools", fmt.Sprintf("pools one tenant may hold, kept for ever; one more is refused the same way (0: %d)", registry.DefaultTenantPools))
		fs.Var(cmdline.SignedDecimal(&bounds.Nodes, 0), "tenant-nodes", fmt.Sprintf("nodes one tenant may hold, kept for ever, retired ones too; one more the tenant enrolls is refused the same way, one the root tenant's credential enrolls for it is not (0: %d)", registry.DefaultTenantNodes))
		var memory registry.MemoryConfig
		fs.Var(cmdline.SignedDecimal(&memory.GCPercent, 0), "gc-percent", fmt.Sprintf("how far the heap grows past what is live before the collector runs again, in percent, as GOGC (which wins when set); more spends memory to save CPU (%d to %d; 0: %d)", registry.MinGCPercent, registry.MaxGCPercent, registry.DefaultGCPercent))
		fs.StringVar(&memory.Limit, "memory-limit", "auto", fmt.Sprintf("soft limit on the memory the registry's Go runtime holds, as GOMEMLIMIT (which wins when set): near it the collector runs as often as it must, whatever --gc-percent says; a size such as 4GiB, at least %d MiB; auto, %d%% of the memory limit of the cgroup the registry runs in (a container's, a systemd unit's MemoryMax), none when it has none; or none", registry.MinMemoryLimit>>20, registry.AutoMemoryPercent))
		return func(x *exec) error {
			policy, err := memory.Policy(x.env.Getenv)
			if err != nil {
				return err
			}
			for _, f := range []struct {
				name string
				v    int
				what string
			}{{"--api-running", limits.Running, "calls"}, {"--api-tenant-waiting", limits.Waiting, "calls"}, {"--api-tenant-watching", limits.Watching, "calls"},
				{"--tenant-secrets", bounds.Secrets, "secrets"}, {"--tenant-images", bounds.Images, "images"}, {"--tenant-profile-versions", bounds.ProfileVersions, "versions"},
				{"--tenant-credentials", bounds.Credentials, "credentials"}, {"--tenant-pools", bounds.Pools, "pools"}, {"--tenant-nodes", bounds.Nodes, "nodes"}} {
				if f.v < 0 {
					return proto.Errorf(proto.InvalidInput, "%s is %d: give a number of %s, or 0 for the default", f.name, f.v, f.what).WithPath(f.name)
				}
			}
			if err := checkFailureLimits(&failures); err != nil {
				return err
			}
			if *logFormat != "text" && *logFormat != "json" {
				// Else a log pipeline that reads JSON would get text, and never say why.
				return proto.Errorf(proto.InvalidInput, "--log-format is %q: give text or json", *logFormat).WithPath("--log-format")
			}
			var h slog.Handler = slog.NewTextHandler(x.env.Stderr, nil)
			if *logFormat == "json" {
				h = slog.NewJSONHandler(x.env.Stderr, nil)
			}
			var endpoints []string
			if *agentEndpoints != "" {
				endpoints = strings.Split(*agentEndpoints, ",")
			}
			sc := etcd()
			sc.Backend = *backend
			cfg := registry.Config{AgentEndpoints: endpoints, DataDir: *dataDir, Store: sc, Listen: *listen, AgentListen: *agentListen, HardwareProfiles: *hardware,
				AllowUnsignedImages: *allowUnsigned, KEKFile: *kekFile, SecretsKeyLost: *secretsKeyLost, PKILost: *pkiLost, MetricsListen: *metricsListen, APILimits: limits, AuthFailures: failures, TenantBounds: bounds, Log: slog.New(h)}
			if *userDataConfig != "" {
				if cfg.UserData, err = registry.LoadUserData(*userDataConfig); err != nil {
					return err
				}
			}
			defer policy.Apply()()
			cfg.Log.Info("garbage collection", "policy", policy)
			return registry.Run(x.ctx, cfg, func(info registry.Info) {
				x.print(info, func(w *tabwriter.Writer) {
					fmt.Fprintf(w, "registry listening on %s\n", info.URL)
					fmt.Fprintf(w, "agents' endpoint on udp %s\n", info.AgentEndpoint)
					if info.MetricsURL != "" {
						fmt.Fprintf(w, "metrics at %s\n", info.MetricsURL)
					}
					if info.FirstStart {
						fmt.Fprintf(w, "first start: the admin credential is in %s; keep it safe\n", info.AdminConfig)
					}
					if info.AdminConfigStale != "" {
						fmt.Fprintf(w, "warning: %s\n", info.AdminConfigStale)
					}
					if info.KEKMade {
						fmt.Fprintf(w, "the registry's keys are sealed with the new key-encryption key %s: copy it (mode 0600) to every other registry on this store, and keep a copy safe\n", info.KEKFile)
					}
					fmt.Fprintf(w, "pins for bcd join (also in %s):\n", info.PinsFile)
					fmt.Fprintf(w, "  --serving-ca-pin\t%s\n", info.Pins.ServingCA)
					fmt.Fprintf(w, "  --join-signing-pin\t%s\n", info.Pins.JoinSigning)
					fmt.Fprintf(w, "  --join-encryption-pin\t%s\n", info.Pins.JoinEncryption)
					fmt.Fprintf(w, "try: BC_CONFIG=%s %s profiles list\n", info.AdminConfig, x.env.program())
				})
			})
		}
	},
}}

// checkFailureLimits refuses a bound of failed credential checks out of range at its
// flag, and switches the bound off for a burst of 0.
func checkFailureLimits(l *api.FailureLimits) error {
	if l.Burst < 0 || l.Burst > api.MaxFailureBurst {
		return proto.Errorf(proto.InvalidInput, "--auth-failure-burst is %d: give 1 to %d failed checks, or 0 for no bound", l.Burst, api.MaxFailureBurst).WithPath("--auth-failure-burst")
	}
	if l.Refill < api.MinFailureRefill || l.Refill > api.MaxFailureRefill {
		return proto.Errorf(proto.InvalidInput, "--auth-failure-refill is %v: give %v to %v", l.Refill, api.MinFailureRefill, api.MaxFailureRefill).WithPath("--auth-failure-refill")
	}
	l.Off = l.Burst == 0
	return nil
}

// defineEtcd defines the flags naming an etcd store: its endpoints and prefix (under the
// flag names given) and the TLS files.
func defineEtcd(fs *flag.FlagSet, endpointsFlag, prefixFlag string) func() registry.StoreConfig {
	endpoints := fs.String(endpointsFlag, "", "the etcd cluster's client URLs, comma-separated (https:// with TLS)")
	prefix := fs.String(prefixFlag, "better-compute", "key prefix of the records in etcd")
	ca := fs.String("etcd-ca", "", "PEM file of the CA etcd's certificates are checked against")
	cert := fs.String("etcd-cert", "", "PEM file of the client certificate presented to etcd (with --etcd-key)")
	key := fs.String("etcd-key", "", "PEM file of the client certificate's key")
	return func() registry.StoreConfig {
		sc := registry.StoreConfig{EtcdPrefix: *prefix, EtcdCA: *ca, EtcdCert: *cert, EtcdKey: *key}
		for _, ep := range strings.Split(*endpoints, ",") {
			if ep = strings.TrimSpace(ep); ep != "" {
				sc.EtcdEndpoints = append(sc.EtcdEndpoints, ep)
			}
		}
		return sc
	}
}

var storeCommands = []command{{
	path:     "store check",
	hostOnly: true,
	usage:    "--data-dir DIR | --store etcd --etcd-endpoints URL,URL,URL [--etcd-prefix P] [--etcd-ca FILE --etcd-cert FILE --etcd-key FILE]",
	summary: "read a registry's store whole, repairing nothing, and report every inconsistency: records this version cannot read, index entries naming missing records, " +
		"node indexes that differ from the nodes, runs naming unstored profile versions, public-profile entries that differ from the profiles; exit 1 when any is found",
	define: func(fs *flag.FlagSet) func(x *exec) error {
		dataDir := fs.String("data-dir", "", "data directory whose DIR/registry.db is checked: the registry must be stopped (or check a copy of the directory)")
		backend := fs.String("store", "bbolt", "bbolt (DIR/registry.db) or etcd (--etcd-endpoints; replicas may keep running)")
		etcd := defineEtcd(fs, "etcd-endpoints", "etcd-prefix")
		return func(x *exec) error {
			sc := etcd()
			sc.Backend = *backend
			if (*backend == "bbolt" || *backend == "") && *dataDir == "" {
				return cmdline.Usagef("--data-dir", "store check needs --data-dir DIR, or --store etcd with --etcd-endpoints")
			}
			sum, err := registry.CheckStore(*dataDir, sc)
			if err != nil {
				return err
			}
			x.print(sum, func(w *tabwriter.Writer) {
				for _, p := range sum.Problems {
					fmt.Fprintln(w, p)
				}
				if len(sum.Problems) == 0 {
					fmt.Fprintln(w, "the store is consistent")
				} else {
					fmt.Fprintf(w, "%d problems: the registry may misbehave on this store; restore it from a backup (docs/store.md#checking-a-store)\n", len(sum.Problems))
				}
			})
			if len(sum.Problems) > 0 {
				return errReported
			}
			return nil
		}
	},
}, {
	path:     "store copy",
	hostOnly: true,
	usage:    "--from-data-dir DIR --to-etcd-endpoints URL,URL,URL [--to-etcd-prefix P] [--etcd-ca FILE --etcd-cert FILE --etcd-key FILE]",
	summary:  "copy a stopped registry's bbolt store into an empty etcd prefix, then read every record back and compare it",
	define: func(fs *flag.FlagSet) func(x *exec) error {
		from := fs.String("from-data-dir", "", "data directory of the stopped registry whose DIR/registry.db is copied (required)")
		etcd := defineEtcd(fs, "to-etcd-endpoints", "to-etcd-prefix")
		fs.Lookup("to-etcd-endpoints").Usage += " (required)"
		return func(x *exec) error {
			if *from == "" {
				return cmdline.Usagef("--from-data-dir", "store copy needs --from-data-dir DIR")
			}
			to := etcd()
			if len(to.EtcdEndpoints) == 0 {
				return cmdline.Usagef("--to-etcd-endpoints", "store copy needs --to-etcd-endpoints URL,URL,URL")
			}
			sum, err := registry.CopyStore(*from, to, func(phase, bucket string, records int) {
				fmt.Fprintf(x.env.Stderr, "%s %s: %d records\n", phase, bucket, records)
			})
			if err != nil {
				return err
			}
			x.print(sum, func(w *tabwriter.Writer) {
				fmt.Fprintf(w, "copied and read back %d records (%d bytes) in %d buckets to prefix %s\n", sum.Records, sum.Bytes, sum.Buckets, to.EtcdPrefix)
			})
			return nil
		}
	},
}}

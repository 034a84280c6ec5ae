package cli

import (
	"fmt"
	"log/slog"
	"strings"
	"text/tabwriter"

	flag "github.com/spf13/pflag"

	"github.com/better-compute/better-compute/proto"
	"github.com/better-compute/better-compute/registry"
)

var serveCommands = []command{{
	path:     "serve",
	hostOnly: true,
	usage:    "--data-dir DIR [--listen HOST:PORT] [--agent-listen HOST:PORT] [--metrics-listen HOST:PORT] [--userdata-config FILE] [--hardware-profiles FILE] [--allow-unsigned-images] [--kek-file FILE] [--agent-endpoints HOST:PORT,...] [--log-format text|json]",
	summary:  "run the registry (HTTPS API and admin socket); the first start writes DIR/admin.conf",
	long: "run the registry and its agents' QUIC endpoint; prints its URL, agent endpoint and pins; " +
		"resumes running workflows. `DIR` is made 0700 and refused when its group or others can " +
		"enter it. `--allow-unsigned-images` lets a tenant deploy its own unsigned OS images " +
		"(development only). `--userdata-config`: controlPlaneUrl, bcdUrl, bcdSha256, pins, " +
		"templates, tokenTtlSeconds (docs/userdata.md); `--hardware-profiles`: docs/nodes.md; " +
		"`--kek-file` seals the keys in the store for several registries on one store, `--agent-endpoints` the agent endpoints of every replica (docs/ARCHITECTURE.md#replicas)",
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
		kekFile := fs.String("kek-file", "", "key-encryption key file (0600): the registry's keys are kept sealed with it in the store, shared by every registry on that store; made on first start, copied by the operator to the others (docs/security.md)")
		return func(x *exec) error {
			if *dataDir == "" {
				return proto.Errorf(proto.InvalidInput, "serve needs --data-dir DIR").WithPath("--data-dir")
			}
			var h slog.Handler = slog.NewTextHandler(x.env.Stderr, nil)
			if *logFormat == "json" {
				h = slog.NewJSONHandler(x.env.Stderr, nil)
			}
			var endpoints []string
			if *agentEndpoints != "" {
				endpoints = strings.Split(*agentEndpoints, ",")
			}
			cfg := registry.Config{AgentEndpoints: endpoints, DataDir: *dataDir, Listen: *listen, AgentListen: *agentListen, HardwareProfiles: *hardware,
				AllowUnsignedImages: *allowUnsigned, KEKFile: *kekFile, MetricsListen: *metricsListen, Log: slog.New(h)}
			if *userDataConfig != "" {
				var err error
				if cfg.UserData, err = registry.LoadUserData(*userDataConfig); err != nil {
					return err
				}
			}
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

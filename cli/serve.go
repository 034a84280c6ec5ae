package cli

import (
	"flag"
	"fmt"
	"log/slog"
	"text/tabwriter"

	"github.com/better-compute/better-compute/proto"
	"github.com/better-compute/better-compute/registry"
)

var serveCommands = []command{{
	path:    "serve",
	usage:   "--data-dir DIR [--listen HOST:PORT] [--agent-listen HOST:PORT] [--metrics-listen HOST:PORT] [--userdata-config FILE] [--hardware-profiles FILE] [--allow-unsigned-images]",
	summary: "run the registry (HTTPS API and admin socket); the first start writes DIR/admin.conf",
	define: func(fs *flag.FlagSet) func(x *exec) error {
		dataDir := fs.String("data-dir", "", "directory of the store, PKI, admin.conf and admin socket, made 0700; refused when its group or others can enter it (required)")
		listen := fs.String("listen", "127.0.0.1:7443", "address of the HTTPS API")
		agentListen := fs.String("agent-listen", "127.0.0.1:7444", "agents' QUIC endpoint (UDP), as agents dial it")
		metricsListen := fs.String("metrics-listen", "", "serve Prometheus metrics at http://HOST:PORT/metrics, without credential (default: none)")
		logFormat := fs.String("log-format", "text", "log format on stderr: text or json")
		userDataConfig := fs.String("userdata-config", "", "JSON file: controlPlaneUrl, bcdUrl, bcdSha256, pins, templates, tokenTtlSeconds (docs/userdata.md)")
		hardware := fs.String("hardware-profiles", "", "hardware profiles file (default DIR/hardware-profiles.json when it exists)")
		allowUnsigned := fs.Bool("allow-unsigned-images", false, "let a tenant deploy its own unsigned OS images: for development only")
		return func(x *exec) error {
			if *dataDir == "" {
				return proto.Errorf(proto.InvalidInput, "serve needs --data-dir DIR").WithPath("--data-dir")
			}
			var h slog.Handler = slog.NewTextHandler(x.env.Stderr, nil)
			if *logFormat == "json" {
				h = slog.NewJSONHandler(x.env.Stderr, nil)
			}
			cfg := registry.Config{DataDir: *dataDir, Listen: *listen, AgentListen: *agentListen, MetricsListen: *metricsListen, HardwareProfiles: *hardware,
				AllowUnsignedImages: *allowUnsigned, Log: slog.New(h)}
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
					fmt.Fprintf(w, "pins for bcd join (also in %s):\n", info.PinsFile)
					fmt.Fprintf(w, "  --serving-ca-pin\t%s\n", info.Pins.ServingCA)
					fmt.Fprintf(w, "  --join-signing-pin\t%s\n", info.Pins.JoinSigning)
					fmt.Fprintf(w, "  --join-encryption-pin\t%s\n", info.Pins.JoinEncryption)
					fmt.Fprintf(w, "try: BC_CONFIG=%s better-compute profiles list\n", info.AdminConfig)
				})
			})
		}
	},
}}

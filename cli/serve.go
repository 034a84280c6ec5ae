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
	usage:   "--data-dir DIR [--listen HOST:PORT] [--agent-listen HOST:PORT]",
	summary: "run the registry (HTTPS API and admin socket); the first start writes DIR/admin.conf",
	define: func(fs *flag.FlagSet) func(x *exec) error {
		dataDir := fs.String("data-dir", "", "directory of the store, PKI, admin.conf and admin socket (required)")
		listen := fs.String("listen", "127.0.0.1:7443", "address of the HTTPS API")
		agentListen := fs.String("agent-listen", registry.DefaultAgentListen, "UDP address of the agent endpoint (QUIC)")
		logFormat := fs.String("log-format", "text", "log format on stderr: text or json")
		return func(x *exec) error {
			if *dataDir == "" {
				return proto.Errorf(proto.InvalidInput, "serve needs --data-dir DIR").WithPath("--data-dir")
			}
			var h slog.Handler = slog.NewTextHandler(x.env.Stderr, nil)
			if *logFormat == "json" {
				h = slog.NewJSONHandler(x.env.Stderr, nil)
			}
			cfg := registry.Config{DataDir: *dataDir, Listen: *listen, AgentListen: *agentListen, Log: slog.New(h)}
			return registry.Run(x.ctx, cfg, func(info registry.Info) {
				x.print(info, func(w *tabwriter.Writer) {
					fmt.Fprintf(w, "registry listening on %s\n", info.URL)
					fmt.Fprintf(w, "agents connect to udp %s\n", info.AgentAddr)
					if info.FirstStart {
						fmt.Fprintf(w, "first start: the admin credential is in %s; keep it safe\n", info.AdminConfig)
					}
					fmt.Fprintf(w, "try: BC_CONFIG=%s better-compute profiles list\n", info.AdminConfig)
				})
			})
		}
	},
}}

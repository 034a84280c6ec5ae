package join

import (
	"flag"
	"log/slog"
	"net/url"

	"github.com/better-compute/better-compute/clock"
	"github.com/better-compute/better-compute/proto"
	"github.com/better-compute/better-compute/proto/bcdargv"
	"github.com/better-compute/better-compute/proto/joinwire"
)

// Options are what `bcd join` is run with.
type Options struct {
	// Server is the registry's base URL, https://host:port.
	Server string
	// TokenFile holds the join token; it is removed once joined.
	TokenFile string
	// NodeID is the node this agent is; the token must have been minted for it.
	NodeID string
	// Role is node, ramdisk or site.
	Role string
	// Pins are the trust anchors, given out of band; all three are required.
	Pins joinwire.Pins
	// ConfigDir is where the key, certificates and config.toml are written.
	ConfigDir string
	// Clock times the retries of a join a busy registry refused. clock.Real when nil.
	Clock clock.Clock
	// Log tells each wait before a refused join is sent again. Nothing is logged when nil.
	Log *slog.Logger
}

// Flags declares `bcd join`'s flags on fs and returns the options they fill. The
// user-data templates' argv (proto/bcdargv) is tested against these very flags.
func Flags(fs *flag.FlagSet) *Options {
	o := &Options{}
	fs.StringVar(&o.Server, "server", "", "the registry's base URL, https://host:port (required)")
	fs.StringVar(&o.TokenFile, "token-file", "", "file holding the join token; removed once joined (required)")
	fs.StringVar(&o.NodeID, "node-id", "", "the node this agent is; the token must have been minted for it (required)")
	fs.StringVar(&o.Role, "role", joinwire.RoleNode, "node, ramdisk or site")
	fs.StringVar(&o.Pins.ServingCA, "serving-ca-pin", "", "pin of the registry's serving CA, sha256/<base64> (required)")
	fs.StringVar(&o.Pins.JoinSigning, "join-signing-pin", "", "pin of the JoinResponse signing key (required)")
	fs.StringVar(&o.Pins.JoinEncryption, "join-encryption-pin", "", "pin of the JoinService encryption key (required)")
	fs.StringVar(&o.ConfigDir, "config-dir", bcdargv.ConfigDir, "directory for the key, certificates and config.toml")
	return o
}

// Check refuses options bcd cannot join with, INVALID_CONFIG naming the flag at fault
// (or the kernel command line's bc.* the ramdisk filled them from); `bcd join` reads the
// refusal of its command line's flags as a usage error, exit 2.
func (o Options) Check() (*url.URL, error) {
	u, err := url.Parse(o.Server)
	if err != nil || u.Scheme != "https" || u.Host == "" || u.RawQuery != "" || u.Fragment != "" {
		return nil, proto.Errorf(proto.InvalidConfig, "--server %q is not an https://host:port URL", o.Server).WithPath("--server")
	}
	if o.TokenFile == "" {
		return nil, proto.Errorf(proto.InvalidConfig, "--token-file is missing: name the file that holds the join token").WithPath("--token-file")
	}
	if err := proto.CheckNodeID(o.NodeID); err != nil {
		return nil, proto.Errorf(proto.InvalidConfig, "--node-id: %s", proto.AsError(err).Message).WithPath("--node-id")
	}
	if err := joinwire.CheckRole(o.Role); err != nil {
		return nil, proto.Errorf(proto.InvalidConfig, "--role: %v", err).WithPath("--role")
	}
	if o.ConfigDir == "" {
		return nil, proto.Errorf(proto.InvalidConfig, "--config-dir is empty").WithPath("--config-dir")
	}
	for _, p := range []struct{ flag, pin string }{
		{"--serving-ca-pin", o.Pins.ServingCA},
		{"--join-signing-pin", o.Pins.JoinSigning},
		{"--join-encryption-pin", o.Pins.JoinEncryption},
	} {
		if p.pin == "" {
			return nil, proto.Errorf(proto.InvalidConfig, "%s is missing: bcd refuses to bootstrap without all three pins (--serving-ca-pin, --join-signing-pin, --join-encryption-pin)", p.flag).WithPath(p.flag)
		}
		if err := joinwire.CheckPin(p.pin); err != nil {
			return nil, proto.Errorf(proto.InvalidConfig, "%s: %v", p.flag, err).WithPath(p.flag)
		}
	}
	return u, nil
}

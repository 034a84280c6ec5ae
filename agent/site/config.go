package site

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"reflect"
	"strings"

	"github.com/better-compute/better-compute/boot"
	"github.com/better-compute/better-compute/cache"
	"github.com/better-compute/better-compute/clock"
	"github.com/better-compute/better-compute/jsondoc"
	"github.com/better-compute/better-compute/proto"
	"github.com/better-compute/better-compute/proto/bcdargv"
)

// Version is the version of the site config this bcd reads.
const Version = 1

// Config is `bcd site --config FILE`: JSON, version 1, unknown fields refused. Fields
// left zero take the defaults of withDefaults.
type Config struct {
	// Version is 1.
	Version int `json:"version"`
	// ConfigDir is bcd's configuration directory, written by `bcd join --role site`
	// (default /etc/bcd).
	ConfigDir string `json:"configDir"`
	// StateDir holds what the site keeps across restarts besides the cache: the boot
	// entries the relayed steps set (default /var/lib/bcd/site).
	StateDir string `json:"stateDir"`
	// Boot is the boot server's configuration (docs/boot.md). Its HTTP listener
	// (boot.serverIP, boot.httpPort) also serves the cache at /images/sha256/.
	Boot boot.Config `json:"boot"`
	// Ramdisk is what a ramdisk boot entry that names no kernel or initrd boots.
	Ramdisk RamdiskConfig `json:"ramdisk"`
	// Cache is the image cache's configuration.
	Cache CacheConfig `json:"cache"`
	// HTTPBase is the base URL the site's machines reach its HTTP server at (default
	// http://boot.serverIP[:boot.httpPort]); reported to the registry in the `site`
	// inventory section.
	HTTPBase string `json:"httpBase"`
	// MetricsListen is the address, host:port, bcd site serves its Prometheus metrics
	// on at /metrics over HTTP, without credential; empty (the default) serves none.
	MetricsListen string `json:"metricsListen"`
	// Clock is the agent's one clock, never read from the file: its session's
	// (reconnects, keep-alive, renewal), the boot server's (leases, discoveries) and the
	// cache's (retries of failed pulls, last use, bandwidth). clock.Real when nil.
	Clock clock.Clock `json:"-"`
}

// RamdiskConfig names the ramdisk files of boot.ramdiskDir.
type RamdiskConfig struct {
	// Kernel and Initrd are file names in boot.ramdiskDir (default vmlinuz, initrd.img).
	Kernel string `json:"kernel"`
	Initrd string `json:"initrd"`
	// Args are kernel arguments put before the entry's, e.g. "console=ttyS0,115200".
	Args []string `json:"args"`
}

// CacheConfig is the site image cache's part of the config (docs/cache.md).
type CacheConfig struct {
	// Dir is the cache's directory. Required.
	Dir string `json:"dir"`
	// CapacityBytes bounds the bytes the cache holds; 0 is no bound. The filesystem
	// bounds the cache as well, less ReserveBytes.
	CapacityBytes int64 `json:"capacityBytes"`
	// ReserveBytes is the free space of the cache's filesystem no pull writes into, kept
	// for the site's leases, logs and whatever else lives there; 0 is the default, 5% of
	// the filesystem, at least 1 GiB and at most 20 GiB, never more than a quarter of it
	// (cache.DefaultReserve). It must be less than the filesystem.
	ReserveBytes int64 `json:"reserveBytes"`
	// MaxPulls is how many images are pulled at once (default 2).
	MaxPulls int `json:"maxPulls"`
	// BandwidthBytesPerSec bounds all pulls together; 0 is no bound.
	BandwidthBytesPerSec int64 `json:"bandwidthBytesPerSec"`
	// CAFile is a PEM file of the CAs image sources must chain to; empty trusts the
	// system's roots.
	CAFile string `json:"caFile"`
	// RetryInterval is how long an image whose pull failed waits before it is pulled
	// again (0: cache.DefaultRetryInterval, 5 minutes); one the site's image sources
	// refused is pulled again as soon as they change.
	RetryInterval boot.Duration `json:"retryInterval"`
}

// LoadConfig reads and checks the config file at path. Every problem is INVALID_CONFIG
// at its field's path, or at jsondoc.WholeFile (".") for the file as a whole (it cannot
// be read, is not JSON, is not an object).
func LoadConfig(path string) (Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return Config{}, proto.Errorf(proto.InvalidConfig, "site config: %v", err).WithPath(string(jsondoc.WholeFile))
	}
	return decodeConfig(path, data)
}

// decodeConfig decodes data, the text of the config file at path, strictly
// (jsondoc.Decoder: a problem names the file, line and column, the file as a whole at
// jsondoc.WholeFile) and checks it. A duration given as other than text is told how to
// write it.
func decodeConfig(path string, data []byte) (Config, error) {
	d := jsondoc.Decoder{Name: path, File: true, Code: proto.InvalidConfig}
	var old struct {
		BMC json.RawMessage `json:"bmc"`
	}
	if json.Unmarshal(data, &old) == nil && old.BMC != nil {
		return Config{}, proto.Errorf(proto.InvalidConfig, "site config: the site reads no BMC credentials any more: "+
			"put each one in the registry (`better-compute secrets put --ref secret://NAME --file FILE`, the platform's in the root tenant; docs/bmc.md), "+
			"then remove bmc from this file").WithPath("bmc")
	}
	var c Config
	if err := d.Decode(data, &c); err != nil {
		if te, ok := errors.AsType[*json.UnmarshalTypeError](err); ok && te.Type == reflect.TypeFor[boot.Duration]() {
			return Config{}, proto.Errorf(proto.InvalidConfig, `%s: %s is %s, not a duration: write it as text such as "90s", "10m" or "1h"`, d.Name, te.Field, te.Value).WithPath(te.Field)
		}
		return Config{}, err
	}
	c = c.withDefaults()
	return c, c.Check()
}

// withDefaults is the one place the site config's defaults are set.
func (c Config) withDefaults() Config {
	if c.ConfigDir == "" {
		c.ConfigDir = bcdargv.ConfigDir
	}
	if c.StateDir == "" {
		c.StateDir = "/var/lib/bcd/site"
	}
	if c.Ramdisk.Kernel == "" {
		c.Ramdisk.Kernel = "vmlinuz"
	}
	if c.Ramdisk.Initrd == "" {
		c.Ramdisk.Initrd = "initrd.img"
	}
	if c.HTTPBase == "" && c.Boot.ServerIP.IsValid() {
		c.HTTPBase = "http://" + c.Boot.ServerIP.String()
		if c.Boot.HTTPPort != 0 && c.Boot.HTTPPort != 80 {
			c.HTTPBase += fmt.Sprintf(":%d", c.Boot.HTTPPort)
		}
	}
	return c
}

// Check returns every problem of c as INVALID_CONFIG naming its field, joined.
func (c Config) Check() error {
	var errs []error
	bad := func(path, format string, args ...any) {
		errs = append(errs, proto.Errorf(proto.InvalidConfig, format, args...).WithPath(path))
	}
	if c.Version != Version {
		bad("version", "version %d; this bcd reads site config version %d", c.Version, Version)
	}
	if err := c.Boot.Check(); err != nil {
		errs = append(errs, err)
	}
	if c.Cache.Dir == "" {
		bad("cache.dir", "give the cache's directory")
	}
	if c.Cache.CapacityBytes < 0 {
		bad("cache.capacityBytes", "capacity %d bytes is negative: give the bytes the cache may hold, or leave it out for no bound", c.Cache.CapacityBytes)
	}
	if c.Cache.MaxPulls < 0 {
		bad("cache.maxPulls", "%d pulls at once is negative: give how many, or leave it out for %d", c.Cache.MaxPulls, cache.DefaultMaxPulls)
	}
	if c.Cache.BandwidthBytesPerSec < 0 {
		bad("cache.bandwidthBytesPerSec", "bandwidth %d bytes a second is negative: give the bound, or leave it out for none", c.Cache.BandwidthBytesPerSec)
	}
	if c.Cache.ReserveBytes < 0 {
		bad("cache.reserveBytes", "reserve %d bytes is negative: give the bytes of the cache's filesystem to keep free, or leave it out for the default", c.Cache.ReserveBytes)
	}
	if c.Cache.RetryInterval < 0 {
		bad("cache.retryInterval", "retry interval %s is negative: give a duration such as \"5m\", or leave it out for 5 minutes", c.Cache.RetryInterval)
	}
	if !strings.HasPrefix(c.HTTPBase, "http://") {
		bad("httpBase", "httpBase %q: give the http:// URL machines reach the site at", c.HTTPBase)
	}
	if _, _, err := net.SplitHostPort(c.MetricsListen); c.MetricsListen != "" && err != nil {
		bad("metricsListen", "metricsListen %q: give host:port, such as 127.0.0.1:9464", c.MetricsListen)
	}
	return errors.Join(errs...)
}

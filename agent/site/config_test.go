package site

import (
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/better-compute/better-compute/boot"
	"github.com/better-compute/better-compute/proto"
)

func TestDecodeConfig(t *testing.T) {
	dir := t.TempDir()
	valid := `{"version": 1, "boot": {"interface": "eth0", "mode": "proxy", "serverIP": "10.0.0.1", "ipxeDir": "` + dir + `", "ramdiskDir": "` + dir + `", "httpPort": 8080, "retryInterval": "90s"},
	  "cache": {"dir": "` + dir + `"}}`
	c, err := decodeConfig("site.json", []byte(valid))
	if err != nil {
		t.Fatal(err)
	}
	if c.HTTPBase != "http://10.0.0.1:8080" || c.ConfigDir != "/etc/bcd" || c.Ramdisk.Kernel != "vmlinuz" || c.StateDir != "/var/lib/bcd/site" ||
		c.Boot.RetryInterval != boot.Duration(90*time.Second) {
		t.Errorf("defaults: %+v", c)
	}
	for name, tc := range map[string]struct {
		doc   string
		paths []string
	}{
		"unknown field":           {doc: strings.Replace(valid, `"version": 1`, `"version": 1, "colour": "red"`, 1), paths: []string{"colour"}},
		"duration in nanoseconds": {doc: strings.Replace(valid, `"90s"`, `90000000000`, 1), paths: []string{"boot.retryInterval"}},
		"duration without unit":   {doc: strings.Replace(valid, `"90s"`, `"90"`, 1), paths: []string{"boot.retryInterval"}},
		"port as text":            {doc: strings.Replace(valid, `8080`, `"8080"`, 1), paths: []string{"boot.httpPort"}},
		"metrics without a port":  {doc: strings.Replace(valid, `"version": 1`, `"version": 1, "metricsListen": "127.0.0.1"`, 1), paths: []string{"metricsListen"}},
		"negative cache reserve":  {doc: strings.Replace(valid, `"cache": {`, `"cache": {"reserveBytes": -1, `, 1), paths: []string{"cache.reserveBytes"}},
		"cache reserve as text":   {doc: strings.Replace(valid, `"cache": {`, `"cache": {"reserveBytes": "1G", `, 1), paths: []string{"cache.reserveBytes"}},
		"negative cache retry":    {doc: strings.Replace(valid, `"cache": {`, `"cache": {"retryInterval": "-1m", `, 1), paths: []string{"cache.retryInterval"}},
		"negative cache numbers": {doc: strings.Replace(valid, `"cache": {`, `"cache": {"capacityBytes": -1, "maxPulls": -1, "bandwidthBytesPerSec": -1, `, 1),
			paths: []string{"cache.capacityBytes", "cache.maxPulls", "cache.bandwidthBytesPerSec"}},
		"share of machines without an entry": {doc: strings.Replace(valid, `"mode": "proxy"`, `"mode": "authoritative", "subnet": "10.0.0.0/24", "range": {"start": "10.0.0.10", "end": "10.0.0.20"}, "leaseFile": "/tmp/leases.db", "unknownShare": 2, "unknownLeaseTime": "10s"`, 1),
			paths: []string{"boot.unknownShare", "boot.unknownLeaseTime"}},
		"every problem": {doc: `{"version": 2, "httpBase": "ftp://x"}`,
			paths: []string{"version", "boot.interface", "cache.dir", "httpBase"}},
		// A problem of the file as a whole is at ".", as every operator's file names it.
		"not an object": {doc: "[\n  1\n]\n", paths: []string{"."}},
		"not JSON":      {doc: "{\n  \"version\": 1,\n}", paths: []string{"."}},
		// The site resolves no BMC credential: a config that still names a secrets
		// directory is told where the secrets go now.
		"a secrets directory": {doc: strings.Replace(valid, `"version": 1`, `"version": 1, "bmc": {"secretsDir": "/etc/bcd/bmc"}`, 1), paths: []string{"bmc"}},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := decodeConfig("site.json", []byte(tc.doc))
			if strings.Contains(tc.doc, "secretsDir") && !strings.Contains(fmt.Sprint(err), "better-compute secrets put") {
				t.Errorf("%v: want it to say where the secrets go", err)
			}
			for _, p := range tc.paths {
				found := false
				for _, e := range flatten(err) {
					if pe, ok := errors.AsType[*proto.Error](e); ok && pe.Code == proto.InvalidConfig && pe.Details.Path == p {
						found = true
					}
				}
				if !found {
					t.Errorf("no INVALID_CONFIG at %q in %v", p, err)
				}
			}
		})
	}
}

// TestLoadConfigSaysWhereInTheFile: a mistake in the config file is refused with its
// path, and the file, line and column where it stands.
func TestLoadConfigSaysWhereInTheFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "site.json")
	for name, tc := range map[string]struct {
		doc, path, where string
	}{
		"unknown field": {"{\n  \"version\": 1,\n  \"colour\": \"red\"\n}\n", "colour", ":3:3: "},
		"wrong type":    {"{\n  \"version\": \"1\"\n}\n", "version", ":2:14: "},
		"duplicate key": {"{\"version\": 1,\n \"version\": 1}", "version", ":2:2: "},
		"not JSON":      {"{\n  \"version\": 1,\n}", ".", ":3:1: "},
		"not an object": {"[\n  1\n]\n", ".", ":1:1: "},
	} {
		t.Run(name, func(t *testing.T) {
			if err := os.WriteFile(path, []byte(tc.doc), 0o600); err != nil {
				t.Fatal(err)
			}
			_, err := LoadConfig(path)
			e := proto.AsError(err)
			if e.Code != proto.InvalidConfig || e.Details.Path != tc.path || !strings.HasPrefix(e.Message, path+tc.where) {
				t.Errorf("%v: want INVALID_CONFIG at %q starting %s%s", err, tc.path, path, tc.where)
			}
		})
	}
}

// TestDecodeRoutedConfig: a site serving routed rack subnets beside its own segment
// decodes, and an overlapping subnet is refused
// at its path.
func TestDecodeRoutedConfig(t *testing.T) {
	dir := t.TempDir()
	doc := `{"version": 1, "cache": {"dir": "` + dir + `"}, "boot": {"interface": "eth0", "mode": "authoritative", "serverIP": "10.20.0.2",
	  "ipxeDir": "` + dir + `", "ramdiskDir": "` + dir + `", "leaseFile": "` + dir + `/leases.db", "leaseTime": "2h",
	  "subnet": "10.20.0.0/24", "range": {"start": "10.20.0.100", "end": "10.20.0.199"},
	  "subnets": [{"subnet": "10.21.0.0/24", "range": {"start": "10.21.0.50", "end": "10.21.0.250"}, "router": "10.21.0.1", "leaseTime": "30m"},
	              {"subnet": "SECOND", "range": {"start": "10.22.0.10", "end": "10.22.0.20"}}]}}`
	c, err := decodeConfig("site.json", []byte(strings.Replace(doc, "SECOND", "10.22.0.0/24", 1)))
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Boot.Subnets) != 2 || c.Boot.Subnets[0].LeaseTime != boot.Duration(30*time.Minute) {
		t.Errorf("routed subnets %+v", c.Boot.Subnets)
	}
	_, err = decodeConfig("site.json", []byte(strings.Replace(strings.Replace(doc, "SECOND", "10.20.0.128/25", 1), "10.22.0.", "10.20.0.2", 2)))
	var paths []string
	for _, e := range flatten(err) {
		paths = append(paths, proto.AsError(e).Details.Path)
	}
	if len(paths) != 1 || paths[0] != "boot.subnets[1].subnet" {
		t.Errorf("overlapping subnet: %v", err)
	}
}

// flatten lists the errors joined in err.
func flatten(err error) []error {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		var out []error
		for _, e := range j.Unwrap() {
			out = append(out, flatten(e)...)
		}
		return out
	}
	return []error{err}
}

// FuzzDecodeConfig: any config file is decoded or refused as INVALID_CONFIG at a path,
// never a panic; an accepted one, written back as JSON, reads as the same config.
func FuzzDecodeConfig(f *testing.F) {
	f.Add([]byte(`{"version": 1, "boot": {"interface": "eth0", "mode": "proxy", "serverIP": "10.0.0.1"}, "cache": {"dir": "/c"}}`))
	f.Add([]byte(`{"version": 1, "ramdisk": {"args": ["console=ttyS0"]}, "bmc": {"secretsDir": "/s"}, "httpBase": "http://x"}`))
	f.Add([]byte(`{"boot": {"range": {"start": "10.0.0.9", "end": "10.0.0.1"}, "leaseTime": "-1m"}}`))
	dir := f.TempDir()
	f.Add([]byte(`{"version": 1, "boot": {"interface": "eth0", "mode": "proxy", "serverIP": "10.0.0.1", "ipxeDir": "` + dir + `", "ramdiskDir": "` + dir + `", "httpPort": 8080, "retryInterval": "90s"}, "cache": {"dir": "` + dir + `"}}`))
	f.Add([]byte(`{"version": 1, "boot": {"interface": "eth0", "mode": "authoritative", "serverIP": "10.0.0.1", "ipxeDir": "` + dir + `", "ramdiskDir": "` + dir + `", "range": {"start": "10.0.0.100", "end": "10.0.0.200"}, "leaseTime": "1h"}, "cache": {"dir": "` + dir + `", "capacityBytes": 1000}, "ramdisk": {"args": ["console=ttyS0"]}}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := decodeConfig("site.json", data)
		if err != nil {
			for _, e := range flatten(err) {
				if pe := proto.AsError(e); pe.Code != proto.InvalidConfig || pe.Details.Path == "" {
					t.Fatalf("%v: want INVALID_CONFIG at a path", e)
				}
			}
			return
		}
		text, err := json.Marshal(c)
		if err != nil {
			t.Fatalf("an accepted config does not encode: %v", err)
		}
		again, err := decodeConfig("site.json", text)
		if err != nil || !reflect.DeepEqual(again, c) {
			t.Fatalf("%q accepted as %+v; written back as %s, it reads as %+v, %v", data, c, text, again, err)
		}
	})
}

// A cache reserve the cache's filesystem cannot keep (not less than its size) is refused
// when the site opens its cache, as INVALID_CONFIG at cache.reserveBytes, the field as
// the site's config names it.
func TestReservePastTheFilesystemIsRefused(t *testing.T) {
	files := t.TempDir()
	cfg := Config{StateDir: t.TempDir(), Cache: CacheConfig{Dir: t.TempDir(), ReserveBytes: 1 << 62},
		Boot: boot.Config{Interface: "bc0", Mode: boot.Proxy, ServerIP: netip.MustParseAddr("10.0.0.1"), IPXEDir: files, RamdiskDir: files}}
	a, srv, err := open(cfg, slog.New(slog.DiscardHandler))
	if err == nil {
		a.cache.Close()
		srv.Close()
	}
	if pe, ok := errors.AsType[*proto.Error](err); !ok || pe.Code != proto.InvalidConfig || pe.Details.Path != "cache.reserveBytes" {
		t.Fatalf("open with a reserve of 2^62 bytes: %v, want INVALID_CONFIG at cache.reserveBytes", err)
	}
}

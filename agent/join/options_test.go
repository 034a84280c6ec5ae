package join

import (
	"testing"

	"github.com/better-compute/better-compute/proto"
)

func TestOptionsCheck(t *testing.T) {
	const pin = "sha256/47DEQpj8HBSa+/TImW+5JCeuQeRkm5NMpJWZG3hSuFU="
	good := Options{Server: "https://registry.example:7443", TokenFile: "/etc/bcd/join-token", NodeID: "n1", Role: "node", ConfigDir: "/etc/bcd"}
	good.Pins.ServingCA, good.Pins.JoinSigning, good.Pins.JoinEncryption = pin, pin, pin
	cases := map[string]struct {
		mutate func(o *Options)
		path   string
	}{
		"good":                   {func(o *Options) {}, ""},
		"http server":            {func(o *Options) { o.Server = "http://registry.example" }, "--server"},
		"no server":              {func(o *Options) { o.Server = "" }, "--server"},
		"no token file":          {func(o *Options) { o.TokenFile = "" }, "--token-file"},
		"bad node id":            {func(o *Options) { o.NodeID = "N 1" }, "--node-id"},
		"bad role":               {func(o *Options) { o.Role = "admin" }, "--role"},
		"no config dir":          {func(o *Options) { o.ConfigDir = "" }, "--config-dir"},
		"no serving CA pin":      {func(o *Options) { o.Pins.ServingCA = "" }, "--serving-ca-pin"},
		"no join signing pin":    {func(o *Options) { o.Pins.JoinSigning = "" }, "--join-signing-pin"},
		"no join encryption pin": {func(o *Options) { o.Pins.JoinEncryption = "" }, "--join-encryption-pin"},
		"malformed pin":          {func(o *Options) { o.Pins.JoinSigning = "sha1/abc" }, "--join-signing-pin"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			o := good
			tc.mutate(&o)
			_, err := o.Check()
			if tc.path == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if e := proto.AsError(err); e.Code != proto.InvalidConfig || e.Details.Path != tc.path {
				t.Fatalf("got %v, want INVALID_CONFIG at %s", err, tc.path)
			}
		})
	}
}

package userdata

import (
	"testing"

	"github.com/better-compute/better-compute/jsondoc"
	"github.com/better-compute/better-compute/proto"
	"github.com/better-compute/better-compute/proto/joinwire"
	"github.com/google/go-cmp/cmp"
)

func validConfig() Config {
	v := testVars(testPins)
	pins := testPins
	return Config{ControlPlaneURL: v.ControlPlaneURL, BcdURL: v.BcdURL, BcdSHA256: v.BcdSHA256, Pins: &pins}
}

func TestConfigCheck(t *testing.T) {
	text, err := ParseTemplate("machine: {{nodeId}}\n")
	if err != nil {
		t.Fatal(err)
	}
	cases := map[string]struct {
		change func(c *Config)
		path   string // "" when the config is valid
	}{
		"valid":                 {func(c *Config) {}, ""},
		"empty":                 {func(c *Config) { *c = Config{} }, ""},
		"no pins":               {func(c *Config) { c.Pins = nil }, ""},
		"ipv6 control plane":    {func(c *Config) { c.ControlPlaneURL = "https://[fd00::1]:7443" }, ""},
		"presigned bcd url":     {func(c *Config) { c.BcdURL = "https://s3.example/b?a=1&b=%2F#frag" }, ""},
		"http bcd url":          {func(c *Config) { c.BcdURL = "http://cache.site-a:8080/bcd" }, ""},
		"custom template":       {func(c *Config) { c.Templates = map[string]Template{"talos-worker.yaml": text} }, ""},
		"ttl":                   {func(c *Config) { c.TokenTTLSeconds = 600 }, ""},
		"http control plane":    {func(c *Config) { c.ControlPlaneURL = "http://registry.example" }, "userData.controlPlaneUrl"},
		"control plane space":   {func(c *Config) { c.ControlPlaneURL = "https://registry.example/ x" }, "userData.controlPlaneUrl"},
		"control plane quote":   {func(c *Config) { c.ControlPlaneURL = `https://registry.example/"` }, "userData.controlPlaneUrl"},
		"control plane percent": {func(c *Config) { c.ControlPlaneURL = "https://registry.example/%n" }, "userData.controlPlaneUrl"},
		"control plane dollar":  {func(c *Config) { c.ControlPlaneURL = "https://registry.example/$HOME" }, "userData.controlPlaneUrl"},
		"control plane amp":     {func(c *Config) { c.ControlPlaneURL = "https://registry.example/?a&b" }, "userData.controlPlaneUrl"},
		"control plane semi":    {func(c *Config) { c.ControlPlaneURL = "https://registry.example/;reboot" }, "userData.controlPlaneUrl"},
		"control plane subst":   {func(c *Config) { c.ControlPlaneURL = "https://$(reboot)" }, "userData.controlPlaneUrl"},
		"control plane tick":    {func(c *Config) { c.ControlPlaneURL = "https://`reboot`" }, "userData.controlPlaneUrl"},
		"control plane hash":    {func(c *Config) { c.ControlPlaneURL = "https://registry.example/#x" }, "userData.controlPlaneUrl"},
		"control plane newline": {func(c *Config) { c.ControlPlaneURL = "https://registry.example\n" }, "userData.controlPlaneUrl"},
		"control plane u2028":   {func(c *Config) { c.ControlPlaneURL = "https://registry.example\u2028" }, "userData.controlPlaneUrl"},
		"control plane braces":  {func(c *Config) { c.ControlPlaneURL = "https://{{nodeId}}" }, "userData.controlPlaneUrl"},
		"control plane user":    {func(c *Config) { c.ControlPlaneURL = "https://user@registry.example" }, "userData.controlPlaneUrl"},
		"control plane no host": {func(c *Config) { c.ControlPlaneURL = "https:///x" }, "userData.controlPlaneUrl"},
		"control plane bracket": {func(c *Config) { c.ControlPlaneURL = "https://[registry]" }, "userData.controlPlaneUrl"},
		"control plane opaque":  {func(c *Config) { c.ControlPlaneURL = "https:registry" }, "userData.controlPlaneUrl"},
		"bcd url single quote":  {func(c *Config) { c.BcdURL = "https://x/'; reboot; '" }, "userData.bcdUrl"},
		"bcd url double quote":  {func(c *Config) { c.BcdURL = `https://x/"` }, "userData.bcdUrl"},
		"bcd url backslash":     {func(c *Config) { c.BcdURL = `https://x/\` }, "userData.bcdUrl"},
		"bcd url space":         {func(c *Config) { c.BcdURL = "https://x/a b" }, "userData.bcdUrl"},
		"bcd url tab":           {func(c *Config) { c.BcdURL = "https://x/a\tb" }, "userData.bcdUrl"},
		"bcd url newline":       {func(c *Config) { c.BcdURL = "https://x/a\nb" }, "userData.bcdUrl"},
		"bcd url nel":           {func(c *Config) { c.BcdURL = "https://x/a\u0085b" }, "userData.bcdUrl"},
		"bcd url braces":        {func(c *Config) { c.BcdURL = "https://x/{{joinToken}}" }, "userData.bcdUrl"},
		"bcd url ftp":           {func(c *Config) { c.BcdURL = "ftp://x/bcd" }, "userData.bcdUrl"},
		"bcd url relative":      {func(c *Config) { c.BcdURL = "/bcd" }, "userData.bcdUrl"},
		"digest upper":          {func(c *Config) { c.BcdSHA256 = "9F86D081884C7D659A2FEAA0C55AD015A3BF4F1B2B0B822CD15D6C15B0F00A08" }, "userData.bcdSha256"},
		"digest short":          {func(c *Config) { c.BcdSHA256 = "9f86d0" }, "userData.bcdSha256"},
		"digest injected":       {func(c *Config) { c.BcdSHA256 += "' ; reboot" }, "userData.bcdSha256"},
		"pins empty":            {func(c *Config) { c.Pins = &joinwire.Pins{} }, "userData.pins.servingCaPin"},
		"pins partial":          {func(c *Config) { c.Pins.JoinSigning = "" }, "userData.pins.joinSigningPin"},
		"pin no prefix":         {func(c *Config) { c.Pins.JoinEncryption = "9nQZM6Vs/u1c+lfUC0WggxOASERT7wGnQezSEinXN10=" }, "userData.pins.joinEncryptionPin"},
		"pin short digest":      {func(c *Config) { c.Pins.ServingCA = "sha256/AAAA" }, "userData.pins.servingCaPin"},
		"pin injected":          {func(c *Config) { c.Pins.ServingCA = testPins.ServingCA + "\n- evil" }, "userData.pins.servingCaPin"},
		"template name":         {func(c *Config) { c.Templates = map[string]Template{"../x": text} }, "userData.templates.../x"},
		"template shipped name": {func(c *Config) { c.Templates = map[string]Template{CloudInitTemplate: text} }, "userData.templates.bcd-host.yaml.hbs"},
		"template nil":          {func(c *Config) { c.Templates = map[string]Template{"t": nil} }, "userData.templates.t"},
		"ttl negative":          {func(c *Config) { c.TokenTTLSeconds = -1 }, "userData.tokenTtlSeconds"},
		"ttl too long":          {func(c *Config) { c.TokenTTLSeconds = 31 * 24 * 3600 }, "userData.tokenTtlSeconds"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			c := validConfig()
			tc.change(&c)
			err := c.Check()
			if tc.path == "" {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			e := proto.AsError(err)
			if e.Code != proto.InvalidConfig || e.Details.Path != tc.path {
				t.Fatalf("err = %v, want INVALID_CONFIG at %s", err, tc.path)
			}
		})
	}
}

func TestParseConfig(t *testing.T) {
	pins := testPins
	cases := map[string]struct {
		file string
		want Config
		path string // of the error, "-" for one without a path
	}{
		"full": {
			file: `{"controlPlaneUrl": "https://r.example", "bcdUrl": "https://c.example/bcd", "bcdSha256": "` + testVars(testPins).BcdSHA256 + `",
				"pins": {"servingCaPin": "` + pins.ServingCA + `", "joinSigningPin": "` + pins.JoinSigning + `", "joinEncryptionPin": "` + pins.JoinEncryption + `"},
				"tokenTtlSeconds": 900}`,
			want: Config{ControlPlaneURL: "https://r.example", BcdURL: "https://c.example/bcd", BcdSHA256: testVars(testPins).BcdSHA256, Pins: &pins, TokenTTLSeconds: 900},
		},
		"empty":            {file: `{}`},
		"unknown field":    {file: `{"controlPlaneURL": "https://r.example"}`, path: "userData.controlPlaneURL"},
		"unknown pin":      {file: `{"pins": {"caPin": "x"}}`, path: "userData.pins.caPin"},
		"pin case":         {file: `{"pins": {"servingCAPin": "x"}}`, path: "userData.pins.servingCAPin"},
		"wrong type":       {file: `{"tokenTtlSeconds": "2h"}`, path: "userData.tokenTtlSeconds"},
		"ttl zero":         {file: `{"tokenTtlSeconds": 0}`, path: "userData.tokenTtlSeconds"},
		"bad template":     {file: `{"templates": {"t.yaml": "id: {{nodeid}}"}}`, path: "userData.templates.t.yaml"},
		"unclosed":         {file: `{"templates": {"t.yaml": "id: {{nodeId"}}`, path: "userData.templates.t.yaml"},
		"trailing":         {file: `{} {}`, path: "-"},
		"duplicate key":    {file: `{"bcdUrl": "https://a.example/bcd", "bcdUrl": "https://b.example/bcd"}`, path: "userData.bcdUrl"},
		"not json":         {file: `controlPlaneUrl: x`, path: "-"},
		"template as list": {file: `{"templates": ["x"]}`, path: "userData.templates"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got, err := ParseConfig([]byte(tc.file))
			if tc.path != "" {
				e := proto.AsError(err)
				if e.Code != proto.InvalidConfig || (tc.path != "-" && e.Details.Path != tc.path) {
					t.Fatalf("err = %v, want INVALID_CONFIG at %s", err, tc.path)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("config (-want +got):\n%s", diff)
			}
		})
	}
	got, err := ParseConfig([]byte(`{"templates": {"talos-worker.yaml": "machine:\n  name: {{ hostname }}\n"}}`))
	if err != nil {
		t.Fatal(err)
	}
	doc, err := got.Templates["talos-worker.yaml"].Render(testVars(testPins))
	if err != nil || string(doc) != "machine:\n  name: gpu-node-01\n" {
		t.Errorf("rendered %q, %v", doc, err)
	}
}

// ParseConfig reads a configuration file's JSON: the fields of Config, with templates
// as texts. It is decoded strictly (jsondoc.Decoder: unknown fields, names that match
// only in case, duplicate keys and wrong types are INVALID_CONFIG naming them), and
// templates that do not parse are INVALID_CONFIG naming them; the values are checked by
// Check.
func ParseConfig(data []byte) (Config, error) {
	return parseConfig(jsondoc.Decoder{Name: "user-data configuration", Code: proto.InvalidConfig, At: configPath}, data)
}

package userdata

import (
	"errors"
	"fmt"
	"maps"
	"net"
	"net/url"
	"os"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/better-compute/better-compute/jsondoc"
	"github.com/better-compute/better-compute/proto"
	"github.com/better-compute/better-compute/proto/joinwire"
	"github.com/better-compute/better-compute/registry/join"
)

// Config is what the registry renders user data with (serve --userdata-config FILE).
// The URLs and the digest may be left out, but then rendering fails with
// INVALID_CONFIG.
type Config struct {
	// ControlPlaneURL is the registry's https URL as installed nodes reach it; bcd join
	// gets it as --server.
	ControlPlaneURL string `json:"controlPlaneUrl,omitempty"`
	// BcdURL is where installed nodes download bcd; a presigned URL's & and % are fine.
	BcdURL string `json:"bcdUrl,omitempty"`
	// BcdSHA256 is the hex SHA-256 of the bcd binary at BcdURL.
	BcdSHA256 string `json:"bcdSha256,omitempty"`
	// Pins are the registry's pins as the host's PKI bundle gives them; the registry
	// defaults them to its own when left out.
	Pins *joinwire.Pins `json:"pins,omitempty"`
	// Templates are custom templates by name, beside the shipped ones. A config file
	// gives them as texts with {{name}} placeholders.
	Templates map[string]Template `json:"-"`
	// TokenTTLSeconds is how long a provisioned join token lives; 0 (left out of the
	// file: a file's 0 is refused) is 2 hours.
	TokenTTLSeconds int64 `json:"tokenTtlSeconds,omitempty"`
}

// configPath roots the paths of configuration errors, as the specification names the
// configuration.
const configPath = "userData"

// maxURLLen bounds the URLs.
const maxURLLen = 2048

// plainURLChars are the characters a controlPlaneUrl may hold: none that a shell,
// systemd (% specifiers, $ variables, quotes, backslashes) or YAML reads specially.
var plainURLChars = regexp.MustCompile(`^[A-Za-z0-9._~:/\[\]-]+$`)

// Check refuses a configuration the registry cannot render with, INVALID_CONFIG naming
// the first offending field (userData.bcdUrl, userData.pins.joinSigningPin, ...).
func (c Config) Check() error {
	if c.ControlPlaneURL != "" {
		if err := checkControlPlaneURL(c.ControlPlaneURL); err != nil {
			return fieldError("controlPlaneUrl", err)
		}
	}
	if c.BcdURL != "" {
		if err := checkBcdURL(c.BcdURL); err != nil {
			return fieldError("bcdUrl", err)
		}
	}
	if c.BcdSHA256 != "" && !proto.IsDigest(c.BcdSHA256) {
		return fieldError("bcdSha256", fmt.Errorf("%q is not a SHA-256 digest: give 64 lower-case hex digits", c.BcdSHA256))
	}
	if c.Pins != nil {
		if err := checkPins(*c.Pins); err != nil {
			return err
		}
	}
	for _, name := range slices.Sorted(maps.Keys(c.Templates)) {
		if err := checkTemplateEntry(name, c.Templates[name]); err != nil {
			return err
		}
	}
	if c.TokenTTLSeconds < 0 || c.TokenTTLSeconds > int64(join.MaxTTL/time.Second) {
		return fieldError("tokenTtlSeconds", fmt.Errorf("a join token lives 1 to %d seconds, not %d", int64(join.MaxTTL/time.Second), c.TokenTTLSeconds))
	}
	return nil
}

func fieldError(field string, err error) *proto.Error {
	return proto.Errorf(proto.InvalidConfig, "%s.%s: %v", configPath, field, err).WithPath(configPath + "." + field)
}

// checkControlPlaneURL accepts an https URL whose every character is plain: it is an
// argument on bcd's command line in a shell-free YAML list and in a systemd unit.
func checkControlPlaneURL(s string) error {
	if len(s) > maxURLLen {
		return fmt.Errorf("the URL is longer than %d bytes", maxURLLen)
	}
	if !plainURLChars.MatchString(s) {
		return fmt.Errorf("%q holds a character that is not plain: use letters, digits and . _ ~ : / - (and [ ] around an IPv6 address) only", s)
	}
	u, err := url.Parse(s)
	switch {
	case err != nil || u.Scheme != "https" || u.Host == "" || u.Opaque != "":
		return fmt.Errorf("%q is not an https://host[:port] URL (bcd joins over https only)", s)
	case strings.Contains(u.Host, "[") && net.ParseIP(u.Hostname()) == nil:
		return fmt.Errorf("%q: brackets hold an IPv6 address, nothing else", s)
	}
	return nil
}

// checkBcdURL accepts an http(s) URL without quotes, backslashes, white space or other
// control characters: it is single-quoted for sh -c, so & and % are fine.
func checkBcdURL(s string) error {
	if len(s) > maxURLLen {
		return fmt.Errorf("the URL is longer than %d bytes", maxURLLen)
	}
	if strings.ContainsFunc(s, func(r rune) bool { return r <= ' ' || r >= 0x7f || strings.ContainsRune(`'"\`, r) }) {
		return fmt.Errorf("%q may not hold quotes, backslashes, white space, control or non-ASCII characters", s)
	}
	if strings.Contains(s, "{{") {
		return fmt.Errorf(`%q may not hold "{{"`, s)
	}
	u, err := url.Parse(s)
	if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" || u.Opaque != "" {
		return fmt.Errorf("%q is not an http(s) URL", s)
	}
	return nil
}

// checkPins accepts all three well-formed pins.
func checkPins(p joinwire.Pins) error {
	for _, f := range []struct{ name, pin string }{
		{"servingCaPin", p.ServingCA}, {"joinSigningPin", p.JoinSigning}, {"joinEncryptionPin", p.JoinEncryption},
	} {
		if f.pin == "" {
			return fieldError("pins."+f.name, errors.New("give all three pins (servingCaPin, joinSigningPin, joinEncryptionPin) or leave pins out"))
		}
		if err := joinwire.CheckPin(f.pin); err != nil {
			return fieldError("pins."+f.name, err)
		}
	}
	return nil
}

// checkTemplateEntry accepts a custom template under a name a profile can give that
// is not a shipped template's.
func checkTemplateEntry(name string, t Template) error {
	field := "templates." + name
	switch {
	case !proto.IsTemplateName(name):
		return fieldError(field, fmt.Errorf("%q is not a template name: 1 to 128 of a-z, 0-9, ., _ and -, starting with a letter or digit", name))
	case shipped[name] != nil:
		return fieldError(field, fmt.Errorf("%s is a shipped template: give yours another name", name))
	case t == nil:
		return fieldError(field, errors.New("the template is missing"))
	}
	return nil
}

// fileConfig is the configuration file's shape: Config's fields, with templates as texts.
type fileConfig struct {
	Config
	Templates map[string]string `json:"templates"`
	// TokenTTLSeconds is the file's, given or left out: a lifetime of 0 given is refused,
	// where leaving it out takes the 2 hours.
	TokenTTLSeconds *int64 `json:"tokenTtlSeconds"`
}

func parseConfig(d jsondoc.Decoder, data []byte) (Config, error) {
	var f fileConfig
	if err := d.Decode(data, &f); err != nil {
		return Config{}, err
	}
	cfg := f.Config
	if f.TokenTTLSeconds != nil {
		if *f.TokenTTLSeconds == 0 {
			return Config{}, fieldError("tokenTtlSeconds", fmt.Errorf("a join token lives 1 to %d seconds, not 0: give its lifetime, or leave tokenTtlSeconds out for 2 hours", int64(join.MaxTTL/time.Second)))
		}
		cfg.TokenTTLSeconds = *f.TokenTTLSeconds
	}
	for _, name := range slices.Sorted(maps.Keys(f.Templates)) {
		t, err := ParseTemplate(f.Templates[name])
		if err != nil {
			e := proto.AsError(err)
			return Config{}, fieldError("templates."+name, errors.New(e.Message))
		}
		if cfg.Templates == nil {
			cfg.Templates = map[string]Template{}
		}
		cfg.Templates[name] = t
	}
	return cfg, nil
}

// LoadConfig reads and parses a configuration file.
func LoadConfig(path string) (Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return Config{}, proto.Errorf(proto.InvalidConfig, "user-data configuration: %v", err)
	}
	return parseConfig(jsondoc.Decoder{Name: path, File: true, Code: proto.InvalidConfig, At: configPath}, data)
}

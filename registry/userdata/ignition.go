package userdata

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"regexp"
	"strings"

	"github.com/better-compute/better-compute/proto"
	"github.com/better-compute/better-compute/proto/bcdargv"
	"github.com/coreos/ignition/v2/config/v3_4/types"
)

// IgnitionTemplate is the name of the shipped Ignition template.
const IgnitionTemplate = "bcd-host.ign"

// systemdPlain are the characters an argument of a unit's ExecStart may hold as it is:
// no white space, quotes, backslashes, % specifiers or $ variables.
var systemdPlain = regexp.MustCompile(`^[A-Za-z0-9._~:/\[\]+=@,-]+$`)

// ignition renders bcd-host.ign, an Ignition 3.4.0 config built as data: the token in a
// 0600 file, bcd downloaded from bcdUrl and checked by its sha256, bcd-join.service (a
// oneshot that runs while the token file exists) and bcd.service after it. The values
// on the units' command lines must be plain (they are: the configuration and the node
// id are checked for it), else INVALID_CONFIG names the variable.
func ignition(v Vars) ([]byte, error) {
	for _, name := range []string{"controlPlaneUrl", "nodeId", "servingCaPin", "joinSigningPin", "joinEncryptionPin"} {
		value, _ := v.Lookup(name)
		if value != "" && !systemdPlain.MatchString(value) {
			return nil, proto.Errorf(proto.InvalidConfig, "%s %q cannot be an argument on a unit's command line as it is: only letters, digits and . _ ~ : / [ ] + = @ , -", name, value).WithPath(name)
		}
	}
	joinUnit := `[Unit]
Description=better-compute node join
ConditionPathExists=` + bcdargv.TokenFile + `
Wants=network-online.target
After=network-online.target
[Service]
Type=oneshot
ExecStart=` + strings.Join(bcdargv.Join(v.ControlPlaneURL, v.NodeID, v.Pins), " ") + `
[Install]
WantedBy=multi-user.target
`
	agentUnit := nodeUnit("bcd-join.service")
	cfg := types.Config{
		Ignition: types.Ignition{Version: types.MaxVersion.String()},
		Storage: types.Storage{Files: []types.File{
			{
				Node: types.Node{Path: bcdargv.TokenFile, Overwrite: ptr(true)},
				FileEmbedded1: types.FileEmbedded1{
					Mode:     ptr(0o600),
					Contents: types.Resource{Source: ptr("data:;base64," + base64.StdEncoding.EncodeToString([]byte(v.JoinToken)))},
				},
			},
			{
				Node: types.Node{Path: bcdargv.Path, Overwrite: ptr(true)},
				FileEmbedded1: types.FileEmbedded1{
					Mode: ptr(0o755),
					Contents: types.Resource{
						Source:       ptr(v.BcdURL),
						Verification: types.Verification{Hash: ptr("sha256-" + v.BcdSHA256)},
					},
				},
			},
		}},
		Systemd: types.Systemd{Units: []types.Unit{
			{Name: "bcd-join.service", Enabled: ptr(true), Contents: &joinUnit},
			{Name: "bcd.service", Enabled: ptr(true), Contents: &agentUnit},
		}},
	}
	raw, err := json.Marshal(cfg)
	if err != nil {
		return nil, err
	}
	// The types write empty objects for every section left out; drop them.
	var doc any
	if err := json.Unmarshal(raw, &doc); err != nil {
		return nil, err
	}
	var out bytes.Buffer
	enc := proto.NewEncoder(&out)
	enc.SetIndent("", "  ")
	err = enc.Encode(pruneEmpty(doc))
	return out.Bytes(), err
}

func ptr[T any](v T) *T { return &v }

// pruneEmpty drops the members of objects that are empty objects once pruned
// themselves; Ignition reads an empty object and a missing one alike.
func pruneEmpty(v any) any {
	switch v := v.(type) {
	case map[string]any:
		for k, m := range v {
			m = pruneEmpty(m)
			if obj, ok := m.(map[string]any); ok && len(obj) == 0 {
				delete(v, k)
				continue
			}
			v[k] = m
		}
	case []any:
		for i := range v {
			v[i] = pruneEmpty(v[i])
		}
	}
	return v
}

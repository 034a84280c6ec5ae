package userdata

import (
	"fmt"
	"strings"

	"github.com/better-compute/better-compute/proto/bcdargv"
)

// CloudInitTemplate is the name of the shipped cloud-init template.
const CloudInitTemplate = "bcd-host.yaml.hbs"

// nodeUnit is bcd.service, the unit that runs the node agent once the node has joined,
// in both templates; requires are the units it needs started first (Ignition's
// bcd-join.service; cloud-init joins in runcmd, before the unit is enabled).
func nodeUnit(requires ...string) string {
	var b strings.Builder
	b.WriteString("[Unit]\nDescription=better-compute node agent\nWants=network-online.target\nAfter=network-online.target bcd-join.service\n")
	for _, r := range requires {
		b.WriteString("Requires=" + r + "\n")
	}
	b.WriteString("[Service]\nExecStart=" + strings.Join(bcdargv.Node(), " ") + "\nRestart=always\nRestartSec=5\n[Install]\nWantedBy=multi-user.target\n")
	return b.String()
}

// cloudInit renders bcd-host.yaml.hbs: the token in a 0600 file, bcd.service, bcd
// downloaded and its digest checked, the join, then the node agent started. Every
// value is a YAML double-quoted scalar, and bcdUrl and bcdSha256 are also single-quoted
// for the shell, so no value can change the document's structure or the commands.
func cloudInit(v Vars) ([]byte, error) {
	var b strings.Builder
	b.WriteString("#cloud-config\n")
	fmt.Fprintf(&b, "hostname: %s\n", yamlString(v.Hostname))
	b.WriteString("write_files:\n")
	fmt.Fprintf(&b, "  - path: %s\n", bcdargv.TokenFile)
	b.WriteString("    permissions: '0600'\n")
	fmt.Fprintf(&b, "    content: %s\n", yamlString(v.JoinToken))
	b.WriteString("  - path: /etc/systemd/system/bcd.service\n")
	b.WriteString("    permissions: '0644'\n")
	b.WriteString("    content: |\n")
	for line := range strings.Lines(nodeUnit()) {
		b.WriteString("      " + line)
	}
	b.WriteString("runcmd:\n")
	fmt.Fprintf(&b, "  - %s\n", yamlFlowList([]string{"sh", "-c", downloadCommand(v.BcdURL, v.BcdSHA256)}))
	fmt.Fprintf(&b, "  - %s\n", yamlFlowList(bcdargv.Join(v.ControlPlaneURL, v.NodeID, v.Pins)))
	b.WriteString("  - [systemctl, enable, --now, bcd.service]\n")
	return []byte(b.String()), nil
}

// downloadCommand is the shell command that downloads bcd, checks its digest and makes
// it executable.
func downloadCommand(bcdURL, sha256 string) string {
	return fmt.Sprintf("curl -fsSL %s -o %s && echo %s | sha256sum -c - && chmod 0755 %s",
		shellQuote(bcdURL), bcdargv.Path, shellQuote(sha256+"  "+bcdargv.Path), bcdargv.Path)
}

// shellQuote single-quotes s for sh: inside single quotes nothing is special, and a
// single quote ends the quoting, is escaped with a backslash and the quoting resumes.
func shellQuote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// yamlFlowList writes a YAML flow sequence of double-quoted scalars.
func yamlFlowList(items []string) string {
	quoted := make([]string, len(items))
	for i, s := range items {
		quoted[i] = yamlString(s)
	}
	return "[" + strings.Join(quoted, ", ") + "]"
}

// yamlString writes s as a YAML double-quoted scalar: backslash and double quote are
// escaped, and so is every character YAML could read as a line break or does not allow
// in a stream (control characters, the byte order mark, U+FFFE and U+FFFF), so the
// scalar is one line and reads back as exactly s.
func yamlString(s string) string {
	var b strings.Builder
	b.WriteByte('"')
	for _, r := range s {
		switch {
		case r == '"' || r == '\\':
			b.WriteByte('\\')
			b.WriteRune(r)
		case r < 0x20 || r >= 0x7f && r <= 0x9f || r == '\u2028' || r == '\u2029' || r == '\ufeff' || r == '\ufffe' || r == '\uffff':
			fmt.Fprintf(&b, `\u%04X`, r)
		default:
			b.WriteRune(r)
		}
	}
	b.WriteByte('"')
	return b.String()
}

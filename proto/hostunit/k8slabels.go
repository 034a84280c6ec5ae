package hostunit

import (
	"fmt"
	"regexp"
	"slices"
	"strings"

	"github.com/better-compute/better-compute/proto"
)

var (
	// labelName is the name part of a Kubernetes label key and a label value.
	labelName = regexp.MustCompile(`^[A-Za-z0-9]([A-Za-z0-9_.-]*[A-Za-z0-9])?$`)
	// dnsSubdomain is the prefix part of a label key.
	dnsSubdomain = regexp.MustCompile(`^[a-z0-9]([a-z0-9-]*[a-z0-9])?(\.[a-z0-9]([a-z0-9-]*[a-z0-9])?)*$`)
)

// selfLabels are the kubernetes.io labels a kubelet may set on its own node; the
// NodeRestriction admission plugin refuses the others, and the kubelet does not start
// with them.
var selfLabels = []string{
	"kubernetes.io/hostname", "kubernetes.io/arch", "kubernetes.io/os",
	"beta.kubernetes.io/instance-type", "node.kubernetes.io/instance-type",
	"beta.kubernetes.io/arch", "beta.kubernetes.io/os",
	"failure-domain.beta.kubernetes.io/region", "failure-domain.beta.kubernetes.io/zone",
	"topology.kubernetes.io/region", "topology.kubernetes.io/zone",
}

// checkLabelKey accepts a Kubernetes label key: an optional DNS subdomain prefix (at most
// 253 bytes) and a slash, then a name of at most 63 bytes.
func checkLabelKey(key string) error {
	prefix, name, hasPrefix := strings.Cut(key, "/")
	if !hasPrefix {
		prefix, name = "", key
	}
	if hasPrefix && (len(prefix) > 253 || !dnsSubdomain.MatchString(prefix)) {
		return fmt.Errorf("%s: the prefix must be a lower-case DNS subdomain of at most 253 bytes", proto.Quote(key))
	}
	if len(name) > 63 || !labelName.MatchString(name) {
		return fmt.Errorf("%s: the name must be at most 63 letters, digits, -, _ and ., starting and ending with a letter or digit", proto.Quote(key))
	}
	return nil
}

// checkNodeLabelKey accepts a label key a kubelet may register its node with.
func checkNodeLabelKey(key string) error {
	if err := checkLabelKey(key); err != nil {
		return err
	}
	prefix, _, _ := strings.Cut(key, "/")
	if !inKubernetesNamespace(prefix) || slices.Contains(selfLabels, key) {
		return nil
	}
	if prefix == "node-restriction.kubernetes.io" || !isSelfPrefix(prefix) {
		return fmt.Errorf("%s: a node may not label itself in the %s namespace (node-role labels are set from the cluster)", proto.Quote(key), prefix)
	}
	return nil
}

func inKubernetesNamespace(prefix string) bool {
	for _, ns := range []string{"kubernetes.io", "k8s.io"} {
		if prefix == ns || strings.HasSuffix(prefix, "."+ns) {
			return true
		}
	}
	return false
}

// isSelfPrefix reports the kubernetes.io prefixes a kubelet may use freely.
func isSelfPrefix(prefix string) bool {
	for _, ns := range []string{"kubelet.kubernetes.io", "node.kubernetes.io"} {
		if prefix == ns || strings.HasSuffix(prefix, "."+ns) {
			return true
		}
	}
	return false
}

// checkLabelValue accepts a Kubernetes label value: empty, or at most 63 letters, digits,
// -, _ and ., starting and ending with a letter or digit.
func checkLabelValue(value string) error {
	if value != "" && (len(value) > 63 || !labelName.MatchString(value)) {
		return fmt.Errorf("%s is not a label value: at most 63 letters, digits, -, _ and ., starting and ending with a letter or digit", proto.Quote(value))
	}
	return nil
}

// checkTaint accepts key=value:Effect or key:Effect.
func checkTaint(taint string) error {
	kv, effect, ok := cutLast(taint, ":")
	if !ok {
		return fmt.Errorf("%s is not a taint key=value:Effect", proto.Quote(taint))
	}
	switch effect {
	case "NoSchedule", "PreferNoSchedule", "NoExecute":
	default:
		return fmt.Errorf("%s: the effect must be NoSchedule, PreferNoSchedule or NoExecute", proto.Quote(taint))
	}
	key, value, _ := strings.Cut(kv, "=")
	if err := checkLabelKey(key); err != nil {
		return fmt.Errorf("taint key %w", err)
	}
	if err := checkLabelValue(value); err != nil {
		return fmt.Errorf("taint value %w", err)
	}
	return nil
}

func cutLast(s, sep string) (before, after string, found bool) {
	i := strings.LastIndex(s, sep)
	if i < 0 {
		return s, "", false
	}
	return s[:i], s[i+len(sep):], true
}

package hostunit

import (
	"fmt"
	"regexp"
	"strings"

	"github.com/better-compute/better-compute/proto"
)

// MaxSecretRef bounds a secret reference, secret:// included.
const MaxSecretRef = 256

// SecretRefRule says what a secret reference is, for the messages that refuse one.
var SecretRefRule = fmt.Sprintf("must be a secret reference secret://name, parts of letters, digits, ., _ and - between slashes, at most %d bytes", MaxSecretRef)

var secretPart = regexp.MustCompile(`^[A-Za-z0-9._-]+$`)

// IsSecretRef accepts secret:// and slash-separated parts, none of them . or .. : the
// names units use for what the registry's secret store keeps for a tenant (a k8s-join's
// tokenRef), and the names `secrets put` stores under.
func IsSecretRef(s string) bool {
	name, ok := strings.CutPrefix(s, "secret://")
	if !ok || len(s) > MaxSecretRef {
		return false
	}
	for part := range strings.SplitSeq(name, "/") {
		if part == "." || part == ".." || !secretPart.MatchString(part) {
			return false
		}
	}
	return true
}

// SecretField is a secret reference a unit's settings name, with the settings' field
// that names it (tokenRef), so that a refusal can point at it.
type SecretField struct {
	Field string
	Ref   string
}

// secretUser is a unit whose settings name secrets from the registry.
type secretUser interface {
	secretRefs() []SecretField
}

func (k *K8sJoin) secretRefs() []SecretField { return []SecretField{{"tokenRef", k.TokenRef}} }

// SecretRefs returns the secret references the units of a host section name (each
// k8s-join's tokenRef), in order: the only secrets the registry hands the node's agent.
// A unit whose settings do not decode names none.
func SecretRefs(units []proto.HostUnit) []string {
	var refs []string
	for _, u := range units {
		for _, f := range SecretFields(u) {
			refs = append(refs, f.Ref)
		}
	}
	return refs
}

// SecretFields returns the secret references unit's settings name, with their fields,
// in order; none for an unknown unit or settings that do not decode.
func SecretFields(u proto.HostUnit) []SecretField {
	if !Known(u.Unit) {
		return nil
	}
	s, err := Decode(u.Unit, u.Settings)
	if err != nil {
		return nil
	}
	if su, ok := s.(secretUser); ok {
		return su.secretRefs()
	}
	return nil
}

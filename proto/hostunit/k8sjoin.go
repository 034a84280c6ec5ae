package hostunit

import (
	"fmt"
	"net/url"
	"regexp"
	"strings"

	"github.com/better-compute/better-compute/jsondoc"
	"github.com/better-compute/better-compute/proto"
)

// K8sJoin joins the host to a Kubernetes cluster as a worker node.
type K8sJoin struct {
	Common
	// Server is the cluster's API server, an https URL.
	Server string `json:"server"`
	// CACertSHA256 is the SHA-256 of the cluster CA's public key (SPKI), 64 lower-case hex
	// digits, checked before the host trusts the server.
	CACertSHA256 string `json:"caCertSha256"`
	// TokenRef names the bootstrap token in the secret store (secret://...).
	TokenRef string `json:"tokenRef"`
	// KubernetesVersion is the kubelet version, vX.Y or vX.Y.Z.
	KubernetesVersion string `json:"kubernetesVersion,omitempty"`
	// NodeLabels are the labels the kubelet registers the node with.
	NodeLabels map[string]string `json:"nodeLabels,omitempty"`
	// Taints are the taints the kubelet registers the node with, key=value:Effect.
	Taints []string `json:"taints,omitempty"`
	// GPU exposes the GPUs to the cluster.
	GPU bool `json:"gpu,omitempty"`
	// GPUAPI is how, when GPU is true: device-plugin (default) or dra (Dynamic Resource
	// Allocation).
	GPUAPI string `json:"gpuApi,omitempty"`
}

// The gpuApi values.
const (
	GPUAPIDevicePlugin = "device-plugin"
	GPUAPIDRA          = "dra"
)

// applyDefaults sets the GPU API of a join exposing GPUs.
func (k *K8sJoin) applyDefaults() {
	if k.GPU && k.GPUAPI == "" {
		k.GPUAPI = GPUAPIDevicePlugin
	}
}

// Unit returns "k8s-join".
func (*K8sJoin) Unit() string { return UnitK8sJoin }

// Limits of the k8s-join unit.
const (
	maxServerLen  = 2048
	maxNodeLabels = 64
	maxTaints     = 64
)

var kubernetesVersion = regexp.MustCompile(`^v(0|[1-9][0-9]?)\.(0|[1-9][0-9]{0,2})(\.(0|[1-9][0-9]{0,3}))?$`)

func checkK8sJoin(c checker, v *jsondoc.Value, p jsondoc.Path) {
	c.fields(v, p, map[string]jsondoc.Check{
		"server": func(v *jsondoc.Value, p jsondoc.Path) {
			if s, ok := c.line(v, p, maxServerLen); ok {
				if err := checkServerURL(s); err != nil {
					c.Add(v, p, "%v", err)
				}
			}
		},
		"caCertSha256": func(v *jsondoc.Value, p jsondoc.Path) {
			s, ok := c.String(v, p)
			switch {
			case !ok:
			case strings.HasPrefix(s, "sha256:"):
				c.Add(v, p, "write the 64 hex digits without the sha256: prefix")
			case !proto.IsDigest(s):
				c.Add(v, p, "must be 64 lower-case hex digits (the SHA-256 of the cluster CA's public key)")
			}
		},
		"tokenRef": func(v *jsondoc.Value, p jsondoc.Path) {
			if s, ok := c.String(v, p); ok && !IsSecretRef(s) {
				c.Add(v, p, "%s", SecretRefRule)
			}
		},
		"kubernetesVersion": func(v *jsondoc.Value, p jsondoc.Path) {
			s, ok := c.String(v, p)
			if ok && !kubernetesVersion.MatchString(s) {
				c.Add(v, p, "%q is not a Kubernetes version vX.Y or vX.Y.Z, like v1.34", s)
			}
		},
		"nodeLabels": func(v *jsondoc.Value, p jsondoc.Path) {
			members, ok := c.object(v, p, maxNodeLabels)
			if !ok {
				return
			}
			for _, m := range members {
				mp := p.Field(m.Key)
				if err := checkNodeLabelKey(m.Key); err != nil {
					c.AddAt(m.KeyOffset, mp, "%v", err)
					continue
				}
				if s, ok := c.String(m.Value, mp); ok {
					if err := checkLabelValue(s); err != nil {
						c.Add(m.Value, mp, "%v", err)
					}
				}
			}
		},
		"taints": func(v *jsondoc.Value, p jsondoc.Path) {
			items, ok := c.Array(v, p, maxTaints)
			if !ok {
				return
			}
			for i, item := range items {
				if s, ok := c.String(item, p.Index(i)); ok {
					if err := checkTaint(s); err != nil {
						c.Add(item, p.Index(i), "%v", err)
					}
				}
			}
		},
		"gpu": c.bool,
		"gpuApi": func(api *jsondoc.Value, ap jsondoc.Path) {
			if s, ok := c.Enum(api, ap, GPUAPIDevicePlugin, GPUAPIDRA); ok {
				if gpu := v.Get("gpu"); gpu == nil || gpu.Kind != jsondoc.Bool || !gpu.Bool {
					c.Add(api, ap, "gpuApi %s needs gpu: true", s)
				}
			}
		},
	}, "server", "caCertSha256", "tokenRef")
}

// checkServerURL accepts an https URL with a host not starting with -, without user info,
// query or fragment.
func checkServerURL(s string) error {
	u, err := url.Parse(s)
	switch {
	case err != nil || u.Scheme != "https" || u.Hostname() == "" || u.Opaque != "" || strings.Contains(s, " "):
		return fmt.Errorf("%s is not an https URL of the API server, like https://10.0.0.1:6443", proto.Quote(s))
	case strings.HasPrefix(u.Hostname(), "-"):
		// No host name starts with -, and as an argument of a program (kubeadm join
		// HOST:PORT) one would be read as a flag.
		return fmt.Errorf("the server's host may not start with -")
	case u.User != nil:
		return fmt.Errorf("the server URL may not carry user info; the credential is the tokenRef")
	case u.RawQuery != "" || u.Fragment != "" || strings.ContainsAny(s, "?#"):
		return fmt.Errorf("the server URL may not carry a query or a fragment")
	}
	return nil
}

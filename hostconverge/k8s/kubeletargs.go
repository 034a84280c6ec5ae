package k8s

import (
	"maps"
	"slices"
	"strings"

	"github.com/better-compute/better-compute/proto/hostunit"
)

// KubeletDefaults is the environment file the kubelet's systemd drop-in (from the kubeadm
// packages) reads KUBELET_EXTRA_ARGS from.
const KubeletDefaults = "/etc/default/kubelet"

// GPUAPILabel is the node label that tells the cluster which GPU stack serves the node:
// device-plugin or dra, for the DaemonSets of the NVIDIA device plugin or DRA driver to
// select.
const GPUAPILabel = "better-compute.io/gpu-api"

// nodeLabels returns the labels the node registers with: the unit's, and GPUAPILabel when
// it exposes GPUs.
func nodeLabels(s *hostunit.K8sJoin) map[string]string {
	labels := maps.Clone(s.NodeLabels)
	if s.GPU {
		if labels == nil {
			labels = map[string]string{}
		}
		labels[GPUAPILabel] = s.GPUAPI
	}
	return labels
}

// renderKubeletDefaults writes KUBELET_EXTRA_ARGS with the node's labels and taints,
// sorted so that the same unit always gives the same file.
func renderKubeletDefaults(s *hostunit.K8sJoin) []byte {
	var args []string
	if labels := nodeLabels(s); len(labels) > 0 {
		pairs := make([]string, 0, len(labels))
		for _, k := range slices.Sorted(maps.Keys(labels)) {
			pairs = append(pairs, k+"="+labels[k])
		}
		args = append(args, "--node-labels="+strings.Join(pairs, ","))
	}
	if len(s.Taints) > 0 {
		args = append(args, "--register-with-taints="+strings.Join(slices.Sorted(slices.Values(s.Taints)), ","))
	}
	return []byte("# Written by bcd for the better-compute host-config unit k8s-join.\n" +
		"# bcd rewrites this file; change the unit instead.\n" +
		"KUBELET_EXTRA_ARGS=\"" + strings.Join(args, " ") + "\"\n")
}

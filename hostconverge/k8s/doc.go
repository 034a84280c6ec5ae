// Package k8s converges the k8s-join unit: the host joins a Kubernetes cluster as a worker
// with kubeadm, registering with the unit's labels and taints, and stays that way.
package k8s

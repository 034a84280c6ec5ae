// Package nvidia converges the GPU host-config units: nvidia-driver, fabric-manager,
// gpu-settings, mig-layout, gpu-sharing and container-toolkit.
//
// State is read from the host's files where it has them (dpkg's status for installed
// packages, /proc/driver/nvidia/version for the loaded driver) and from nvidia-smi's
// machine-readable queries otherwise; changes go through apt-get, nvidia-smi, systemctl
// and nvidia-ctk, each through the host's one Runner. docs/host-config.md describes what
// each unit writes, runs and refuses, and when it needs a reboot.
package nvidia

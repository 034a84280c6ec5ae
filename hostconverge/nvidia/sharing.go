package nvidia

import (
	"context"
	"strconv"

	"github.com/better-compute/better-compute/hostconverge/hostenv"
	"github.com/better-compute/better-compute/proto/hostunit"
)

// The files of the gpu-sharing unit.
const (
	// DevicePluginConfig is the sharing configuration the NVIDIA device plugin reads when
	// its DaemonSet mounts it (--config-file): replicas of each GPU.
	DevicePluginConfig = "/etc/better-compute/gpu-sharing/device-plugin.yaml"
	// MPSService runs the CUDA Multi-Process Service control daemon.
	MPSService     = "better-compute-mps.service"
	mpsServiceFile = "/etc/systemd/system/" + MPSService
)

// GPUSharing converges the gpu-sharing unit. Both modes write the device plugin's
// configuration, which advertises replicas slots of each GPU. mps also runs the MPS
// control daemon as a systemd service limiting each client to 100/replicas percent of
// the GPU's threads; timeslice stops and removes that service if it ran.
func GPUSharing(ctx context.Context, p *hostenv.Pass, s *hostunit.GPUSharing) error {
	if _, err := p.EnsureFile(DevicePluginConfig, renderDevicePlugin(s.Replicas), 0o644); err != nil {
		return err
	}
	if s.Mode == "mps" {
		return ensureMPS(ctx, p, s.Replicas)
	}
	return removeMPS(ctx, p)
}

func renderDevicePlugin(replicas int) []byte {
	return []byte("# Written by bcd for the better-compute host-config unit gpu-sharing.\n" +
		"version: v1\nsharing:\n  timeSlicing:\n    resources:\n    - name: nvidia.com/gpu\n      replicas: " + strconv.Itoa(replicas) + "\n")
}

func renderMPSService(replicas int) []byte {
	return []byte(`# Written by bcd for the better-compute host-config unit gpu-sharing.
[Unit]
Description=CUDA Multi-Process Service control daemon (better-compute gpu-sharing)
After=nvidia-persistenced.service

[Service]
Type=forking
Environment=CUDA_MPS_PIPE_DIRECTORY=/run/nvidia-mps
Environment=CUDA_MPS_LOG_DIRECTORY=/var/log/nvidia-mps
Environment=CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=` + strconv.Itoa(100/replicas) + `
RuntimeDirectory=nvidia-mps
LogsDirectory=nvidia-mps
ExecStart=/usr/bin/nvidia-cuda-mps-control -d
ExecStop=/bin/sh -c 'echo quit | /usr/bin/nvidia-cuda-mps-control'
Restart=on-failure

[Install]
WantedBy=multi-user.target
`)
}

// ensureMPS writes the MPS service, and enables and starts it, restarting it when its
// file changed while it ran. A file an earlier pass changed without seeing systemd take
// it (killed, or a failed reload or restart) is applied as one that changed now.
func ensureMPS(ctx context.Context, p *hostenv.Pass, replicas int) error {
	changed, err := p.ChangeFile(mpsServiceFile, renderMPSService(replicas), 0o644)
	if err != nil {
		return err
	}
	if changed {
		if _, err := p.Run(ctx, "systemctl", "daemon-reload"); err != nil {
			return err
		}
	}
	restartFor := ""
	if changed {
		restartFor = "its new settings"
	}
	if err := p.EnsureService(ctx, MPSService, restartFor); err != nil || !changed {
		return err
	}
	return p.Applied(mpsServiceFile)
}

// removeMPS stops, disables and removes the MPS service when its file is there.
func removeMPS(ctx context.Context, p *hostenv.Pass) error {
	if ok, err := p.Exists(mpsServiceFile); err != nil || !ok {
		return err
	}
	if _, err := p.Change(ctx, "stopped and disabled "+MPSService, "systemctl", "disable", "--now", MPSService); err != nil {
		return err
	}
	if _, err := p.RemoveFile(mpsServiceFile); err != nil {
		return err
	}
	_, err := p.Run(ctx, "systemctl", "daemon-reload")
	return err
}

package nvidia

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"strings"

	"github.com/better-compute/better-compute/hostconverge/hostenv"
	"github.com/better-compute/better-compute/proto"
	"github.com/better-compute/better-compute/proto/hostunit"
)

var migModeQuery = []string{"--query-gpu=index,mig.mode.current,mig.mode.pending", "--format=csv,noheader"}

// MIGLayout converges the mig-layout unit. The registry resolves from: "pool" into the
// pool's layout before it pushes the NodeSpec, so one that reaches bcd is refused. For each
// GPU the layout names (by index, else through "all"): MIG mode on for a list of profiles
// and off for an empty one (a mode change records a reboot until the GPU is reset), and,
// on a GPU running in MIG mode, its GPU instances recreated (compute instances with them)
// when their profiles differ from the list. GPUs the layout does not name are left alone.
func MIGLayout(ctx context.Context, p *hostenv.Pass, s *hostunit.MIGLayout) error {
	if s.From != "" {
		return proto.Errorf(proto.InvalidConfig, "mig-layout reached bcd with from: %q unresolved; the registry puts the pool's policy.migLayout in the NodeSpec as a layout", s.From).WithPath("from")
	}
	rows, err := queryGPUs(ctx, p, migModeQuery, 3, "MIG mode")
	if err != nil {
		return err
	}
	if err := checkLayoutGPUs(s.Layout, rows); err != nil {
		return err
	}
	var instances map[int][]string
	var errs []error
	for _, row := range rows {
		gpu, current, pending := row[0], row[1], row[2]
		want, named := s.Layout[gpu]
		if !named {
			want, named = s.Layout["all"]
		}
		if !named {
			continue
		}
		if notAvailable(current) {
			errs = append(errs, proto.Errorf(proto.Unsupported, "GPU %s has no MIG mode", gpu))
			continue
		}
		if instances == nil && current == "Enabled" {
			if instances, err = gpuInstances(ctx, p); err != nil {
				return errors.Join(append(errs, err)...)
			}
		}
		index, _ := strconv.Atoi(gpu)
		errs = append(errs, convergeGPU(ctx, p, gpu, current, pending, instances[index], want))
	}
	return errors.Join(errs...)
}

// checkLayoutGPUs refuses a layout naming a GPU index the host does not have.
func checkLayoutGPUs(layout map[string][]string, rows [][]string) error {
	have := make([]string, len(rows))
	for i, row := range rows {
		have[i] = row[0]
	}
	for key := range layout {
		if key != "all" && !slices.Contains(have, key) {
			return proto.Errorf(proto.InvalidConfig, "the layout names GPU %s; this host has GPUs %s", key, strings.Join(have, ", ")).WithPath("layout." + key)
		}
	}
	return nil
}

// convergeGPU sets one GPU's MIG mode and instances.
func convergeGPU(ctx context.Context, p *hostenv.Pass, gpu, current, pending string, have, want []string) error {
	mode, flag := "Disabled", "0"
	if len(want) > 0 {
		mode, flag = "Enabled", "1"
	}
	if current == "Enabled" && mode == "Disabled" && len(have) > 0 {
		if err := destroyInstances(ctx, p, gpu); err != nil {
			return err
		}
		p.Corrected("destroyed the MIG instances of GPU %s (%s)", gpu, strings.Join(have, ", "))
		have = nil
	}
	if pending != mode {
		if _, err := p.Change(ctx, "set MIG mode of GPU "+gpu+" "+pending+" -> "+mode, "nvidia-smi", "-i", gpu, "-mig", flag); err != nil {
			return err
		}
	}
	if current != mode {
		p.RebootFor("GPU %s switches MIG mode %s -> %s at its next reset", gpu, current, mode)
		return nil
	}
	sorted := slices.Sorted(slices.Values(want))
	if mode == "Disabled" || slices.Equal(have, sorted) {
		return nil
	}
	if len(have) > 0 {
		if err := destroyInstances(ctx, p, gpu); err != nil {
			return err
		}
	}
	if _, err := p.Run(ctx, "nvidia-smi", "mig", "-i", gpu, "-cgi", strings.Join(want, ","), "-C"); err != nil {
		return err
	}
	p.Corrected("recreated the MIG instances of GPU %s: [%s] -> [%s]", gpu, strings.Join(have, ", "), strings.Join(want, ", "))
	return nil
}

// gpuInstances lists every GPU's instances; nvidia-smi answers none with an error.
func gpuInstances(ctx context.Context, p *hostenv.Pass) (map[int][]string, error) {
	out, err := p.Run(ctx, "nvidia-smi", "mig", "-lgi")
	if err != nil && !mentionsNone(out, err, "No GPU instances") {
		return nil, err
	}
	return ParseGPUInstances(string(out)), nil
}

// destroyInstances destroys a GPU's compute instances, then its GPU instances; a GPU
// instance without compute instances is no error.
func destroyInstances(ctx context.Context, p *hostenv.Pass, gpu string) error {
	if out, err := p.Run(ctx, "nvidia-smi", "mig", "-i", gpu, "-dci"); err != nil && !mentionsNone(out, err, "No compute instances") {
		return err
	}
	_, err := p.Run(ctx, "nvidia-smi", "mig", "-i", gpu, "-dgi")
	return err
}

// mentionsNone reports nvidia-smi's "nothing found" answer, on its output or in the error.
func mentionsNone(out []byte, err error, what string) bool {
	return err != nil && proto.CodeOf(err) != proto.Timeout && (strings.Contains(string(out), what) || strings.Contains(err.Error(), what))
}

package kernel

import (
	"context"
	"errors"
	"maps"
	"path"
	"slices"
	"strconv"
	"strings"

	"github.com/better-compute/better-compute/hostconverge/hostenv"
	"github.com/better-compute/better-compute/proto"
	"github.com/better-compute/better-compute/proto/hostunit"
)

// The CPU files of the cpu unit.
const (
	// Governors matches each CPU's frequency governor.
	Governors = "/sys/devices/system/cpu/cpu[0-9]*/cpufreq/scaling_governor"
	// PresentCPUs lists the CPUs the host has.
	PresentCPUs = "/sys/devices/system/cpu/present"
)

// CPU converges the cpu unit: it sets the frequency governor of every CPU now, and
// isolates CPUs from the scheduler, from timer ticks and from RCU callbacks through the
// kernel command line (isolcpus, nohz_full, rcu_nocbs), which takes a reboot. Isolating a
// CPU the host does not have is refused.
func CPU(ctx context.Context, p *hostenv.Pass, s *hostunit.CPU) error {
	var errs []error
	if s.Governor != "" {
		errs = append(errs, setGovernors(p, s.Governor))
	}
	var params []string
	if s.Isolate != "" {
		if err := checkPresent(p, s.Isolate); err != nil {
			return errors.Join(append(errs, err)...)
		}
		params = []string{"isolcpus=" + s.Isolate, "nohz_full=" + s.Isolate, "rcu_nocbs=" + s.Isolate}
	}
	errs = append(errs, setBootParams(ctx, p, hostunit.UnitCPU, params))
	return errors.Join(errs...)
}

// setGovernors sets the governor of each CPU whose governor differs, and records one
// correction per former governor, naming the CPUs as a list.
func setGovernors(p *hostenv.Pass, want string) error {
	files, err := p.Glob(Governors)
	if err != nil {
		return err
	}
	if len(files) == 0 {
		return proto.Errorf(proto.Unsupported, "no CPU has a frequency governor (%s): the host runs without a frequency scaling driver", path.Dir(path.Dir(Governors)))
	}
	changed := map[string][]int{}
	var errs []error
	for _, file := range files {
		cpu, _ := strconv.Atoi(strings.TrimPrefix(path.Base(path.Dir(path.Dir(file))), "cpu"))
		cur, err := p.ReadValue(file)
		if err != nil || cur == want {
			errs = append(errs, err)
			continue
		}
		avail, found, err := p.ReadOptional(path.Join(path.Dir(file), "scaling_available_governors"))
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if found && !slices.Contains(strings.Fields(string(avail)), want) {
			errs = append(errs, proto.Errorf(proto.Unsupported, "CPU %d has no %s governor (it has %s)", cpu, want, strings.Join(strings.Fields(string(avail)), ", ")))
			continue
		}
		if err := p.WriteValue(file, want); err != nil {
			errs = append(errs, err)
			continue
		}
		changed[cur] = append(changed[cur], cpu)
	}
	for _, old := range slices.Sorted(maps.Keys(changed)) {
		cpus := changed[old]
		slices.Sort(cpus)
		p.Corrected("set the governor of CPUs %s %s -> %s", FormatRanges(cpus), old, want)
	}
	return errors.Join(errs...)
}

// checkPresent refuses isolating CPUs the host does not have.
func checkPresent(p *hostenv.Pass, isolate string) error {
	data, found, err := p.ReadOptional(PresentCPUs)
	if err != nil || !found {
		return err
	}
	present, err := hostunit.ParseCPURanges(string(data))
	if err != nil {
		return proto.Errorf(proto.DriverError, "%s is not a CPU list: %v", PresentCPUs, err)
	}
	want, _ := hostunit.ParseCPUList(isolate)
	var absent []int
	for _, cpu := range want {
		if _, found := slices.BinarySearch(present, cpu); !found {
			absent = append(absent, cpu)
		}
	}
	if len(absent) > 0 {
		return proto.Errorf(proto.InvalidConfig, "isolate names CPUs %s, which this host does not have (it has %s)", FormatRanges(absent), FormatRanges(present)).WithPath("isolate")
	}
	return nil
}

package kernel

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/better-compute/better-compute/hostconverge/hostenv"
	"github.com/better-compute/better-compute/proto"
	"github.com/better-compute/better-compute/proto/hostunit"
)

// The kernel files of the hugepages unit.
const (
	// TransparentHugepages shows and sets the transparent huge page mode.
	TransparentHugepages = "/sys/kernel/mm/transparent_hugepage/enabled"
	// Pages2M is the machine-wide count of 2 MiB pages.
	Pages2M = "/sys/kernel/mm/hugepages/hugepages-2048kB/nr_hugepages"
)

// nodePages2M is the count of 2 MiB pages of one NUMA node.
func nodePages2M(node int) string {
	return fmt.Sprintf("/sys/devices/system/node/node%d/hugepages/hugepages-2048kB/nr_hugepages", node)
}

// Hugepages converges the hugepages unit. 2 MiB pages are reserved now, machine-wide or
// per NUMA node, and fail the unit when the kernel cannot find the memory. 1 GiB pages
// are reserved at boot, through the kernel command line (hugepagesz=1G hugepages=N, or
// N0:C0,N1:C1 per node), which needs a reboot until the running kernel has it. The
// transparent huge page mode is set now.
func Hugepages(ctx context.Context, p *hostenv.Pass, s *hostunit.Hugepages) error {
	var errs []error
	if s.Pages2M != nil {
		errs = append(errs, reservePages(p, Pages2M, *s.Pages2M, "2 MiB huge pages"))
	}
	nodes := slices.Sorted(func(yield func(int) bool) {
		for n := range s.PerNUMA {
			if !yield(n) {
				return
			}
		}
	})
	var perNode1G []string
	for _, node := range nodes {
		pages := s.PerNUMA[node]
		if pages.Pages2M != nil {
			errs = append(errs, reservePages(p, nodePages2M(node), *pages.Pages2M, fmt.Sprintf("2 MiB huge pages of NUMA node %d", node)))
		}
		if pages.Pages1G != nil {
			perNode1G = append(perNode1G, fmt.Sprintf("%d:%d", node, *pages.Pages1G))
		}
	}
	var params []string
	switch {
	case s.Pages1G != nil:
		params = []string{"hugepagesz=1G", "hugepages=" + strconv.FormatInt(*s.Pages1G, 10)}
	case len(perNode1G) > 0:
		params = []string{"hugepagesz=1G", "hugepages=" + strings.Join(perNode1G, ",")}
	}
	errs = append(errs, setBootParams(ctx, p, hostunit.UnitHugepages, params))
	if s.Transparent != "" {
		errs = append(errs, setTransparent(p, s.Transparent))
	}
	return errors.Join(errs...)
}

// reservePages sets a huge page count when it differs, and reads it back: the kernel
// reserves what free memory allows and may stop short.
func reservePages(p *hostenv.Pass, file string, want int64, what string) error {
	if ok, err := p.Exists(file); err != nil {
		return err
	} else if !ok {
		return proto.Errorf(proto.Unsupported, "this host has no %s (%s)", what, file)
	}
	cur, err := readCount(p, file)
	if err != nil || cur == want {
		return err
	}
	if err := p.WriteValue(file, strconv.FormatInt(want, 10)); err != nil {
		return err
	}
	got, err := readCount(p, file)
	if err != nil {
		return err
	}
	p.Corrected("set %s %d -> %d", what, cur, got)
	if got != want {
		return proto.Errorf(proto.DriverError, "the kernel reserved %d of the %d %s: free memory is short or fragmented; free memory, or reboot so that bcd reserves them early", got, want, what)
	}
	return nil
}

func readCount(p *hostenv.Pass, file string) (int64, error) {
	s, err := p.ReadValue(file)
	if err != nil {
		return 0, err
	}
	n, err := strconv.ParseInt(strings.TrimSpace(s), 10, 64)
	if err != nil {
		return 0, proto.Errorf(proto.DriverError, "%s holds %q, not a count", file, s)
	}
	return n, nil
}

// setTransparent sets the transparent huge page mode when the bracketed current word
// differs.
func setTransparent(p *hostenv.Pass, want string) error {
	s, err := p.ReadValue(TransparentHugepages)
	if err != nil {
		return err
	}
	cur, ok := Bracketed(s)
	if !ok {
		return proto.Errorf(proto.DriverError, "%s holds %q, without one bracketed mode", TransparentHugepages, s)
	}
	if cur == want {
		return nil
	}
	if err := p.WriteValue(TransparentHugepages, want); err != nil {
		return err
	}
	p.Corrected("set transparent huge pages %s -> %s", cur, want)
	return nil
}

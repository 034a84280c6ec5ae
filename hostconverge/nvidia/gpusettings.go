package nvidia

import (
	"context"
	"errors"
	"math"
	"strconv"

	"github.com/better-compute/better-compute/hostconverge/hostenv"
	"github.com/better-compute/better-compute/proto"
	"github.com/better-compute/better-compute/proto/hostunit"
)

// settingsQuery is the one nvidia-smi query of the gpu-settings unit.
var settingsQuery = []string{"--query-gpu=index,power.limit,power.min_limit,power.max_limit,ecc.mode.current,ecc.mode.pending", "--format=csv,noheader,nounits"}

// GPUSettings converges the gpu-settings unit on every GPU: the power limit now (refused
// outside the GPU's own range), and the ECC mode, which the GPU takes at its next reset,
// so that a pending or running mode other than the unit's records a reboot.
func GPUSettings(ctx context.Context, p *hostenv.Pass, s *hostunit.GPUSettings) error {
	rows, err := queryGPUs(ctx, p, settingsQuery, 6, "settings")
	if err != nil {
		return err
	}
	var errs []error
	for _, row := range rows {
		gpu := row[0]
		if s.PowerLimitWatts != nil {
			errs = append(errs, setPowerLimit(ctx, p, gpu, row[1], row[2], row[3], *s.PowerLimitWatts))
		}
		if s.ECC != nil {
			errs = append(errs, setECC(ctx, p, gpu, row[4], row[5], *s.ECC))
		}
	}
	return errors.Join(errs...)
}

func setPowerLimit(ctx context.Context, p *hostenv.Pass, gpu, current, minimum, maximum string, want int64) error {
	if notAvailable(current) {
		return proto.Errorf(proto.Unsupported, "GPU %s has no settable power limit", gpu)
	}
	cur, err1 := strconv.ParseFloat(current, 64)
	lo, err2 := strconv.ParseFloat(minimum, 64)
	hi, err3 := strconv.ParseFloat(maximum, 64)
	if err := errors.Join(err1, err2, err3); err != nil {
		return proto.Errorf(proto.DriverError, "GPU %s: nvidia-smi's power limits %q, %q, %q are not numbers", gpu, current, minimum, maximum)
	}
	if int64(math.Round(cur)) == want {
		return nil
	}
	if float64(want) < math.Floor(lo) || float64(want) > math.Ceil(hi) {
		return proto.Errorf(proto.InvalidConfig, "powerLimitWatts %d is outside GPU %s's range of %g to %g W", want, gpu, lo, hi).WithPath("powerLimitWatts")
	}
	w := strconv.FormatInt(want, 10)
	_, err := p.Change(ctx, "set the power limit of GPU "+gpu+" "+strconv.FormatFloat(cur, 'f', -1, 64)+" -> "+w+" W", "nvidia-smi", "-i", gpu, "-pl", w)
	return err
}

func setECC(ctx context.Context, p *hostenv.Pass, gpu, current, pending string, want bool) error {
	if notAvailable(current) || notAvailable(pending) {
		return proto.Errorf(proto.Unsupported, "GPU %s has no ECC mode", gpu)
	}
	mode, flag := "Disabled", "0"
	if want {
		mode, flag = "Enabled", "1"
	}
	if pending != mode {
		if _, err := p.Change(ctx, "set ECC of GPU "+gpu+" "+pending+" -> "+mode+" (pending)", "nvidia-smi", "-i", gpu, "-e", flag); err != nil {
			return err
		}
	}
	if current != mode {
		p.RebootFor("GPU %s runs with ECC %s until its next reset", gpu, current)
	}
	return nil
}

// firstLine is the start of a program's unexpected answer, for a message.
func firstLine(out []byte) string {
	s := string(out)
	for i, c := range s {
		if c == '\n' || i >= 200 {
			return s[:i]
		}
	}
	return s
}

package testkit

import (
	"fmt"
	"os"
	"slices"
	"strconv"
	"testing"
)

// PairsEnv names the environment variable that sets how many rounds RunPairs runs.
const PairsEnv = "BC_BENCH_PAIRS"

// PairRounds is how many rounds a benchmark's pairs run: PairsEnv, or 5. A figure for
// the documentation takes five at least; fewer check a change quickly.
func PairRounds(tb testing.TB) int {
	s := os.Getenv(PairsEnv)
	if s == "" {
		return 5
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 {
		tb.Fatalf("%s=%q: want a number of rounds, 1 at least", PairsEnv, s)
	}
	return n
}

// Ratio makes a round's ratio from the product's figure and the peer's.
type Ratio func(ours, peer float64) float64

// PeerOverOurs is the ratio of times: above 1, the product took less time.
func PeerOverOurs(ours, peer float64) float64 { return peer / ours }

// OursOverPeer is the ratio of rates (above 1, the product did more in the time) or
// of costs (above 1, the product cost more).
func OursOverPeer(ours, peer float64) float64 { return ours / peer }

// Pairs is what RunPairs measured: each side's figure and the ratio of each round.
type Pairs struct {
	Ours, Peer, Ratios []float64
}

// RunPairs measures the product beside its peer, the way every `make bench` figure is
// measured (docs/benchmarks.md): rounds rounds, each running both sides once, the
// product first in even rounds (the first is round 0) and the peer first in odd ones,
// so that neither side always meets the machine as the other left it. Each side
// returns its figure for the round (a time, a rate); ratio makes the round's ratio.
// The figures to quote are the median of the within-round ratios with their minimum
// and maximum (Spread), never a ratio of two sides' best or of their medians, which
// favours whichever side had the quieter moments.
func RunPairs(rounds int, ratio Ratio, ours, peer func() float64) Pairs {
	var o, q []float64
	for i := range rounds {
		if i%2 == 0 {
			o = append(o, ours())
			q = append(q, peer())
		} else {
			q = append(q, peer())
			o = append(o, ours())
		}
	}
	return PairsOf(o, q, ratio)
}

// PairsOf is the Pairs of other figures the rounds of a RunPairs took: ours[i] and
// peer[i] are round i's (a boot storm's median machine beside its last, which RunPairs
// ratioed).
func PairsOf(ours, peer []float64, ratio Ratio) Pairs {
	p := Pairs{Ours: ours, Peer: peer}
	for i := range ours {
		p.Ratios = append(p.Ratios, ratio(ours[i], peer[i]))
	}
	return p
}

// Median is the median of v: the middle value, or the mean of the two middle ones when
// v has an even number of values.
func Median(v []float64) float64 {
	s := slices.Sorted(slices.Values(v))
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

// Spread is the median of the rounds' ratios, and their minimum and maximum.
func (p Pairs) Spread() (med, lo, hi float64) {
	return Median(p.Ratios), slices.Min(p.Ratios), slices.Max(p.Ratios)
}

// Line says the pairs in one line: name (the ratio's), the median ratio with its
// minimum and maximum and the number of rounds, then each side's median figure in unit
// (fmt's %.*g with 4 digits), ourName's and peerName's.
func (p Pairs) Line(name, ourName, peerName, unit string) string {
	med, lo, hi := p.Spread()
	return fmt.Sprintf("%s %.3f (min %.3f, max %.3f) over %d alternating rounds; medians: %s %.4g %s, %s %.4g %s",
		name, med, lo, hi, len(p.Ratios), ourName, Median(p.Ours), unit, peerName, Median(p.Peer), unit)
}

// Report reports the ratios' median, minimum and maximum as the benchmark's metrics
// prefix+"ratio-median", prefix+"ratio-min" and prefix+"ratio-max", and logs Line.
func (p Pairs) Report(b *testing.B, prefix, name, ourName, peerName, unit string) {
	b.Helper()
	med, lo, hi := p.Spread()
	b.ReportMetric(med, prefix+"ratio-median")
	b.ReportMetric(lo, prefix+"ratio-min")
	b.ReportMetric(hi, prefix+"ratio-max")
	b.Log(p.Line(name, ourName, peerName, unit))
}

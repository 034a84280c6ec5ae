package testkit

import (
	"slices"
	"strings"
	"testing"
)

// TestRunPairsAlternates checks the order the sides run in (the product first in even
// rounds, the peer first in odd ones), with an odd and an even number of rounds, and
// that each round's ratio is made from that round's two figures.
func TestRunPairsAlternates(t *testing.T) {
	for _, rounds := range []int{5, 4} {
		var order []string
		n := 0.0
		ours := func() float64 { order = append(order, "ours"); n++; return n }
		peer := func() float64 { order = append(order, "peer"); n++; return n }
		p := RunPairs(rounds, PeerOverOurs, ours, peer)
		var want []string
		for i := range rounds {
			if i%2 == 0 {
				want = append(want, "ours", "peer")
			} else {
				want = append(want, "peer", "ours")
			}
		}
		if !slices.Equal(order, want) {
			t.Errorf("%d rounds ran %v, want %v", rounds, order, want)
		}
		if len(p.Ours) != rounds || len(p.Peer) != rounds || len(p.Ratios) != rounds {
			t.Fatalf("%d rounds gave %d, %d and %d figures", rounds, len(p.Ours), len(p.Peer), len(p.Ratios))
		}
		// Round 0: ours 1, peer 2; round 1: peer 3, ours 4.
		if p.Ours[0] != 1 || p.Peer[0] != 2 || p.Peer[1] != 3 || p.Ours[1] != 4 {
			t.Errorf("figures ours %v, peer %v: not kept by round", p.Ours, p.Peer)
		}
		for i := range rounds {
			if p.Ratios[i] != p.Peer[i]/p.Ours[i] {
				t.Errorf("round %d: ratio %v, want peer/ours %v", i, p.Ratios[i], p.Peer[i]/p.Ours[i])
			}
		}
	}
}

func TestMedian(t *testing.T) {
	for _, c := range []struct {
		v    []float64
		want float64
	}{
		{[]float64{7}, 7},
		{[]float64{3, 1, 2}, 2},
		{[]float64{5, 1, 9, 3, 7}, 5},
		{[]float64{4, 1, 3, 2}, 2.5},
		{[]float64{10, 2}, 6},
	} {
		in := slices.Clone(c.v)
		if got := Median(c.v); got != c.want {
			t.Errorf("Median(%v) = %v, want %v", c.v, got, c.want)
		}
		if !slices.Equal(in, c.v) {
			t.Errorf("Median reordered its input: %v", c.v)
		}
	}
}

// TestPairsSpread checks that the figure quoted is the median of the within-round
// ratios, not the ratio of the sides' medians or bests: here the peer's best and the
// product's best came in different rounds.
func TestPairsSpread(t *testing.T) {
	ours := []float64{10, 20, 10, 12, 30}
	peer := []float64{11, 10, 12, 12, 15}
	i, j := 0, 0
	p := RunPairs(5, OursOverPeer, func() float64 { v := ours[i]; i++; return v }, func() float64 { v := peer[j]; j++; return v })
	if i != 5 || j != 5 {
		t.Fatalf("%d runs of ours and %d of the peer, want 5 each", i, j)
	}
	// Ratios ours/peer by round: 0.909, 2, 0.833, 1, 2.
	med, lo, hi := p.Spread()
	if med != 1 || lo != 10.0/12 || hi != 2 {
		t.Errorf("spread %v (%v-%v), want 1 (0.833-2)", med, lo, hi)
	}
	line := p.Line("cache/nginx", "cache", "nginx", "MB/s")
	for _, want := range []string{"cache/nginx 1.000 (min 0.833, max 2.000) over 5 alternating rounds", "cache 12 MB/s", "nginx 12 MB/s"} {
		if !strings.Contains(line, want) {
			t.Errorf("line %q lacks %q", line, want)
		}
	}
}

func TestPairsOf(t *testing.T) {
	p := PairsOf([]float64{2, 4, 5}, []float64{4, 2, 20}, PeerOverOurs)
	if !slices.Equal(p.Ratios, []float64{2, 0.5, 4}) {
		t.Errorf("ratios %v, want [2 0.5 4] (peer over ours, round by round)", p.Ratios)
	}
	if med, lo, hi := p.Spread(); med != 2 || lo != 0.5 || hi != 4 {
		t.Errorf("spread %v (%v-%v), want 2 (0.5-4)", med, lo, hi)
	}
}

func TestPairRounds(t *testing.T) {
	t.Setenv(PairsEnv, "")
	if n := PairRounds(t); n != 5 {
		t.Errorf("default %d rounds, want 5", n)
	}
	t.Setenv(PairsEnv, "7")
	if n := PairRounds(t); n != 7 {
		t.Errorf("%s=7 gave %d rounds", PairsEnv, n)
	}
}

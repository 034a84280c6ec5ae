package site

import (
	"testing"
	"time"

	"github.com/better-compute/better-compute/sectionpack"
	"github.com/better-compute/better-compute/testkit"
)

// BenchmarkCutFloodedSection is what a site pays to cut the `images` section of 300
// images of random sources (randomSourced) to what the registry stores, beside the
// registry's own work on the section it then receives: packing it once, as the store does
// for each change of a section. Its ratio is a cost: above 1, the cut costs more.
func BenchmarkCutFloodedSection(b *testing.B) {
	images := randomSourced(300)
	section, _ := imagesSection(images, nil)
	timed := func(f func()) float64 {
		start := time.Now()
		f()
		return time.Since(start).Seconds() * 1000
	}
	for b.Loop() {
		p := testkit.RunPairs(testkit.PairRounds(b), testkit.OursOverPeer,
			func() float64 { return timed(func() { imagesSection(images, nil) }) },
			func() float64 { return timed(func() { sectionpack.Pack(section) }) })
		p.Report(b, "", "cut over the store's packing", "cut", "store pack", "ms")
	}
}

package agents

import (
	"encoding/json"
	"slices"
	"testing"
	"time"

	"github.com/better-compute/better-compute/proto"
)

// TestSpacing: a burst of events goes through at once, and past it one every gap; with
// a burst of 1 the first event, then the first after each gap (a command's progress).
func TestSpacing(t *testing.T) {
	t0 := time.Unix(1e9, 0)
	sp := spacing{gap: time.Second, burst: 3}
	for i := range 3 {
		if w := sp.wait(t0); w != 0 {
			t.Fatalf("event %d of the burst waits %v", i, w)
		}
		sp.take(t0, 1)
	}
	if w := sp.wait(t0); w != time.Second {
		t.Fatalf("the event past the burst waits %v, want the gap", w)
	}
	if w := sp.wait(t0.Add(time.Second)); w != 0 {
		t.Fatalf("an event a gap later waits %v", w)
	}
	sp.take(t0.Add(time.Second), 4) // a flush of four
	if w := sp.wait(t0.Add(time.Second)); w != 4*time.Second {
		t.Fatalf("after four let through at once the next waits %v, want four gaps", w)
	}

	one := spacing{gap: 500 * time.Millisecond, burst: 1}
	var told []time.Duration
	for at := time.Duration(0); at < 2*time.Second; at += 200 * time.Millisecond {
		if one.wait(t0.Add(at)) == 0 {
			one.take(t0.Add(at), 1)
			told = append(told, at)
		}
	}
	if want := []time.Duration{0, 600 * time.Millisecond, 1200 * time.Millisecond, 1800 * time.Millisecond}; !slices.Equal(told, want) {
		t.Fatalf("let through at %v, want %v", told, want)
	}
}

// TestReportOrder: sections that waited are recorded one by one, those the `site`
// section among them counts as less cut than the stored one before it, the others after
// it, whatever their size: the stored `site` section never says a section less cut than
// its stored copy.
func TestReportOrder(t *testing.T) {
	siteSaying := func(omitted map[string]int) json.RawMessage {
		data, _ := json.Marshal(proto.SiteInventory{Omitted: omitted})
		return data
	}
	cut := proto.SiteInventory{Omitted: map[string]int{proto.SectionImages: 10, proto.SectionDiscoveries: 5}}
	for name, tc := range map[string]struct {
		sections map[string]json.RawMessage
		stored   proto.SiteInventory
		want     []string
	}{
		"a machine's sections in name order": {
			sections: map[string]json.RawMessage{proto.SectionNICs: nil, proto.SectionCPU: nil, proto.SectionHost: nil},
			want:     []string{proto.SectionCPU, proto.SectionHost, proto.SectionNICs},
		},
		"less cut before, cut further after": {
			sections: map[string]json.RawMessage{
				proto.SectionSite:        siteSaying(map[string]int{proto.SectionImages: 3, proto.SectionDiscoveries: 6}),
				proto.SectionImages:      json.RawMessage(`[]`),
				proto.SectionDiscoveries: json.RawMessage(`[]`),
				proto.SectionBootEntries: json.RawMessage(`[]`),
			},
			stored: cut,
			want:   []string{proto.SectionImages, proto.SectionSite, proto.SectionBootEntries, proto.SectionDiscoveries},
		},
		"without a `site` section the stored one counts": {
			sections: map[string]json.RawMessage{proto.SectionImages: json.RawMessage(`[]`)},
			stored:   cut,
			want:     []string{proto.SectionImages},
		},
	} {
		t.Run(name, func(t *testing.T) {
			if got := reportOrder(tc.sections, tc.stored); !slices.Equal(got, tc.want) {
				t.Fatalf("order %v, want %v", got, tc.want)
			}
		})
	}
}

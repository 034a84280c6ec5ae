package site

import (
	"encoding/json"
	"maps"
	"sync"

	"github.com/better-compute/better-compute/agent/session"
	"github.com/better-compute/better-compute/proto"
)

// The byte budget of each inventory section a site agent reports. A section over its
// budget is cut to it: its first entries, in the order the section keeps them, up to
// the budget, and the number left out goes in the `site` section's omitted. With the
// `site` section and the hello's other fields the sum stays well under proto.MaxFrame,
// so every hello and every report fits its frame whatever the site holds.
const (
	imagesBudget      = 1536 << 10
	bootEntriesBudget = 1 << 20
	// discoveriesBudget holds maxDiscoveries of any size DHCP lets a machine send.
	discoveriesBudget = 512 << 10
)

// cut is the JSON array of list's first entries whose encoding fits budget bytes, and
// how many entries it leaves out.
func cut[T any](list []T, budget int) (json.RawMessage, int) {
	out := []byte{'['}
	for i, e := range list {
		b, _ := json.Marshal(e)
		if i > 0 {
			b = append([]byte{','}, b...)
		}
		if len(out)+len(b)+1 > budget { // and the closing bracket
			return append(out, ']'), len(list) - i
		}
		out = append(out, b...)
	}
	return append(out, ']'), 0
}

// reports sends the site agent's inventory sections, each cut to its budget, keeping
// the `site` section's omitted in line with them: a section that leaves more entries out
// than before is sent after the `site` section that counts them, and one that leaves
// fewer out (or none) before the `site` section that counts fewer, so that the registry
// never holds a section cut more than its `site` section says (it would drop the image
// locations a cut `images` section leaves out).
type reports struct {
	mu      sync.Mutex
	session *session.Agent
	info    proto.SiteInventory
	// sections are the sections as last cut, for the first hello.
	sections map[string]json.RawMessage
}

func newReports(info proto.SiteInventory) *reports {
	r := &reports{info: info, sections: map[string]json.RawMessage{}}
	r.sections[proto.SectionSite] = r.siteSection()
	return r
}

// siteSection is the `site` section now; r.mu is held (or r is not shared yet).
func (r *reports) siteSection() json.RawMessage {
	data, _ := json.Marshal(r.info)
	return data
}

// set records a section cut from its entries (cut's answer) and sends it, before the
// `site` section when it leaves fewer entries out than before, after it when more. Before
// the session exists it only records it, for the first hello.
func (r *reports) set(section string, data json.RawMessage, omitted int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.sections[section] = data
	was := r.info.Omitted[section]
	if omitted < was {
		r.send(section)
	}
	if omitted != was {
		r.info.Omitted = maps.Clone(r.info.Omitted)
		if r.info.Omitted == nil {
			r.info.Omitted = map[string]int{}
		}
		if omitted == 0 {
			delete(r.info.Omitted, section)
		} else {
			r.info.Omitted[section] = omitted
		}
		r.sections[proto.SectionSite] = r.siteSection()
		r.send(proto.SectionSite)
	}
	if omitted >= was {
		r.send(section)
	}
}

// send sends section as recorded on the session, if there is one yet; r.mu is held.
func (r *reports) send(section string) {
	if r.session != nil {
		r.session.SetInventory(section, r.sections[section])
	}
}

// open makes the session with the sections as they are for its first hello (newSession
// gets them), and sends every later section on it.
func (r *reports) open(newSession func(hello map[string]json.RawMessage) (*session.Agent, error)) (*session.Agent, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	s, err := newSession(maps.Clone(r.sections))
	r.session = s
	return s, err
}

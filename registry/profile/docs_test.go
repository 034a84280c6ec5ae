package profile

import (
	"fmt"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/better-compute/better-compute/testkit/docstable"
)

// profilesDoc is the reference of the profile document.
const profilesDoc = "../../docs/profiles.md"

// TestDocumentDocumented: docs/profiles.md's tables of the document's fields and of a
// step's name the fields the checker takes and no other.
func TestDocumentDocumented(t *testing.T) {
	for _, c := range []struct {
		heading, doc string
	}{
		{"## The document", `{"id": "a", "version": 1, "target": "metal", "no-such-field": 0}`},
		{"## Steps", `{"id": "a", "version": 1, "target": "metal", "steps": [{"use": "power.getPower", "no-such-field": 0}]}`},
	} {
		_, rows := docstable.Table(t, profilesDoc, c.heading, "Field")
		var documented []string
		for _, r := range rows {
			documented = append(documented, docstable.Names(r.Cells[0])...)
		}
		slices.Sort(documented)
		if got := takenFields(t, c.doc); !slices.Equal(documented, got) {
			t.Errorf("%s: the table under %q names %v; the checker takes %v", profilesDoc, c.heading, documented, got)
		}
	}
}

var quotedName = regexp.MustCompile(`"([^"]*)"`)

// takenFields are the fields the checker lists when it refuses doc's unknown field.
func takenFields(t *testing.T, doc string) []string {
	t.Helper()
	for _, i := range Check([]byte(doc)) {
		if _, list, ok := strings.Cut(i.Message, "the fields are"); ok {
			var out []string
			for _, m := range quotedName.FindAllStringSubmatch(list, -1) {
				out = append(out, m[1])
			}
			slices.Sort(out)
			return out
		}
	}
	t.Fatalf("%s: no unknown field refused with the fields taken: %v", doc, Check([]byte(doc)))
	return nil
}

// TestCatalogDocumented: docs/profiles.md's step catalog has a row for each step of the
// catalog, in its order, with where it runs, its inputs (which are required, and their
// defaults) and its default timeout.
func TestCatalogDocumented(t *testing.T) {
	_, rows := docstable.Table(t, profilesDoc, "## The step catalog", "Step")
	var documented []string
	for _, r := range rows {
		name := strings.Join(docstable.Names(r.Cells[0]), "")
		documented = append(documented, name)
		s, ok := lookupStep(name)
		if !ok {
			continue // reported below
		}
		if runs := docstable.Names(r.Cells[1]); !slices.Equal(runs, s.runs) {
			t.Errorf("%s:%d: %s runs %v; the row says %v", profilesDoc, r.Line, name, s.runs, runs)
		}
		if d, err := time.ParseDuration(r.Cells[3]); err != nil || d != s.timeout {
			t.Errorf("%s:%d: %s's timeout is %s; the row says %s", profilesDoc, r.Line, name, s.timeout, r.Cells[3])
		}
		checkInputsDocumented(t, r, s)
	}
	if got := stepNames(); !slices.Equal(documented, got) {
		t.Errorf("%s: the step catalog's rows are %v; the catalog's steps %v", profilesDoc, documented, got)
	}
}

// checkInputsDocumented compares a catalog row's input cell with the step's inputs: none,
// or each input named in backticks, "(required)" after the required ones, and the
// default of the others that have one.
func checkInputsDocumented(t *testing.T, r docstable.Row, s *stepSpec) {
	t.Helper()
	cell := r.Cells[2]
	if len(s.inputs) == 0 {
		if !strings.HasPrefix(cell, "none") {
			t.Errorf("%s:%d: %s takes no input; the row says %q", profilesDoc, r.Line, s.name, cell)
		}
		return
	}
	for _, in := range s.inputs {
		named := "`" + in.name + "`"
		if !strings.Contains(cell, named) {
			t.Errorf("%s:%d: %s's input %s is not in the row", profilesDoc, r.Line, s.name, in.name)
			continue
		}
		if required := strings.Contains(cell, named+" (required)"); required != in.required {
			t.Errorf("%s:%d: %s's input %s required: %v; the row says %v", profilesDoc, r.Line, s.name, in.name, in.required, required)
		}
		if in.def != nil && !strings.Contains(cell, fmt.Sprintf("default %v", in.def)) && !strings.Contains(cell, fmt.Sprintf("default `%v`", in.def)) {
			t.Errorf("%s:%d: %s's input %s defaults to %v; the row does not say so", profilesDoc, r.Line, s.name, in.name, in.def)
		}
	}
}

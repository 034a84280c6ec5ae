package hostunit

import (
	"fmt"
	"maps"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/better-compute/better-compute/testkit/docstable"
)

// unitsDoc is where the units' settings are documented, a section per unit.
const unitsDoc = "../../docs/host-units.md"

// untabled are the units documented without a table of fields: sysctl's settings are
// sysctl names, fabric-manager has none but when.
var untabled = map[string][]string{UnitSysctl: nil, UnitFabricManager: {}}

// docTypes are the Type column's words and the kinds of the typed settings they stand for.
var docTypes = map[string][]reflect.Kind{
	"string":       {reflect.String},
	"string[]":     {reflect.Slice},
	"boolean":      {reflect.Bool},
	"whole number": {reflect.Int, reflect.Int64},
	"object":       {reflect.Map},
}

// TestUnitsDocumented: each unit's table in docs/host-units.md names the fields the
// unit's check takes and no other (when aside, which every unit takes), and each is a
// field of the typed settings bcd decodes, of the documented type, with the documented
// default; the fields documented as required are those a unit without them is refused
// for.
func TestUnitsDocumented(t *testing.T) {
	for _, u := range units {
		t.Run(u.name, func(t *testing.T) {
			checked := checkedFields(t, u.name)
			decoded := decodedFields(u.settings())
			if names := slices.Sorted(maps.Keys(decoded)); !slices.Equal(checked, names) {
				t.Errorf("the check takes %v; bcd decodes %v", checked, names)
			}
			if want, ok := untabled[u.name]; ok {
				if want != nil && len(checked) != 0 {
					t.Errorf("%s: %s is documented with no settings but when; it takes %v", unitsDoc, u.name, checked)
				}
				return
			}
			_, rows := docstable.Table(t, unitsDoc, "## "+u.name, "Field")
			var documented, required []string
			for _, r := range rows {
				name := strings.Join(docstable.Names(r.Cells[0]), "")
				documented = append(documented, name)
				f, ok := decoded[name]
				if !ok {
					continue // reported below
				}
				if kinds := docTypes[r.Cells[1]]; !slices.Contains(kinds, f.kind) {
					t.Errorf("%s:%d: %s.%s is documented as %q; bcd decodes a %s", unitsDoc, r.Line, u.name, name, r.Cells[1], f.kind)
				}
				if m := documentedDefault.FindStringSubmatch(r.Cells[2]); m != nil && m[1] != f.value {
					t.Errorf("%s:%d: %s.%s's default is documented as %s; the unit's is %s", unitsDoc, r.Line, u.name, name, m[1], f.value)
				}
				if strings.HasPrefix(r.Cells[2], "Required.") {
					required = append(required, name)
				}
			}
			slices.Sort(documented)
			if !slices.Equal(documented, checked) {
				t.Errorf("%s: %s's table names %v; the unit takes %v", unitsDoc, u.name, documented, checked)
			}
			slices.Sort(required)
			if got := missingFields(u.name); !slices.Equal(required, got) {
				t.Errorf("%s: %s's table says %v are required; {} is refused for %v", unitsDoc, u.name, required, got)
			}
		})
	}
}

// documentedDefault is a Rules cell's default: "Default `true`".
var documentedDefault = regexp.MustCompile("Default `([^`]*)`")

var quoted = regexp.MustCompile(`"([^"]*)"`)

// checkedFields are the fields the unit's check takes, but when, as its refusal of an
// unknown one lists them.
func checkedFields(t *testing.T, unit string) []string {
	t.Helper()
	problems := Validate(unit, []byte(`{"no-such-field": 0}`))
	if unit == UnitSysctl {
		return nil // any name may be a sysctl
	}
	if len(problems) == 0 || !strings.Contains(problems[0].Message, "the fields are") {
		t.Fatalf("an unknown field of %s is not refused with the fields it takes: %v", unit, problems)
	}
	_, list, _ := strings.Cut(problems[0].Message, "the fields are")
	var out []string
	for _, m := range quoted.FindAllStringSubmatch(list, -1) {
		if m[1] != "when" {
			out = append(out, m[1])
		}
	}
	slices.Sort(out)
	return out
}

// missingFields are the fields a unit's empty settings are refused for, as missing.
func missingFields(unit string) []string {
	var out []string
	for _, p := range Validate(unit, []byte(`{}`)) {
		if p.Path != "" && strings.HasSuffix(p.Message, " is required") {
			out = append(out, string(p.Path))
		}
	}
	slices.Sort(out)
	return out
}

// decodedField is a field of a unit's typed settings: its kind (a pointer's element's)
// and its default as the docs write it.
type decodedField struct {
	kind  reflect.Kind
	value string
}

// decodedFields are the json fields of a unit's typed settings, but when, with the
// defaults settings holds.
func decodedFields(s Settings) map[string]decodedField {
	v := reflect.ValueOf(s).Elem()
	out := map[string]decodedField{}
	for i := range v.NumField() {
		sf := v.Type().Field(i)
		name, _, _ := strings.Cut(sf.Tag.Get("json"), ",")
		if sf.Anonymous || name == "" || name == "-" {
			continue
		}
		f := v.Field(i)
		if f.Kind() == reflect.Pointer {
			out[name] = decodedField{kind: f.Type().Elem().Kind()} // nil: no default
			continue
		}
		out[name] = decodedField{kind: f.Kind(), value: fmt.Sprint(f.Interface())}
	}
	return out
}

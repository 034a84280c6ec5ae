// Package docstable keeps the hand-written reference tables of docs/ and the code they
// describe together: a config struct's fields (by their json or toml tags) and defaults
// against a `| field | default | ... |` table, a metric's type and labels against a row of
// docs/operations.md. Tests of the rooms that own the config call it; it imports nothing
// of the project.
package docstable

import (
	"bufio"
	"fmt"
	"maps"
	"os"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"
)

// Row is one row of a markdown table, its cells trimmed.
type Row struct {
	Line  int
	Cells []string
}

// Table is the header and the rows of the first table after the line heading (a markdown
// heading, as written) in the file at path whose header's first cell is column. It fails
// t when there is no such heading or table.
func Table(t testing.TB, path, heading, column string) (header []string, rows []Row) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	found, fenced, state := false, false, 0
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "```"):
			fenced = !fenced
		case fenced:
		case !found:
			found = line == heading
		case state == 2 && !strings.HasPrefix(line, "|"):
			return header, rows
		case strings.HasPrefix(line, "#"):
			t.Fatalf("%s: no table of %q under %q", path, column, heading)
		case state == 0 && strings.HasPrefix(line, "|"):
			if header = cells(line); header[0] == column {
				state = 1
			} else {
				state = -1 // another table
			}
		case state == 1: // the separator
			state = 2
		case state == 2:
			rows = append(rows, Row{Line: n, Cells: cells(line)})
		case state == -1 && !strings.HasPrefix(line, "|"):
			state = 0
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if len(rows) == 0 {
		t.Fatalf("%s: no table of %q under %q", path, column, heading)
	}
	return header, rows
}

// cells splits a table line at the pipes outside backticks.
func cells(line string) []string {
	line = strings.TrimSuffix(strings.TrimPrefix(strings.TrimSpace(line), "|"), "|")
	var out []string
	var cur strings.Builder
	code := false
	for _, r := range line {
		switch {
		case r == '`':
			code = !code
		case r == '|' && !code:
			out = append(out, strings.TrimSpace(cur.String()))
			cur.Reset()
			continue
		}
		cur.WriteRune(r)
	}
	return append(out, strings.TrimSpace(cur.String()))
}

var (
	code   = regexp.MustCompile("`([^`]*)`")
	braces = regexp.MustCompile(`\{([a-zA-Z?, ]+)\}`)
)

// Names is the names a cell gives in backticks: "`a`, `b`" is a and b.
func Names(cell string) []string {
	var out []string
	for _, m := range code.FindAllStringSubmatch(cell, -1) {
		out = append(out, m[1])
	}
	return out
}

// Config says how a config struct is documented in one table: the first cell of a row
// names its fields, the second is their default.
type Config struct {
	// Doc, Heading and Column find the table (Table).
	Doc, Heading, Column string
	// Tag is the struct tag the file is decoded by, json or toml; "" names the fields by
	// their Go names (a config given in code).
	Tag string
	// Elsewhere are fields documented as a whole in this table and field by field in
	// another (the site config's boot, in docs/boot.md): what is below them is not looked
	// for here.
	Elsewhere []string
	// Derived are fields whose default no table cell can be compared with: worked out
	// from other fields or the host (the site's httpBase from boot.serverIP), or a Go
	// value (a clock, a logger).
	Derived []string
	// Keys are the placeholders the table writes for the keys of maps of structs, by the
	// map field's path: with {"profiles": "NAME"}, the fields of profiles' values are
	// documented as profiles.NAME.FIELD, and profiles.NAME may have a row of its own.
	// A map of structs not named here is documented by its own row alone.
	Keys map[string]string
}

// Check fails t for every field of defaults' type, by its tag, that the table does not
// name, for every name in the table that is no field, and for every default the table
// gives, in a second column headed default, that is not the field's value in defaults (the
// struct as its defaults leave it).
// A field of a slice of structs is documented by one row that lists its element's fields
// in braces ("each `{subnet, range}`"); so is an optional struct (a pointer: "`{mode,
// pcrs?}`"), unless a row documents each of its fields. Defaults are compared where the table writes one
// word (a number, a duration, `true`, a backticked value; `none` is the zero value,
// `0: no bound` is 0); `required` and prose are not compared.
func (c Config) Check(t testing.TB, defaults any) {
	t.Helper()
	header, rows := Table(t, c.Doc, c.Heading, c.Column)
	fields := map[string]field{}
	walker{tag: c.Tag, keys: c.Keys, out: fields}.walk(reflect.TypeOf(defaults), "")
	documented := map[string]Row{}
	for _, r := range rows {
		names := Names(r.Cells[0])
		if len(names) == 0 {
			t.Errorf("%s:%d: the row names no field in backticks", c.Doc, r.Line)
		}
		for _, n := range names {
			if earlier, ok := documented[n]; ok {
				t.Errorf("%s:%d: %s is documented again (first at line %d): give each field one row", c.Doc, r.Line, n, earlier.Line)
			}
			documented[n] = r
			f, ok := fields[n]
			if !ok {
				t.Errorf("%s:%d: %s is documented but is no field of %s", c.Doc, r.Line, n, reflect.TypeOf(defaults))
				continue
			}
			if f.elem != nil {
				var listed []string
				for _, m := range braces.FindAllStringSubmatch(strings.Join(r.Cells, " "), -1) {
					for _, e := range strings.Split(m[1], ",") {
						listed = append(listed, strings.TrimSuffix(strings.TrimSpace(e), "?")) // "?": optional
					}
				}
				slices.Sort(listed)
				if !slices.Equal(listed, f.elem) {
					t.Errorf("%s:%d: %s's elements are {%s}, the row lists {%s}", c.Doc, r.Line, n, strings.Join(f.elem, ", "), strings.Join(listed, ", "))
				}
			}
		}
		if len(header) > 1 && header[1] == "default" && len(r.Cells) > 1 {
			c.checkDefaults(t, r, names, reflect.ValueOf(defaults))
		}
	}
	for _, path := range slices.Sorted(maps.Keys(fields)) {
		if _, ok := documented[path]; ok || fields[path].hasChildren || c.below(path) || listedIn(documented, fields, path) {
			continue
		}
		t.Errorf("%s has no row for %s (%s's %s): document it under %q", c.Doc, path, reflect.TypeOf(defaults), strings.TrimSpace(c.Tag+" field"), c.Heading)
	}
}

// listedIn says whether path is under an optional struct documented by one row that
// lists its fields in braces (checked where the row is).
func listedIn(documented map[string]Row, fields map[string]field, path string) bool {
	for i := strings.LastIndex(path, "."); i > 0; i = strings.LastIndex(path[:i], ".") {
		if _, ok := documented[path[:i]]; ok && fields[path[:i]].hasChildren && fields[path[:i]].elem != nil {
			return true
		}
	}
	return false
}

// below says whether path is under one of c.Elsewhere.
func (c Config) below(path string) bool {
	for _, e := range c.Elsewhere {
		if strings.HasPrefix(path, e+".") {
			return true
		}
	}
	return false
}

// field is one field of a config, found by walk.
type field struct {
	hasChildren bool     // a struct whose fields are documented one by one
	elem        []string // a slice of structs: its element's field names, sorted
}

// leaf types are written as one value though they are structs.
var leaf = []string{"netip.Addr", "netip.Prefix", "time.Time"}

// walker finds the fields of a config: by tag, the maps of structs whose keys are
// written as keys[path], into out by their dotted paths.
type walker struct {
	tag  string
	keys map[string]string
	out  map[string]field
}

// walk adds every tagged field of typ to w.out by its dotted path under prefix.
func (w walker) walk(typ reflect.Type, prefix string) {
	for typ.Kind() == reflect.Pointer {
		typ = typ.Elem()
	}
	for i := range typ.NumField() {
		sf := typ.Field(i)
		name := nameOf(sf, w.tag)
		if sf.Anonymous && name == "" && isStruct(sf.Type) {
			w.walk(sf.Type, prefix) // embedded: its fields are the outer's
			continue
		}
		if name == "-" || name == "" || !sf.IsExported() {
			continue
		}
		path := prefix + name
		var f field
		ft := sf.Type
		switch {
		case ft.Kind() == reflect.Pointer && isStruct(ft.Elem()):
			// An optional struct: one row listing its fields in braces, or a row for each.
			f.hasChildren = true
			f.elem = fieldNames(w.tag, ft.Elem())
			w.walk(ft.Elem(), path+".")
		case isStruct(ft):
			f.hasChildren = true
			w.walk(ft, path+".")
		case ft.Kind() == reflect.Slice && isStruct(ft.Elem()):
			f.elem = fieldNames(w.tag, ft.Elem())
		case ft.Kind() == reflect.Map && isStruct(ft.Elem()) && w.keys[path] != "":
			f.hasChildren = true
			key := path + "." + w.keys[path]
			w.out[key] = field{hasChildren: true}
			w.walk(ft.Elem(), key+".")
		}
		w.out[path] = f
	}
}

// fieldNames are the names of typ's own fields by tag, sorted.
func fieldNames(tag string, typ reflect.Type) []string {
	sub := map[string]field{}
	walker{tag: tag, out: sub}.walk(typ, "")
	var names []string
	for k := range sub {
		if !strings.Contains(k, ".") {
			names = append(names, k)
		}
	}
	slices.Sort(names)
	return names
}

// find is the field of the struct v named name by tag, embedded structs' fields included.
func find(v reflect.Value, tag, name string) reflect.Value {
	for i := range v.NumField() {
		sf := v.Type().Field(i)
		n := nameOf(sf, tag)
		if sf.Anonymous && n == "" && isStruct(sf.Type) {
			if f := find(v.Field(i), tag, name); f.IsValid() {
				return f
			}
		}
		if n == name {
			return v.Field(i)
		}
	}
	return reflect.Value{}
}

// nameOf is a field's name by tag, its Go name when tag is "" (a config given in code).
func nameOf(sf reflect.StructField, tag string) string {
	if tag == "" {
		return sf.Name
	}
	name, _, _ := strings.Cut(sf.Tag.Get(tag), ",")
	return name
}

func isStruct(t reflect.Type) bool {
	return t.Kind() == reflect.Struct && !slices.Contains(leaf, t.String())
}

// checkDefaults compares the default cell of r with the fields it names in v.
func (c Config) checkDefaults(t testing.TB, r Row, names []string, v reflect.Value) {
	t.Helper()
	cell := r.Cells[1]
	parts := []string{cell}
	if len(names) > 1 {
		if parts = strings.Split(cell, ", "); len(parts) == 1 {
			parts = slices.Repeat(parts, len(names)) // one default for them all
		} else if len(parts) != len(names) {
			t.Errorf("%s:%d: %d defaults for %d fields %v: give one each, in order", c.Doc, r.Line, len(parts), len(names), names)
			return
		}
	}
	for i, name := range names {
		if slices.Contains(c.Derived, name) {
			continue
		}
		doc, ok := word(parts[i])
		if !ok {
			continue
		}
		f := fieldByPath(c.Tag, v, name)
		if !f.IsValid() {
			continue // reported as no field
		}
		if got := value(f); !sameDefault(doc, got) {
			t.Errorf("%s:%d: %s's default is documented as %q; the code's is %q", c.Doc, r.Line, name, doc, got)
		}
	}
}

// word is a default cell's one value: a number, a duration or a word (backticks and
// quotes taken off), "" for none; false for required or prose.
func word(cell string) (string, bool) {
	cell = strings.TrimSpace(cell)
	if before, _, ok := strings.Cut(cell, ":"); ok && !strings.Contains(before, "`") {
		cell = before // "0: no bound"
	}
	switch cell {
	case "none":
		return "", true
	case "required":
		return "", false
	}
	if len(strings.Fields(cell)) != 1 {
		return "", false
	}
	return strings.Trim(cell, "`\""), true
}

// fieldByPath is the field of v at a dotted path of tag names, invalid when none is.
func fieldByPath(tag string, v reflect.Value, path string) reflect.Value {
	for _, name := range strings.Split(path, ".") {
		for v.Kind() == reflect.Pointer {
			if v.IsNil() {
				return reflect.Value{}
			}
			v = v.Elem()
		}
		if v.Kind() != reflect.Struct {
			return reflect.Value{}
		}
		if v = find(v, tag, name); !v.IsValid() {
			return v
		}
	}
	return v
}

// value is a field's value as a default is written, "" for a zero slice or nil.
func value(v reflect.Value) string {
	for v.Kind() == reflect.Pointer {
		if v.IsNil() {
			return ""
		}
		v = v.Elem()
	}
	switch v.Kind() {
	case reflect.Bool, reflect.Int, reflect.Int64, reflect.Float64:
	default:
		if v.IsZero() || v.Kind() == reflect.Slice && v.Len() == 0 {
			return ""
		}
	}
	if s, ok := v.Interface().(fmt.Stringer); ok {
		return s.String()
	}
	return fmt.Sprint(v.Interface())
}

// sameDefault says whether a documented default is the code's, durations by their length.
func sameDefault(doc, got string) bool {
	if doc == got {
		return true
	}
	d, err1 := time.ParseDuration(doc)
	g, err2 := time.ParseDuration(got)
	return err1 == nil && err2 == nil && d == g
}

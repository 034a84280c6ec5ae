package jsondoc

import (
	"cmp"
	"encoding"
	"encoding/base64"
	"encoding/json"
	"maps"
	"math"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
)

var (
	jsonUnmarshaler = reflect.TypeFor[json.Unmarshaler]()
	textUnmarshaler = reflect.TypeFor[encoding.TextUnmarshaler]()
)

// Shaper is a type that decodes itself (json.Unmarshaler) and checks the shape it takes,
// so that a problem in it is found, at its path, before it decodes (encoding/json tells no
// path of an error a type's own decoding returns).
type Shaper interface {
	ShapeJSON(r *Report, v *Value, p Path)
}

// Shape checks the value v found at path p against the Go type t as encoding/json would
// decode it into a value of that type, but strictly: an object's keys name t's fields
// exactly (encoding/json also takes a key that differs from a field's name only in case),
// no key is unknown, and every value has the JSON type its field takes (a whole number in
// range for an integer). A Shaper checks its own shape; an encoding.TextUnmarshaler takes a
// string it decodes (decodesText); any other type that decodes itself (json.Unmarshaler)
// is left to do so. null is accepted anywhere, as encoding/json does.
func (r *Report) Shape(v *Value, p Path, t reflect.Type) {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if v.Kind == Null {
		return
	}
	if s, ok := reflect.New(t).Interface().(Shaper); ok {
		s.ShapeJSON(r, v, p)
		return
	}
	if t.Implements(textUnmarshaler) || reflect.PointerTo(t).Implements(textUnmarshaler) {
		if r.kind(v, p, String) { // time.Time, netip.Addr: text, whether or not they decode JSON too
			r.decodesText(v, p, t)
		}
		return
	}
	if t.Implements(jsonUnmarshaler) || reflect.PointerTo(t).Implements(jsonUnmarshaler) {
		return
	}
	switch t.Kind() {
	case reflect.Struct:
		r.shapeStruct(v, p, t)
	case reflect.Map:
		if r.Object(v, p) {
			for _, m := range v.Members {
				r.Shape(m.Value, p.Field(m.Key), t.Elem())
			}
		}
	case reflect.Slice, reflect.Array:
		if t.Kind() == reflect.Slice && t.Elem().Kind() == reflect.Uint8 {
			if s, ok := r.String(v, p); ok {
				if _, err := base64.StdEncoding.DecodeString(s); err != nil {
					r.Add(v, p, "must be the standard base64 of the bytes: %v", err)
				}
			}
			return
		}
		if r.kind(v, p, Array) {
			for i, item := range v.Items {
				r.Shape(item, p.Index(i), t.Elem())
			}
		}
	case reflect.String:
		r.kind(v, p, String)
	case reflect.Bool:
		r.kind(v, p, Bool)
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		bits := t.Bits()
		r.Whole(v, p, -1<<(bits-1), 1<<(bits-1)-1)
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		r.Whole(v, p, 0, int64(min(uint64(math.MaxInt64), 1<<t.Bits()-1)))
	case reflect.Float32, reflect.Float64:
		if r.kind(v, p, Number) {
			r.float(v, p, t.Bits())
		}
	case reflect.Interface:
		r.anyValue(v, p)
	}
}

// decodesText records a problem unless the string v decodes into the text type t as
// encoding/json would decode it (UnmarshalJSON when t has it, else UnmarshalText): a time
// that is not RFC 3339 is refused at its path, where encoding/json's error would name
// none. The type's error quotes the text, so it is cut short.
func (r *Report) decodesText(v *Value, p Path, t reflect.Type) {
	var err error
	switch dst := reflect.New(t).Interface().(type) {
	case json.Unmarshaler:
		err = dst.UnmarshalJSON(v.Raw)
	case encoding.TextUnmarshaler:
		err = dst.UnmarshalText([]byte(v.Text))
	}
	if err != nil {
		r.Add(v, p, "cannot be read: %.200v", err)
	}
}

// float records a problem unless the number v fits a float of the given bits.
func (r *Report) float(v *Value, p Path, bits int) {
	if _, err := strconv.ParseFloat(v.Text, bits); err != nil {
		r.Add(v, p, "%s is out of range", v.Text)
	}
}

// anyValue checks a value decoded into an interface: its numbers must be float64s.
func (r *Report) anyValue(v *Value, p Path) {
	switch v.Kind {
	case Number:
		r.float(v, p, 64)
	case Array:
		for i, item := range v.Items {
			r.anyValue(item, p.Index(i))
		}
	case Object:
		for _, m := range v.Members {
			r.anyValue(m.Value, p.Field(m.Key))
		}
	}
}

func (r *Report) shapeStruct(v *Value, p Path, t reflect.Type) {
	if !r.Object(v, p) {
		return
	}
	fields := jsonFields(t)
	for _, m := range v.Members {
		if ft, ok := fields[m.Key]; ok {
			r.Shape(m.Value, p.Field(m.Key), ft)
			continue
		}
		names := slices.Sorted(maps.Keys(fields))
		if i := slices.IndexFunc(names, func(n string) bool { return strings.EqualFold(n, m.Key) }); i >= 0 {
			r.AddAt(m.KeyOffset, p.Field(m.Key), "unknown field %q: names are case-sensitive, write %q", m.Key, names[i])
			continue
		}
		r.AddAt(m.KeyOffset, p.Field(m.Key), "unknown field %q; the fields are %s", m.Key, quoteList(names))
	}
}

// fieldCache maps a struct type to its fields by JSON name.
var fieldCache sync.Map

// jsonFields are the fields of the struct type t by the name encoding/json gives them: the
// json tag's name, else the Go name; the fields of an embedded struct without a tag are
// the struct's own, unless a shallower field has the name.
func jsonFields(t reflect.Type) map[string]reflect.Type {
	if f, ok := fieldCache.Load(t); ok {
		return f.(map[string]reflect.Type)
	}
	fields := map[string]reflect.Type{}
	var embedded []reflect.Type
	for f := range t.Fields() {
		tag := f.Tag.Get("json")
		if tag == "-" {
			continue
		}
		name, _, _ := strings.Cut(tag, ",")
		ft := f.Type
		if ft.Kind() == reflect.Pointer {
			ft = ft.Elem()
		}
		if f.Anonymous && name == "" && ft.Kind() == reflect.Struct {
			embedded = append(embedded, ft)
			continue
		}
		if !f.IsExported() {
			continue
		}
		fields[cmp.Or(name, f.Name)] = f.Type
	}
	for _, et := range embedded {
		for name, ft := range jsonFields(et) {
			if _, shallower := fields[name]; !shallower {
				fields[name] = ft
			}
		}
	}
	fieldCache.Store(t, fields)
	return fields
}

package jsondoc

import "strconv"

// Path names a value inside a document the way messages print it: field names joined by
// dots, array indices in brackets (steps[2].timeout). The empty path is the document
// itself. Keys are written as they are, so a key holding a dot (a sysctl name) reads as
// several fields; a path is for people, not for addressing.
type Path string

// Field returns the path of the member name of the object at p.
func (p Path) Field(name string) Path {
	if p == "" {
		return Path(name)
	}
	return p + "." + Path(name)
}

// Index returns the path of element i of the array at p.
func (p Path) Index(i int) Path {
	return p + "[" + Path(strconv.Itoa(i)) + "]"
}

// Under returns the path q, a path inside the value at p, as a path of p's document.
func (p Path) Under(q Path) Path {
	switch {
	case q == "":
		return p
	case q[0] == '[':
		return p + q
	}
	return p.Field(string(q))
}

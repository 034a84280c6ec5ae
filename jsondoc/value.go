package jsondoc

// Kind is the JSON type of a value.
type Kind uint8

// The JSON types.
const (
	Null Kind = iota
	Bool
	Number
	String
	Array
	Object
)

// String names the kind with its article, for messages: "a string", "an object".
func (k Kind) String() string {
	switch k {
	case Null:
		return "null"
	case Bool:
		return "a boolean"
	case Number:
		return "a number"
	case String:
		return "a string"
	case Array:
		return "an array"
	default:
		return "an object"
	}
}

// Value is one parsed JSON value. Offsets are byte offsets into the parsed document.
type Value struct {
	Kind Kind
	// Bool is the value of a Bool.
	Bool bool
	// Text is the decoded value of a String, or the literal text of a Number.
	Text string
	// Items are the elements of an Array.
	Items []*Value
	// Members are the members of an Object, in document order, keys unique.
	Members []Member
	// Offset is where the value starts; End is just past its last byte.
	Offset, End int
	// Raw is the value's JSON text, a slice of the parsed document.
	Raw []byte
}

// Member is one key and value of an object.
type Member struct {
	Key string
	// KeyOffset is where the key's opening quote is.
	KeyOffset int
	Value     *Value
}

// Get returns the value of the member key of an object, or nil.
func (v *Value) Get(key string) *Value {
	if v == nil {
		return nil
	}
	for _, m := range v.Members {
		if m.Key == key {
			return m.Value
		}
	}
	return nil
}

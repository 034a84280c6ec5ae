package hostunit

import (
	"encoding/json"
	"testing"
)

// FuzzValidate checks that Validate never panics and that whatever it accepts decodes, and
// decodes again the same after encoding: what the registry accepts, bcd can apply.
func FuzzValidate(f *testing.F) {
	for i, name := range Order() {
		f.Add(uint8(i), []byte(validSettings[name]))
	}
	f.Add(uint8(8), []byte(`{"from": "pool"}`))
	f.Fuzz(func(t *testing.T, unit uint8, doc []byte) {
		name := Order()[int(unit)%len(units)]
		if problems := Validate(name, doc); len(problems) > 0 {
			return
		}
		s, err := Decode(name, doc)
		if err != nil {
			t.Fatalf("Decode of an accepted %s: %v", name, err)
		}
		text, err := json.Marshal(s)
		if err != nil {
			t.Fatal(err)
		}
		if problems := Validate(name, text); len(problems) > 0 {
			t.Fatalf("the encoding %s of an accepted %s is refused: %v", text, name, problems)
		}
	})
}

package proto

import (
	"encoding/json"
	"reflect"
	"testing"
)

// TestMarshalKeepsHTMLCharacters checks that Marshal writes <, > and & as themselves,
// inside a MarshalJSON method's text too, and otherwise as json.Marshal does.
func TestMarshalKeepsHTMLCharacters(t *testing.T) {
	v := struct {
		Text string          `json:"text"`
		Raw  json.RawMessage `json:"raw"`
	}{Text: `a<b>&"c"` + "\n", Raw: json.RawMessage(`{ "x" : 1 }`)}
	got, err := Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	if want := `{"text":"a<b>&\"c\"\n","raw":{"x":1}}`; string(got) != want {
		t.Errorf("Marshal: %s, want %s", got, want)
	}
	std, _ := json.Marshal(v)
	var a, b any
	if json.Unmarshal(got, &a) != nil || json.Unmarshal(std, &b) != nil || !reflect.DeepEqual(a, b) || len(std) <= len(got) {
		t.Errorf("Marshal's %s does not read as json.Marshal's %s", got, std)
	}
}

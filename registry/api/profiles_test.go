package api

import (
	"context"
	"testing"

	"github.com/better-compute/better-compute/proto"
	"github.com/google/go-cmp/cmp"
)

// TestValidateSpeaksAsCreateRefuses: through the API a profile's problems are
// INVALID_INPUT, so profiles.validate reports each with the code (and the path)
// profiles.create refuses the same document with.
func TestValidateSpeaksAsCreateRefuses(t *testing.T) {
	c := rootClient(t, ActionProfilesManage, ActionProfilesRead)
	docs := map[string]string{
		"a bad timeout": `{"id": "x", "version": 1, "target": "metal", "steps": [{"use": "power.getPower"}, {"use": "power.getPower"}, {"use": "power.getPower", "timeout": "soon"}]}`,
		"not JSON":      `{"id": "x",`,
		"a vps field":   `{"id": "x", "version": 1, "target": "vps", "image": {"ref": "os@1"}, "steps": []}`,
	}
	for name, doc := range docs {
		t.Run(name, func(t *testing.T) {
			var v Validation
			if err := c.Call(context.Background(), "profiles.validate", ValidateProfileRequest{Document: Document(doc)}, &v); err != nil {
				t.Fatal(err)
			}
			err := c.Call(context.Background(), "profiles.create", CreateProfileRequest{Document: Document(doc)}, &ProfileView{})
			e := proto.AsError(err)
			if v.Valid || len(v.Issues) == 0 || e == nil {
				t.Fatalf("validate %+v, create %v: want both to refuse the document", v, err)
			}
			type problem struct {
				Code proto.Code
				Path string
			}
			want := problem{proto.InvalidInput, e.Details.Path}
			if diff := cmp.Diff(want, problem{v.Issues[0].Code, v.Issues[0].Path}); diff != "" || e.Code != proto.InvalidInput {
				t.Errorf("create refuses with %s at %q; validate's first issue (-want +got):\n%s", e.Code, e.Details.Path, diff)
			}
		})
	}
}

// TestProfileMethodsNameAMissingID: profiles.update of a visibility and profiles.delete
// without an id refuse INVALID_INPUT at id, as a field the caller left out, rather than
// NOT_FOUND of a profile named "".
func TestProfileMethodsNameAMissingID(t *testing.T) {
	c := rootClient(t, ActionProfilesManage, ActionProfilesRead)
	for method, req := range map[string]any{
		"profiles.update": UpdateProfileRequest{Visibility: "public"},
		"profiles.delete": ProfileKey{},
	} {
		err := c.Call(context.Background(), method, req, &struct{}{})
		if e := proto.AsError(err); e == nil || e.Code != proto.InvalidInput || e.Details.Path != "id" {
			t.Errorf("%s without an id: %v, want INVALID_INPUT at id", method, err)
		}
	}
}

package api

import (
	"context"
	"fmt"
	"strings"
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

// TestANegativeProfileVersionChangesNothing: profileVersion is a positive whole number,
// or left out (0) for every version (delete) or the latest (update). -1 is neither:
// profiles.delete and profiles.update refuse it with INVALID_INPUT at profileVersion,
// as get does, and every version stays. Before, delete took any version under 1 for
// "all" and hid every version of the profile.
func TestANegativeProfileVersionChangesNothing(t *testing.T) {
	c := rootClient(t, ActionProfilesManage, ActionProfilesRead)
	ctx := context.Background()
	for v := 1; v <= 3; v++ {
		doc := Document(fmt.Sprintf(`{"id":"p","version":%d,"target":"metal","steps":[{"use":"power.getPower"}]}`, v))
		if err := c.Call(ctx, "profiles.create", CreateProfileRequest{Document: doc}, &ProfileView{}); err != nil {
			t.Fatal(err)
		}
	}
	for method, req := range map[string]any{
		"profiles.delete":               ProfileKey{ID: "p", ProfileVersion: -1},
		"profiles.update of visibility": UpdateProfileRequest{ProfileKey: ProfileKey{ID: "p", ProfileVersion: -1}, Visibility: "public"},
		"profiles.update of a document": UpdateProfileRequest{ProfileKey: ProfileKey{ID: "p", ProfileVersion: -1},
			Document: Document(`{"id":"p","version":1,"target":"metal","description":"changed","steps":[{"use":"power.getPower"}]}`)},
	} {
		err := c.Call(ctx, strings.Fields(method)[0], req, &struct{}{})
		if err == nil {
			t.Errorf("%s of version -1 succeeded, want INVALID_INPUT at profileVersion", method)
		} else if e := proto.AsError(err); e.Code != proto.InvalidInput || e.Details.Path != "profileVersion" {
			t.Errorf("%s of version -1: %v, want INVALID_INPUT at profileVersion", method, err)
		}
	}
	for v := 1; v <= 3; v++ {
		var got ProfileView
		if err := c.Call(ctx, "profiles.get", ProfileKey{ID: "p", ProfileVersion: v}, &got); err != nil {
			t.Errorf("version %d after the refused calls: %v", v, err)
		} else if got.Rev != 1 || got.Visibility != "private" {
			t.Errorf("version %d changed: %+v", v, got)
		}
	}
}

// TestValidateTakesADocumentOrAnID: profiles.validate of a document together with the id
// (or version) of a stored profile is INVALID_INPUT at the stored profile's field, rather
// than the document's problems, which the caller would read as the stored version's.
func TestValidateTakesADocumentOrAnID(t *testing.T) {
	c := rootClient(t, ActionProfilesManage, ActionProfilesRead)
	ctx := context.Background()
	stored := Document(`{"id":"p","version":1,"target":"metal","steps":[{"use":"power.getPower"}]}`)
	if err := c.Call(ctx, "profiles.create", CreateProfileRequest{Document: stored}, &ProfileView{}); err != nil {
		t.Fatal(err)
	}
	bad := Document(`{"id":"p","version":2,"target":"metal","steps":[{"use":"power.getPower","timeout":"soon"}]}`)
	for name, tc := range map[string]struct {
		key  ProfileKey
		path string
	}{
		"an id":               {ProfileKey{ID: "p"}, "id"},
		"a version":           {ProfileKey{ProfileVersion: 1}, "profileVersion"},
		"an id and a version": {ProfileKey{ID: "p", ProfileVersion: 1}, "id"},
	} {
		t.Run(name, func(t *testing.T) {
			var v Validation
			err := c.Call(ctx, "profiles.validate", ValidateProfileRequest{ProfileKey: tc.key, Document: bad}, &v)
			if err == nil {
				t.Fatalf("validate of a document and %s: %+v, want INVALID_INPUT at %s", name, v, tc.path)
			}
			if e := proto.AsError(err); e.Code != proto.InvalidInput || e.Details.Path != tc.path {
				t.Errorf("validate of a document and %s: %v, want INVALID_INPUT at %s", name, err, tc.path)
			}
		})
	}
	for name, req := range map[string]ValidateProfileRequest{"the document": {Document: bad}, "the stored version": {ProfileKey: ProfileKey{ID: "p"}}} {
		var v Validation
		if err := c.Call(ctx, "profiles.validate", req, &v); err != nil || v.Valid == (name == "the document") {
			t.Errorf("validate of %s alone: %+v, %v", name, v, err)
		}
	}
}

package site

import (
	"encoding/json"
	"testing"

	"github.com/better-compute/better-compute/proto"
	"github.com/better-compute/better-compute/registry/store"
)

func TestExpandMediaInsert(t *testing.T) {
	st := openStore(t)
	var node store.Node
	var run store.Run
	err := st.Update(func(tx *store.Tx) (err error) {
		node, err = tx.CreateNode(store.Node{Tenant: "acme", Pool: "gpu", MACs: []string{"52:54:00:00:00:01"}})
		if err != nil {
			return err
		}
		run, err = tx.CreateRun(store.Run{Node: node.ID, Tenant: "acme", Steps: []store.RunStep{
			{Phase: "main", Index: 0, Use: "plugin.buildIso", Result: json.RawMessage(`{"url":"https://isos.example/n1.iso"}`)},
			{Phase: "main", Index: 1, Use: "media.insert"}}})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	for name, tc := range map[string]struct {
		kind, with string
		want       string // the expanded input, when no error
		code       proto.Code
		path       string
	}{
		"url":             {kind: proto.CommandMediaInsert, with: `{"url":"https://isos.example/x.iso"}`, want: `{"url":"https://isos.example/x.iso"}`},
		"plain http":      {kind: proto.CommandMediaInsert, with: `{"url":"http://isos.example/x.iso"}`, code: proto.InvalidInput, path: "with"},
		"unknown field":   {kind: proto.CommandMediaInsert, with: `{"uri":"https://x"}`, code: proto.InvalidInput, path: "with.uri"},
		"fromStep":        {kind: proto.CommandMediaInsert, with: `{"fromStep":"steps[0]"}`, want: `{"url":"https://isos.example/n1.iso"}`},
		"fromStep no url": {kind: proto.CommandMediaInsert, with: `{"fromStep":"steps[1]"}`, code: proto.InvalidInput, path: "with.fromStep"},
		"unknown image":   {kind: proto.CommandMediaInsert, with: `{"image":"nope@1"}`, code: proto.NotFound, path: "with.image"},
		"another command": {kind: "power.setPower", with: `{"action":"on"}`, want: `{"action":"on"}`},
	} {
		t.Run(name, func(t *testing.T) {
			payload, _ := json.Marshal(proto.SiteCommand{Node: node.ID, Input: json.RawMessage(tc.with)})
			var got proto.Command
			err := st.View(func(tx *store.Tx) (err error) {
				got, err = ExpandMediaInsert(tx, proto.Command{ID: run.ID + ":main.1:a1", Kind: tc.kind, Payload: payload}, nil)
				return err
			})
			if tc.code != "" {
				if e := proto.AsError(err); err == nil || e.Code != tc.code || e.Details.Path != tc.path {
					t.Fatalf("got %v, want %s at %s", err, tc.code, tc.path)
				}
				return
			}
			var sc proto.SiteCommand
			if err != nil || json.Unmarshal(got.Payload, &sc) != nil || string(sc.Input) != tc.want {
				t.Fatalf("got %s, %v; want input %s", got.Payload, err, tc.want)
			}
		})
	}
}

package proto_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/better-compute/better-compute/proto"
)

// TestAnAnswerIsBoundedWhereItEnters: an agent's answer over proto.MaxStepResult is
// refused (INVALID_INPUT at result, reason too-large) before anything of it is stored,
// an error's text is cut to proto.MaxErrorMessage, an error's code that is none of the
// project's is taken as DRIVER_ERROR, and an answer within the bounds is taken as it is.
func TestAnAnswerIsBoundedWhereItEnters(t *testing.T) {
	at := func(n int) json.RawMessage {
		return json.RawMessage(`{"pad":"` + strings.Repeat("a", n-len(`{"pad":""}`)) + `"}`)
	}
	cases := map[string]struct {
		res        proto.Result
		wantResult int
		wantError  string
	}{
		"a result at the bound": {res: proto.Result{ID: "c1", Result: at(proto.MaxStepResult)}, wantResult: proto.MaxStepResult},
		"a result past the bound": {res: proto.Result{ID: "c1", Result: at(proto.MaxStepResult + 1)},
			wantError: "INVALID_INPUT too-large result"},
		"an error of 4 MiB": {res: proto.Result{ID: "c1", Error: &proto.Error{Code: proto.DriverError, Message: strings.Repeat("e", 4<<20)}},
			wantError: "DRIVER_ERROR  "},
		"an error of a code of its own": {res: proto.Result{ID: "c1", Error: &proto.Error{Code: "BMC_SULKS", Message: "no"}},
			wantError: "DRIVER_ERROR  "},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got := tc.res.Bounded("inventory.refresh")
			if got.ID != "c1" || len(got.Result) != tc.wantResult {
				t.Errorf("the answer keeps id %q and a result of %d bytes, want c1 and %d", got.ID, len(got.Result), tc.wantResult)
			}
			var e string
			if got.Error != nil {
				e = string(got.Error.Code) + " " + got.Error.Details.Reason + " " + got.Error.Details.Path
				if len(got.Error.Message) > proto.MaxErrorMessage {
					t.Errorf("the error keeps %d bytes of message, more than %d", len(got.Error.Message), proto.MaxErrorMessage)
				}
			}
			if e != tc.wantError {
				t.Errorf("the answer's error %q, want %q", e, tc.wantError)
			}
		})
	}
}

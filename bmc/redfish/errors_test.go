package redfish

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"

	"github.com/better-compute/better-compute/bmc"
	"github.com/better-compute/better-compute/bmc/redfishsim"
	"github.com/better-compute/better-compute/proto"
	"github.com/stmcginnis/gofish/schemas"
)

func TestBMCMessage(t *testing.T) {
	cases := map[string]struct {
		err  error
		want string
	}{
		"extended info": {
			err:  schemas.ConstructError(400, []byte(`{"error": {"code": "Base.1.8.GeneralError", "message": "A general error has occurred.", "@Message.ExtendedInfo": [{"MessageId": "Base.1.8.PropertyValueNotInList", "Message": "The value 'Floppy' for the property BootSourceOverrideTarget is not in the list of acceptable values."}, {"MessageId": "Base.1.8.Success", "Message": "Nothing else changed."}]}}`)),
			want: "HTTP 400: The value 'Floppy' for the property BootSourceOverrideTarget is not in the list of acceptable values.; Nothing else changed.",
		},
		"message only": {
			err:  schemas.ConstructError(503, []byte(`{"error": {"code": "Base.1.8.ServiceTemporarilyUnavailable", "message": "The service is temporarily unavailable. Retry in 30 seconds."}}`)),
			want: "HTTP 503: The service is temporarily unavailable. Retry in 30 seconds.",
		},
		"empty body":    {err: schemas.ConstructError(404, nil), want: "HTTP 404: Not Found"},
		"HTML page":     {err: schemas.ConstructError(500, []byte("<html>"+strings.Repeat("x", 2000)+"</html>")), want: "HTTP 500: <html>" + strings.Repeat("x", maxMessage-6) + "..."},
		"transport":     {err: errors.New("dial tcp 10.0.0.5:443: connect: connection refused"), want: "dial tcp 10.0.0.5:443: connect: connection refused"},
		"in collection": {err: &schemas.CollectionError{Failures: map[string]error{"/redfish/v1/Systems/1/Memory/B": schemas.ConstructError(500, nil), "/redfish/v1/Systems/1/Memory/A": schemas.ConstructError(404, nil)}}, want: "/redfish/v1/Systems/1/Memory/A: HTTP 404: Not Found"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if got := bmcMessage(tc.err); got != tc.want {
				t.Fatalf("got  %q\nwant %q", got, tc.want)
			}
		})
	}
}

// TestPasswordNeverQuoted: a BMC that repeats the password it was sent in its login
// failure's text (or a resource's) fails its step without the password in the error, which
// becomes the step's result that the node's tenant reads, while the credential may be the
// platform's. Before, the BMC's words went into the error as they were.
func TestPasswordNeverQuoted(t *testing.T) {
	sim := newSim(t, redfishsim.Config{})
	echo := `{"error": {"code": "Base.1.8.GeneralError", "message": "Login failed for operator with password ` + password + `", "@Message.ExtendedInfo": [{"MessageId": "Base.1.8.NoValidSession", "Message": "password ` + password + ` is not the one set"}]}}`
	sim.AnswerRequest(http.MethodPost, "/redfish/v1/SessionService/Sessions", http.StatusUnauthorized, []byte(echo))
	_, err := Open(context.Background(), config(t, sim), bmc.Env{Credentials: credentials})
	checkErr(t, err, proto.DriverError, "is not the one set")
	if strings.Contains(err.Error(), password) || !strings.Contains(err.Error(), "[redacted]") {
		t.Fatalf("the error quotes the login's password: %v", err)
	}
}

func TestRedacted(t *testing.T) {
	for _, tc := range []struct{ text, secret, want string }{
		{"bad password s3cret-Pa55 and s3cret-Pa55", "s3cret-Pa55", "bad password [redacted] and [redacted]"},
		{"clipped at s3cret...", "s3cret-Pa55", "clipped at [redacted]..."},
		{"clipped at s3c...", "s3cret-Pa55", "clipped at s3c..."},
		{"nothing of it...", "s3cret-Pa55", "nothing of it..."},
		{"no secret set", "", "no secret set"},
	} {
		if got := redacted(tc.text, tc.secret); got != tc.want {
			t.Errorf("redacted(%q, %q) = %q, want %q", tc.text, tc.secret, got, tc.want)
		}
	}
}

package redfish

import (
	"errors"
	"strings"
	"testing"

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

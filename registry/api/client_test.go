package api

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/better-compute/better-compute/proto"
)

// TestRetryAfterOfARefusalForNow: a call the registry refused for now (UNAVAILABLE with
// Retry-After) on behalf of a browser is answered at once, its error the registry's
// (code and reason) with the seconds its answer asked, unbounded by the client's own
// waits; an answer of another code, or without the header, asks none.
func TestRetryAfterOfARefusalForNow(t *testing.T) {
	cases := map[string]struct {
		status     int
		retryAfter string
		body       string
		want       int
		code       proto.Code
		reason     string
	}{
		"refused for now": {http.StatusServiceUnavailable, "3600", `{"code":"UNAVAILABLE","message":"later","details":{"reason":"source-failures"}}`, 3600, proto.Unavailable, proto.ReasonSourceFailures},
		"no header":       {http.StatusServiceUnavailable, "", `{"code":"UNAVAILABLE","message":"etcd did not answer"}`, -1, proto.Unavailable, ""},
		"not seconds":     {http.StatusServiceUnavailable, "soon", `{"code":"UNAVAILABLE","message":"later"}`, -1, proto.Unavailable, ""},
		"another code":    {http.StatusUnauthorized, "5", `{"code":"UNAUTHENTICATED","message":"unknown credential"}`, -1, proto.Unauthenticated, ""},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			calls := 0
			h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				calls++
				if tc.retryAfter != "" {
					w.Header().Set("Retry-After", tc.retryAfter)
				}
				w.WriteHeader(tc.status)
				w.Write([]byte(tc.body))
			})
			c := NewHandlerClient(h, "bcc_x")
			c.OnBehalfOf(httptest.NewRequest(http.MethodPost, "/ui/signin", nil))
			err := c.Call(context.Background(), "credentials.whoami", struct{}{}, nil)
			if got := RetryAfter(err); got != tc.want || calls != 1 {
				t.Fatalf("RetryAfter %d after %d calls, want %d after 1", got, calls, tc.want)
			}
			if e := proto.AsError(err); e.Code != tc.code || e.Details.Reason != tc.reason {
				t.Errorf("error %v (reason %q), want %s (reason %q)", err, e.Details.Reason, tc.code, tc.reason)
			}
		})
	}
	if RetryAfter(nil) != -1 {
		t.Error("no error asks for a wait")
	}
}

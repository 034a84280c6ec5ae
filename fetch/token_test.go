package fetch

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"golang.org/x/net/http/httpguts"
)

// TestTokenThatCannotBeSentIsRefused: an OCI registry's token realm answers a token
// holding a line break. The fetch fails naming the token response and its realm, and
// no request carries the token. Before, the token was taken, and the blob's request
// that would carry it failed in Go's client with "invalid header field value for
// Authorization", naming neither the token nor the realm that sent it.
func TestTokenThatCannotBeSentIsRefused(t *testing.T) {
	var authorized []string
	s := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/token" {
			io.WriteString(w, `{"token":"tok\r\nX-Injected: 1"}`)
			return
		}
		if a := r.Header.Get("Authorization"); a != "" {
			authorized = append(authorized, a)
		}
		w.Header().Set("WWW-Authenticate", `Bearer realm="`+"https://"+r.Host+`/token",service="s"`)
		w.WriteHeader(http.StatusUnauthorized)
	}))
	defer s.Close()
	src, err := Parse("oci://" + strings.TrimPrefix(s.URL, "https://") + "/os/ubuntu@sha256:" + strings.Repeat("ab", 32))
	if err != nil {
		t.Fatal(err)
	}
	_, err = NewClient(s.Client()).Open(context.Background(), src, 0, "")
	host := strings.TrimPrefix(s.URL, "https://")
	if err == nil || !strings.Contains(err.Error(), "token response from "+host+" holds a token that cannot be sent") {
		t.Fatalf("a token of a line break: %v; want it refused naming the token response from %s", err, host)
	}
	if len(authorized) > 0 {
		t.Errorf("requests carried the token: %q", authorized)
	}
}

// FuzzBearerToken reads any answer of a token realm: refused, or a token that is not
// empty, can be sent in an Authorization header as Go's client checks one, is the
// answer's `token` when it holds one (else its `access_token`; checked where no other
// key of the answer is `token` in another case, which Go's decoder takes too), and reads
// back the same once written as a token realm's answer.
func FuzzBearerToken(f *testing.F) {
	for _, s := range []string{
		`{"token":"tok-1","expires_in":300}`, `{"token": "t"}`, `{"access_token":"a"}`,
		`{"token":"","access_token":"a"}`, `{"token":"a","access_token":"b"}`, `{}`, `null`, `[]`, `{"token":1}`,
		`{"token":"tok\r\nX-Injected: 1"}`, `{"token":"t\u00e9"}`, `{"token":"t"} trailing`, ``,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, answer []byte) {
		tok, err := bearerToken(strings.NewReader(string(answer)), "realm.example")
		if err != nil {
			if !strings.Contains(err.Error(), "token response from realm.example") {
				t.Fatalf("the error does not name the realm: %v", err)
			}
			return
		}
		if tok == "" || !httpguts.ValidHeaderFieldValue("Bearer "+tok) {
			t.Fatalf("token %q taken, which cannot be sent", tok)
		}
		var fields map[string]json.RawMessage
		if json.NewDecoder(strings.NewReader(string(answer))).Decode(&fields) == nil && tokenKeys(fields) == 1 {
			var exact string
			if json.Unmarshal(fields["token"], &exact) == nil && exact != "" && exact != tok {
				t.Fatalf("token %q taken, the answer's token is %q", tok, exact)
			}
		}
		again, err := json.Marshal(map[string]string{"token": tok})
		if err != nil {
			t.Fatal(err)
		}
		if back, err := bearerToken(strings.NewReader(string(again)), "realm.example"); err != nil || back != tok {
			t.Fatalf("token %q written as %s reads back as %q (%v)", tok, again, back, err)
		}
	})
}

// tokenKeys counts the keys of fields that are `token` in any case.
func tokenKeys(fields map[string]json.RawMessage) int {
	n := 0
	for k := range fields {
		if strings.EqualFold(k, "token") {
			n++
		}
	}
	return n
}

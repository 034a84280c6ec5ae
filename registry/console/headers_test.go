package console_test

import (
	"net/http"
	"net/url"
	"testing"
)

// consoleHeaders are the headers every answer under /ui/ carries, as operations.md
// documents them: the console's own script, styles and forms only, never framed, never
// sniffed, never cached, no referrer to another origin, HTTPS only.
var consoleHeaders = map[string]string{
	"Content-Security-Policy":   "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'",
	"X-Frame-Options":           "DENY",
	"X-Content-Type-Options":    "nosniff",
	"Cache-Control":             "no-store",
	"Referrer-Policy":           "same-origin",
	"Strict-Transport-Security": "max-age=31536000",
}

// TestEveryConsoleAnswerCarriesItsHeaders: each kind of answer the console gives, on
// the real serve's listener (a page, the sign-in page, a redirect, a form refused, a
// page that does not exist, a method it does not take, a static asset, one that does not
// exist and a range past an asset's end, the assets' directory, a live stream and one
// refused, a sibling origin's load refused, and /ui without its slash), carries every
// one of the console's security headers, exactly. Before, /ui was sent on by the API's
// router without any of them, an asset that does not exist, or a range past its end,
// lost Cache-Control, and /ui/assets/ answered 200 with a listing of the embedded
// assets, where a directory is not there (404).
func TestEveryConsoleAnswerCarriesItsHeaders(t *testing.T) {
	reg, acme, acmeNode, _ := twoTenants(t)
	in, out := newClient(t, reg), newClient(t, reg)
	in.signIn(acme)
	sibling := siblingLoads["an image"]
	cases := map[string]struct {
		b            *client
		method, path string
		header       map[string]string
		status       int
	}{
		"a page":                          {in, http.MethodGet, "/ui/nodes/" + acmeNode.ID, nil, http.StatusOK},
		"a page the API refuses":          {in, http.MethodGet, "/ui/sites", nil, http.StatusForbidden},
		"the sign-in page":                {out, http.MethodGet, "/ui/signin", nil, http.StatusOK},
		"a page signed out":               {out, http.MethodGet, "/ui/nodes", nil, http.StatusSeeOther},
		"the console's root":              {in, http.MethodGet, "/ui/", nil, http.StatusSeeOther},
		"/ui without its slash":           {in, http.MethodGet, "/ui", nil, http.StatusTemporaryRedirect},
		"a form refused":                  {in, http.MethodPost, "/ui/signout", map[string]string{"Origin": reg.URL}, http.StatusForbidden},
		"a sign-in refused":               {out, http.MethodPost, "/ui/signin", map[string]string{"Origin": reg.URL}, http.StatusForbidden},
		"a page that does not exist":      {in, http.MethodGet, "/ui/nope", nil, http.StatusNotFound},
		"a method a page does not take":   {in, http.MethodDelete, "/ui/nodes", nil, http.StatusNotFound},
		"a static asset":                  {out, http.MethodGet, "/ui/assets/console.css", nil, http.StatusOK},
		"an asset that does not exist":    {out, http.MethodGet, "/ui/assets/nope.css", nil, http.StatusNotFound},
		"a range past an asset's end":     {out, http.MethodGet, "/ui/assets/console.css", map[string]string{"Range": "bytes=1000000-"}, http.StatusRequestedRangeNotSatisfiable},
		"the assets' directory":           {out, http.MethodGet, "/ui/assets/", nil, http.StatusNotFound},
		"a live stream":                   {in, http.MethodGet, "/ui/nodes/" + acmeNode.ID + "/live", nil, http.StatusOK},
		"a live stream refused":           {in, http.MethodGet, "/ui/nodes/" + acmeNode.ID + "/live", sibling, http.StatusForbidden},
		"a sibling origin's load refused": {in, http.MethodGet, "/ui/nodes", sibling, http.StatusForbidden},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			var form url.Values
			if tc.method == http.MethodPost {
				form = url.Values{}
			}
			p := tc.b.do(tc.method, tc.path, form, tc.header)
			if p.status != tc.status {
				t.Errorf("status %d, want %d\n%s", p.status, tc.status, p.body)
			}
			for k, want := range consoleHeaders {
				if got := p.header.Values(k); len(got) != 1 || got[0] != want {
					t.Errorf("%s: %q, want %q", k, got, want)
				}
			}
		})
	}
}

package fetch

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"

	"golang.org/x/net/http/httpguts"
)

// maxTokenResponse bounds what is read of a token endpoint's answer.
const maxTokenResponse = 1 << 20

// token runs the distribution spec's anonymous token flow for a 401's challenges: GET the
// Bearer challenge's realm (which must be https) with its service and scope (or
// `repository:REPO:pull` when the challenge names none), and take `token` or
// `access_token` from the JSON answer. No credentials are sent: registries that need
// them are out of scope, their blobs can be given as presigned https:// sources.
func (c *Client) token(ctx context.Context, challenges []Challenge, repo string) (string, error) {
	var bearer *Challenge
	for i := range challenges {
		if challenges[i].Scheme == "bearer" {
			bearer = &challenges[i]
			break
		}
	}
	if bearer == nil {
		return "", fmt.Errorf("registry answered 401 without a Bearer challenge: only anonymous token auth is supported")
	}
	realm, err := url.Parse(bearer.Params["realm"])
	if err != nil || realm.Scheme != "https" || realm.Host == "" {
		return "", fmt.Errorf("registry's token realm %q is not an https URL", bearer.Params["realm"])
	}
	q := realm.Query()
	if s := bearer.Params["service"]; s != "" {
		q.Set("service", s)
	}
	scope := bearer.Params["scope"]
	if scope == "" {
		scope = "repository:" + repo + ":pull"
	}
	q.Set("scope", scope)
	realm.RawQuery = q.Encode()
	if err := c.check(realm, HopRealm); err != nil {
		return "", err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, realm.String(), nil)
	if err != nil {
		return "", err
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return "", fmt.Errorf("token request: %w", refusal(err))
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("token request: %w", &StatusError{URL: redact(realm), Status: resp.StatusCode})
	}
	return bearerToken(resp.Body, realm.Host)
}

// bearerToken reads a token realm's JSON answer (at most maxTokenResponse bytes of it):
// its `token`, or `access_token` when that is empty. host names the realm in errors. A
// token that cannot be sent in an Authorization header (a control character other than
// a space or a tab, which Go's client refuses to send) is refused here, naming the realm,
// rather than failing the request that would carry it with an error that names neither.
func bearerToken(body io.Reader, host string) (string, error) {
	var t struct {
		Token       string `json:"token"`
		AccessToken string `json:"access_token"`
	}
	if err := json.NewDecoder(io.LimitReader(body, maxTokenResponse)).Decode(&t); err != nil {
		return "", fmt.Errorf("token response from %s is not JSON: %v", host, err)
	}
	if t.Token == "" {
		t.Token = t.AccessToken
	}
	if t.Token == "" {
		return "", fmt.Errorf("token response from %s holds no token", host)
	}
	if !httpguts.ValidHeaderFieldValue(t.Token) {
		return "", fmt.Errorf("token response from %s holds a token that cannot be sent in an Authorization header", host)
	}
	return t.Token, nil
}

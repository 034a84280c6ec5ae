package fetch

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
)

// Client downloads artifacts. Its zero value is not usable: make one with NewClient.
type Client struct {
	http *http.Client
	// bound, when set, is where the client may fetch from (NewBoundClient).
	bound *Bound

	mu     sync.Mutex
	tokens map[string]string // bearer tokens by registry host and repository
}

// NewClient returns a client over hc, whose transport carries the TLS trust (the site's
// CA pool). hc follows redirects, which OCI registries use to send blobs from storage.
// A nil hc is a client with no proxy, no overall timeout and no transparent
// decompression.
func NewClient(hc *http.Client) *Client {
	if hc == nil {
		hc = &http.Client{Transport: &http.Transport{Proxy: nil, DisableCompression: true}}
	}
	return &Client{http: hc, tokens: map[string]string{}}
}

// CloseIdleConnections closes the connections the client keeps for its next requests.
// One that ends its work with it calls this, else each stays open until the server closes
// it.
func (c *Client) CloseIdleConnections() { c.http.CloseIdleConnections() }

// Body is an artifact's bytes from some offset on.
type Body struct {
	io.ReadCloser
	// Offset is where in the artifact the first byte of the body belongs: the offset asked
	// for when the server honoured the range, 0 when it sent the whole artifact.
	Offset int64
	// Total is the artifact's size as the server gave it, or -1.
	Total int64
	// Validator is the response's ETag, else its Last-Modified: what to send in If-Range
	// when resuming. Empty when the server gave neither.
	Validator string
}

// StatusError is an answer with an HTTP status that is not a success.
type StatusError struct {
	// URL is what was asked for, its query left out (it may hold a presigned secret).
	URL string
	// Status is the HTTP status code.
	Status int
}

func (e *StatusError) Error() string {
	return fmt.Sprintf("GET %s: unexpected HTTP status %d %s", e.URL, e.Status, http.StatusText(e.Status))
}

// Open starts reading src from offset. With offset > 0 it asks for `Range: bytes=offset-`
// and, when validator is not empty, `If-Range: validator`, so a changed artifact is sent
// whole. A 206 is accepted only when its Content-Range starts at offset; a 200 (the
// server ignored the range, or the validator did not match) is returned with Offset 0,
// and so is a retry without a range when the 206 or a 416 does not fit.
func (c *Client) Open(ctx context.Context, src Source, offset int64, validator string) (*Body, error) {
	resp, err := c.get(ctx, src, offset, validator)
	if err != nil {
		return nil, err
	}
	switch resp.StatusCode {
	case http.StatusOK:
		return body(resp, 0, resp.ContentLength), nil
	case http.StatusPartialContent:
		start, total, ok := parseContentRange(resp.Header.Get("Content-Range"))
		if ok && offset > 0 && start == offset {
			return body(resp, start, total), nil
		}
	case http.StatusRequestedRangeNotSatisfiable:
		// The partial copy may already hold every byte: `bytes */TOTAL` with TOTAL == offset.
		if total, ok := parseUnsatisfied(resp.Header.Get("Content-Range")); ok && offset > 0 && total == offset {
			resp.Body.Close()
			return &Body{ReadCloser: http.NoBody, Offset: offset, Total: total, Validator: validator}, nil
		}
	default:
		resp.Body.Close()
		return nil, &StatusError{URL: redact(src.URL), Status: resp.StatusCode}
	}
	resp.Body.Close()
	if offset == 0 {
		return nil, fmt.Errorf("GET %s: %s to a request without a range", redact(src.URL), resp.Status)
	}
	return c.Open(ctx, src, 0, "")
}

func body(resp *http.Response, offset, total int64) *Body {
	v := resp.Header.Get("ETag")
	if v == "" || strings.HasPrefix(v, "W/") {
		// A weak ETag may not be used in If-Range; Last-Modified may.
		v = resp.Header.Get("Last-Modified")
	}
	return &Body{ReadCloser: resp.Body, Offset: offset, Total: total, Validator: v}
}

// get sends the GET, answering one bearer-token challenge for OCI sources.
func (c *Client) get(ctx context.Context, src Source, offset int64, validator string) (*http.Response, error) {
	if err := c.check(src.URL, HopSource); err != nil {
		return nil, fmt.Errorf("GET %s: %w", redact(src.URL), err)
	}
	key := src.URL.Host + "/" + src.Repository
	for attempt := 0; ; attempt++ {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, src.URL.String(), nil)
		if err != nil {
			return nil, err
		}
		// The bytes as stored: an encoding undone on the way would move every offset.
		req.Header.Set("Accept-Encoding", "identity")
		if offset > 0 {
			req.Header.Set("Range", "bytes="+strconv.FormatInt(offset, 10)+"-")
			if validator != "" {
				req.Header.Set("If-Range", validator)
			}
		}
		if src.Kind == OCI {
			c.mu.Lock()
			tok := c.tokens[key]
			c.mu.Unlock()
			if tok != "" {
				req.Header.Set("Authorization", "Bearer "+tok)
			}
		}
		resp, err := c.http.Do(req)
		if err != nil {
			return nil, fmt.Errorf("GET %s: %w", redact(src.URL), refusal(err))
		}
		if resp.StatusCode != http.StatusUnauthorized || src.Kind != OCI || attempt > 0 {
			return resp, nil
		}
		challenges := ParseChallenges(strings.Join(resp.Header.Values("WWW-Authenticate"), ", "))
		resp.Body.Close()
		tok, err := c.token(ctx, challenges, src.Repository)
		if err != nil {
			return nil, fmt.Errorf("GET %s: %w", redact(src.URL), err)
		}
		c.mu.Lock()
		c.tokens[key] = tok
		c.mu.Unlock()
	}
}

// check refuses a request to u the client's bound does not allow; a client without a
// bound allows every request.
func (c *Client) check(u *url.URL, hop string) error {
	if c.bound == nil {
		return nil
	}
	return c.bound.check(u, hop)
}

// redact names a URL in errors and logs without its query and user information, either
// of which may hold a credential (a presigned URL's signature, a cache capability).
func redact(u *url.URL) string {
	c := *u
	c.User = nil
	if c.RawQuery != "" {
		c.RawQuery = "..."
	}
	return c.String()
}

// Redact is s, a URL, as errors and logs name it (redact); one that does not parse is
// not named at all.
func Redact(s string) string {
	u, err := url.Parse(s)
	if err != nil {
		return "a URL that does not parse"
	}
	return redact(u)
}

// parseContentRange reads `bytes FIRST-LAST/TOTAL` (TOTAL may be `*`, given as -1).
func parseContentRange(h string) (first, total int64, ok bool) {
	rest, ok := strings.CutPrefix(h, "bytes ")
	if !ok {
		return 0, 0, false
	}
	span, tot, ok := strings.Cut(rest, "/")
	if !ok {
		return 0, 0, false
	}
	a, b, ok := strings.Cut(span, "-")
	if !ok {
		return 0, 0, false
	}
	first, ok1 := byteCount(a)
	last, ok2 := byteCount(b)
	if !ok1 || !ok2 || last < first {
		return 0, 0, false
	}
	if tot == "*" {
		return first, -1, true
	}
	total, ok = byteCount(tot)
	if !ok || total <= last {
		return 0, 0, false
	}
	return first, total, true
}

// parseUnsatisfied reads a 416's `bytes */TOTAL`.
func parseUnsatisfied(h string) (int64, bool) {
	tot, ok := strings.CutPrefix(h, "bytes */")
	if !ok {
		return 0, false
	}
	return byteCount(tot)
}

// byteCount reads a Content-Range number: decimal digits only (strconv alone would take
// a sign too), within int64.
func byteCount(s string) (int64, bool) {
	if s == "" || strings.Trim(s, "0123456789") != "" {
		return 0, false
	}
	n, err := strconv.ParseInt(s, 10, 64)
	return n, err == nil
}

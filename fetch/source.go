// Package fetch gets an image artifact's bytes over HTTP, for the site cache and for the
// ramdisk's deploy.image: it parses sources (an https:// URL, or an OCI registry blob
// named by an oci:// reference), answers a registry's anonymous bearer-token challenge,
// resumes an interrupted download with Range guarded by If-Range (Client.Open, one
// request), and reads an artifact as one stream that survives broken and stalled
// connections (Client.Stream).
package fetch

import (
	"fmt"
	"net/url"
	"regexp"
	"strings"

	"github.com/better-compute/better-compute/proto"
)

// Kind says how a source is reached.
type Kind int

// The source kinds.
const (
	// HTTPS is a plain https:// URL.
	HTTPS Kind = iota + 1
	// OCI is a blob of an OCI distribution registry, reached over HTTPS.
	OCI
	// HTTP is a plain http:// URL: never a catalog source, but a site cache's address
	// may be one (see Location).
	HTTP
)

// MaxSourceLen is the longest source accepted, as in the image catalog.
const MaxSourceLen = 2048

// Source is a parsed image source.
type Source struct {
	Kind Kind
	// URL is the https URL to GET: the source itself, or the registry's blob URL.
	URL *url.URL
	// Repository and Digest are set for OCI sources: the repository path and the blob's
	// 64 lower-case hex SHA-256.
	Repository string
	Digest     string
}

var (
	ociRepoRe = regexp.MustCompile(`^[a-z0-9]+((\.|_|__|-+)[a-z0-9]+)*(/[a-z0-9]+((\.|_|__|-+)[a-z0-9]+)*)*$`)
	ociHostRe = regexp.MustCompile(`^[a-z0-9]([a-z0-9.-]*[a-z0-9])?$`)
)

// Parse checks a source and says how to reach it: `https://HOST[:PORT]/PATH[?QUERY]` or
// `oci://REGISTRY[:PORT]/REPOSITORY@sha256:DIGEST`.
func Parse(s string) (Source, error) {
	if len(s) > MaxSourceLen {
		return Source{}, fmt.Errorf("source is %d characters, at most %d are allowed", len(s), MaxSourceLen)
	}
	for i := 0; i < len(s); i++ {
		if s[i] <= ' ' || s[i] >= 0x7f {
			return Source{}, fmt.Errorf("source has a space, control or non-ASCII character at byte %d: percent-encode it", i)
		}
	}
	switch {
	case strings.HasPrefix(s, "https://"):
		return parseHTTPS(s)
	case strings.HasPrefix(s, "oci://"):
		return parseOCI(strings.TrimPrefix(s, "oci://"))
	}
	return Source{}, fmt.Errorf("source %q is neither https:// nor oci://", s)
}

// Location reads a place to stream an artifact from: an oci:// or https:// source as
// Parse reads it, or any http:// or https:// URL with a host, such as the address of the
// site cache's copy.
func Location(s string) (Source, error) {
	if strings.HasPrefix(s, "oci://") {
		return Parse(s)
	}
	u, err := url.Parse(s)
	if err != nil {
		return Source{}, fmt.Errorf("location is not a URL: %v", err)
	}
	if u.Host == "" {
		return Source{}, fmt.Errorf("location %q has no host", s)
	}
	switch u.Scheme {
	case "https":
		return Source{Kind: HTTPS, URL: u}, nil
	case "http":
		return Source{Kind: HTTP, URL: u}, nil
	}
	return Source{}, fmt.Errorf("location %q is neither http://, https:// nor oci://", s)
}

func parseHTTPS(s string) (Source, error) {
	u, err := url.Parse(s)
	if err != nil {
		return Source{}, fmt.Errorf("source is not a URL: %v", err)
	}
	switch {
	case u.User != nil:
		return Source{}, fmt.Errorf("source carries user information: use a presigned URL instead")
	case u.Fragment != "" || strings.Contains(s, "#"):
		return Source{}, fmt.Errorf("source has a fragment")
	case u.Hostname() == "":
		return Source{}, fmt.Errorf("source has no host")
	case u.Path == "" || u.Path == "/":
		return Source{}, fmt.Errorf("source has no path")
	}
	if err := checkPort(u.Port(), strings.HasSuffix(u.Host, ":")); err != nil {
		return Source{}, err
	}
	return Source{Kind: HTTPS, URL: u}, nil
}

func parseOCI(rest string) (Source, error) {
	hostport, path, ok := strings.Cut(rest, "/")
	if !ok {
		return Source{}, fmt.Errorf("oci source has no repository: want oci://REGISTRY/REPOSITORY@sha256:DIGEST")
	}
	repo, digest, ok := strings.Cut(path, "@")
	if !ok {
		return Source{}, fmt.Errorf("oci source is not pinned by digest: want REPOSITORY@sha256:DIGEST (tags move)")
	}
	host, port, hasPort := strings.Cut(hostport, ":")
	if !ociHostRe.MatchString(host) {
		return Source{}, fmt.Errorf("oci registry host %q is not a lower-case host name", host)
	}
	if hasPort {
		if err := checkPort(port, true); err != nil {
			return Source{}, err
		}
	}
	if !ociRepoRe.MatchString(repo) {
		return Source{}, fmt.Errorf("oci repository %q does not follow the distribution grammar", repo)
	}
	hex, ok := strings.CutPrefix(digest, "sha256:")
	if !ok || !proto.IsDigest(hex) {
		return Source{}, fmt.Errorf("oci digest %q is not sha256: and 64 lower-case hex digits", digest)
	}
	u := &url.URL{Scheme: "https", Host: hostport, Path: "/v2/" + repo + "/blobs/sha256:" + hex}
	return Source{Kind: OCI, URL: u, Repository: repo, Digest: hex}, nil
}

func checkPort(port string, present bool) error {
	if !present && port == "" {
		return nil
	}
	if !proto.IsPort(port) {
		return fmt.Errorf("source port %q is not 1 to 65535", port)
	}
	return nil
}

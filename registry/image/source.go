package image

import (
	"fmt"
	"net/url"
	"regexp"
	"strings"

	"github.com/better-compute/better-compute/proto"
)

// maxSource bounds a source URL.
const maxSource = 2048

// Source is where site caches and ramdisks pull an image from.
type Source struct {
	// Scheme is "https" or "oci".
	Scheme string
	// Host is the server, with its port when one is given.
	Host string
	// Path is the https path (with its query), or the OCI repository.
	Path string
	// Digest is the blob digest of an oci:// source, 64 lower-case hex digits.
	Digest string
}

// ociSource is oci://HOST[:PORT]/REPOSITORY@sha256:DIGEST, with the repository grammar
// of the OCI distribution specification and a lower-case host name.
var ociSource = regexp.MustCompile(`^oci://([a-z0-9](?:[a-z0-9.-]*[a-z0-9])?(?::[0-9]{1,5})?)/` +
	`([a-z0-9]+(?:(?:\.|_|__|-+)[a-z0-9]+)*(?:/[a-z0-9]+(?:(?:\.|_|__|-+)[a-z0-9]+)*)*)` +
	`@sha256:([0-9a-f]{64})$`)

// uriChars are the characters RFC 3986 allows in a URI; anything else (spaces, control
// characters, quotes, non-ASCII) must be percent-encoded.
const uriChars = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~:/?#[]@!$&'()*+,;=%"

// ParseSource reads an image source: https://HOST[:PORT]/PATH[?QUERY] without user
// information or fragment, or oci://HOST[:PORT]/REPOSITORY@sha256:DIGEST naming the
// artifact's blob. Anything else is INVALID_INPUT at the path "source".
func ParseSource(s string) (Source, error) {
	bad := func(format string, args ...any) (Source, error) {
		return Source{}, proto.Errorf(proto.InvalidInput, "source: "+format, args...).WithPath("source")
	}
	if len(s) > maxSource {
		return bad("at most %d characters", maxSource)
	}
	for i := 0; i < len(s); i++ {
		if !strings.ContainsRune(uriChars, rune(s[i])) {
			return bad("character %q at %d is not allowed in a URL: percent-encode it", s[i], i)
		}
	}
	if rest, ok := strings.CutPrefix(s, "oci://"); ok {
		m := ociSource.FindStringSubmatch(s)
		if m == nil {
			return bad("%q: write oci://registry[:port]/repository@sha256:<64 lower-case hex digits> (lower-case, pinned by digest)", rest)
		}
		if err := checkPort(m[1]); err != nil {
			return bad("%v", err)
		}
		return Source{Scheme: "oci", Host: m[1], Path: m[2], Digest: m[3]}, nil
	}
	if !strings.HasPrefix(s, "https://") {
		return bad("use an https:// or oci:// URL")
	}
	u, err := url.Parse(s)
	if err != nil {
		return bad("%v", err)
	}
	switch {
	case u.Host == "" || u.Hostname() == "":
		return bad("the URL names no host")
	case u.User != nil:
		return bad("credentials do not belong in the catalog: use a presigned URL or a registry the site can reach")
	case strings.Contains(s, "#"):
		return bad("a fragment means nothing to a download: leave it out")
	case u.Path == "" || u.Path == "/":
		return bad("the URL names no artifact: add its path")
	}
	if err := checkPort(u.Host); err != nil {
		return bad("%v", err)
	}
	path := u.EscapedPath()
	if u.RawQuery != "" {
		path += "?" + u.RawQuery
	}
	return Source{Scheme: "https", Host: u.Host, Path: path}, nil
}

// checkPort refuses in host[:port] a port that is not 1 to 65535 written without leading
// zero (proto.IsPort), as the fetch of the source refuses it.
func checkPort(host string) error {
	i := strings.LastIndexByte(host, ':')
	if i < 0 || strings.HasSuffix(host, "]") {
		return nil
	}
	if port := host[i+1:]; !proto.IsPort(port) {
		return fmt.Errorf("port %q: use 1 to 65535, without leading zero", port)
	}
	return nil
}

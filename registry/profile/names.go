package profile

import (
	"fmt"
	"net/url"
	"regexp"
	"strings"

	"github.com/better-compute/better-compute/proto"
)

// profileID is the shape of a profile's id: lower-case letters, digits, dots,
// underscores and hyphens. The other names a profile holds have proto's shapes.
var profileID = regexp.MustCompile(`^[a-z0-9._-]{1,128}$`)

// checkImageRef accepts name@version, or TENANT/name@version for another tenant's image,
// in the catalog's shape (proto.ParseImageRef).
func checkImageRef(ref string) error {
	_, bare, err := proto.SplitOwner(ref)
	if err != nil {
		return fmt.Errorf("%q: %s", ref, proto.AsError(err).Message)
	}
	if _, err := proto.ParseImageRef(bare); err != nil {
		return fmt.Errorf("%s is not an image reference name@version (or TENANT/name@version): a name of 1 to 128 and a version of 1 to 64 of a-z, 0-9, ., _ and -, each starting with a letter or digit", proto.Quote(ref))
	}
	return nil
}

// maxURLLen is the longest URL a step takes.
const maxURLLen = 2048

// CheckHTTPSURL accepts an https URL with a host, without user info or spaces, of at
// most 2048 bytes: a step's url in a profile, and the url an earlier step returned that
// media.insert's fromStep names (registry/site), which is checked only when the workflow
// runs, since a tenant's machine may answer it.
func CheckHTTPSURL(s string) error {
	if len(s) > maxURLLen {
		return fmt.Errorf("the URL is longer than %d bytes", maxURLLen)
	}
	u, err := url.Parse(s)
	switch {
	case err != nil || u.Scheme != "https" || u.Hostname() == "" || u.Opaque != "" || strings.ContainsFunc(s, isSpaceOrControl):
		return fmt.Errorf("%s is not an https URL", proto.Quote(s))
	case u.User != nil:
		return fmt.Errorf("the URL may not carry user info")
	}
	return nil
}

func isSpaceOrControl(r rune) bool { return r <= ' ' || r == 0x7f }

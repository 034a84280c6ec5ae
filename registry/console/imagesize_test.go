package console_test

import (
	"net/http"
	"regexp"
	"testing"

	"github.com/better-compute/better-compute/testkit"
)

// TestImagesPageShowsAnUnknownSize: an image registered without a size shows "unknown"
// in the images page's size column, a sized one its size.
func TestImagesPageShowsAnUnknownSize(t *testing.T) {
	reg := testkit.StartRegistry(t, "")
	for ref, size := range map[string][]string{"nosize@1": nil, "sized@1": {"--size", "1048576"}} {
		testkit.JSON(t, reg.AdminConfig, nil, append([]string{"images", "register", "--ref", ref, "--source", "https://images.example.com/x.raw",
			"--disk-format", "raw", "--sha256", "1b4f0e9851971998e732078544c96b36c3d01cedf7caa332359d6f1d83567014"}, size...)...)
	}
	b := newClient(t, reg)
	b.signIn(reg.AdminConfig)
	p := b.get("/ui/images")
	if p.status != http.StatusOK {
		t.Fatalf("images page: %d\n%s", p.status, p.body)
	}
	for ref, size := range map[string]string{"nosize@1": "unknown", "sized@1": "1.0 MiB"} {
		if !regexp.MustCompile(`<tr><td>` + regexp.QuoteMeta(ref) + `</td>(<td>[^<]*</td>){3}<td>` + regexp.QuoteMeta(size) + `</td>`).MatchString(p.body) {
			t.Errorf("the images page does not show %s's size as %q:\n%s", ref, size, p.body)
		}
	}
}

// Package browser runs a headless Chromium (Debian's chromium package) for the
// console's tests, driven through the DevTools protocol with chromedp: it trusts the
// registry's serving certificate by its key alone, signs in, and writes screenshots.
package browser

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"encoding/base64"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// Timeout bounds one test's browsing: a test failing finds it out, never a pass.
const Timeout = 3 * time.Minute

// Binary is the Chromium the tests run, as Debian's chromium package installs it.
const Binary = "chromium"

// Start starts a headless Chromium for the console of the registry at registryURL and
// returns the context its actions run in; it ends with the test. Without Chromium the
// test skips, except in CI (CI=true), where it fails: .ci/deps.sh installs it.
func Start(t testing.TB, registryURL string) context.Context {
	t.Helper()
	bin, err := exec.LookPath(Binary)
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("chromium is not installed, and CI runs the console's browser tests: run .ci/deps.sh (apt-get install chromium)")
		}
		t.Skipf("chromium is not installed: `apt-get install chromium` (or .ci/deps.sh) runs the console's browser tests")
	}
	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(bin), chromedp.WindowSize(1280, 900),
		chromedp.UserDataDir(t.TempDir()),
		// The registry's serving certificate is issued by its own CA: Chromium accepts
		// the certificate of this key, and no other, without knowing the CA.
		chromedp.Flag("ignore-certificate-errors-spki-list", spkiHash(t, registryURL)),
		chromedp.Flag("lang", "en-US"))
	if os.Geteuid() == 0 {
		// Chromium refuses to run as root with its sandbox on. The sandbox protects the
		// host from pages the browser renders; here it renders only the registry under
		// test on loopback, in a throwaway profile, so the test runs without it.
		opts = append(opts, chromedp.NoSandbox)
	}
	alloc, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancelCtx := chromedp.NewContext(alloc)
	ctx, cancelTimeout := context.WithTimeout(ctx, Timeout)
	t.Cleanup(func() { cancelTimeout(); cancelCtx(); cancelAlloc() })
	if err := chromedp.Do(ctx); err != nil {
		t.Fatalf("start chromium: %v", err)
	}
	return ctx
}

// spkiHash is the base64 SHA-256 of the public key of the certificate the server at
// rawURL presents.
func spkiHash(t testing.TB, rawURL string) string {
	t.Helper()
	u, err := url.Parse(rawURL)
	if err != nil {
		t.Fatal(err)
	}
	conn, err := tls.Dial("tcp", u.Host, &tls.Config{InsecureSkipVerify: true})
	if err != nil {
		t.Fatalf("read the registry's certificate: %v", err)
	}
	defer conn.Close()
	sum := sha256.Sum256(conn.ConnectionState().PeerCertificates[0].RawSubjectPublicKeyInfo)
	return base64.StdEncoding.EncodeToString(sum[:])
}

// SignIn signs in to the console at registryURL with credential, as an operator would:
// the sign-in page, the secret typed, the button pressed, until the console shows the
// tenant.
func SignIn(ctx context.Context, registryURL, credential string) error {
	return chromedp.Do(ctx,
		chromedp.Navigate(registryURL+"/ui/signin"),
		chromedp.WaitVisible(chromedp.ID("credential")),
		chromedp.SendKeys(chromedp.ID("credential"), credential),
		chromedp.Click(chromedp.ID("signin")),
		chromedp.WaitVisible(chromedp.ID("tenant")))
}

// Screenshot writes the page as it shows now to DIR/name.png when BC_SCREENSHOTS names a
// directory (`make screenshots`), and does nothing otherwise.
func Screenshot(t testing.TB, ctx context.Context, name string) {
	t.Helper()
	dir := os.Getenv("BC_SCREENSHOTS")
	if dir == "" {
		return
	}
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatalf("screenshot %s: %v", name, err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if !strings.HasSuffix(name, ".png") {
		name += ".png"
	}
	if err := os.WriteFile(filepath.Join(dir, name), png, 0o644); err != nil {
		t.Fatal(err)
	}
}

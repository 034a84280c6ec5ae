package testkit

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/pem"
	"fmt"
	"io/fs"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// Digest is the hex SHA-256 of b, as images are registered with.
func Digest(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// WriteFile writes data to path with perm, failing the test when it cannot.
func WriteFile(t testing.TB, path string, data []byte, perm os.FileMode) {
	t.Helper()
	if err := os.WriteFile(path, data, perm); err != nil {
		t.Fatal(err)
	}
}

// ServeTLS serves h over HTTPS on 127.0.0.1 until the test ends, and writes the
// server's certificate (PEM) to certFile, for clients that must trust it.
func ServeTLS(t testing.TB, h http.Handler, certFile string) *httptest.Server {
	t.Helper()
	srv := httptest.NewUnstartedServer(h)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv.Listener = ln
	srv.StartTLS()
	t.Cleanup(srv.Close)
	WriteFile(t, certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw}), 0o644)
	return srv
}

// FreePort returns a port of 127.0.0.1 that is free at the moment on network ("tcp" or
// "udp").
func FreePort(t testing.TB, network string) int {
	t.Helper()
	if network == "udp" {
		c, err := net.ListenPacket("udp4", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		return c.LocalAddr().(*net.UDPAddr).Port
	}
	l, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// WaitFor polls cond every interval until it holds, failing the test when it still does
// not after d.
func WaitFor(t testing.TB, what string, d, interval time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", d, what)
		}
		time.Sleep(interval)
	}
}

// Signer signs an image's signing input (testkit/openssl's Key is one).
type Signer interface {
	Sign(t testing.TB, input []byte) []byte
}

// Image is what RegisterImage registers: the flags of `images register`, with the
// signature made by Signer as SignerID when Signer is set.
type Image struct {
	Tenant, Ref, Kind, Source, Format, Compression, SHA256 string
	Size                                                   int64
	SignerID                                               string
	Signer                                                 Signer
}

// SigningInput is the text an image's signature covers, written out as the image spec
// gives it (and not by the registry's code, which the tests check against it).
func (img Image) SigningInput() []byte {
	return fmt.Appendf(nil, "bc-image-v1\n%s\n%s\n%s\n%s\n%s\n", img.Kind, img.Ref, img.Format, img.Compression, img.SHA256)
}

// RegisterImage registers img through the CLI as the holder of config and decodes the
// answer into v (when not nil), failing the test when the CLI fails.
func RegisterImage(t testing.TB, config string, img Image, v any) {
	t.Helper()
	args := []string{"images", "register", "--tenant", img.Tenant, "--ref", img.Ref, "--kind", img.Kind, "--source", img.Source,
		"--disk-format", img.Format, "--compression", img.Compression, "--sha256", img.SHA256, "--size", fmt.Sprint(img.Size)}
	if img.Signer != nil {
		args = append(args, "--signer", img.SignerID, "--signature", base64.StdEncoding.EncodeToString(img.Signer.Sign(t, img.SigningInput())))
	}
	JSON(t, config, v, args...)
}

// StartBCD runs bcd with args, env added to its environment, until stop is called:
// stop interrupts it, waits for it to end and, when the test failed, logs what it wrote.
// bcd is killed when the test process dies.
func StartBCD(t testing.TB, env []string, args ...string) (stop func()) {
	t.Helper()
	stop, _ = StartBCDLogged(t, env, args...)
	return stop
}

// StartBCDLogged is StartBCD, with out returning what bcd has written so far.
func StartBCDLogged(t testing.TB, env []string, args ...string) (stop func(), out func() string) {
	t.Helper()
	cmd := exec.Command(Binary(t, "bcd"), args...)
	cmd.Env = append(os.Environ(), env...)
	var written SyncBuffer
	cmd.Stdout, cmd.Stderr = &written, &written
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	return func() {
		cmd.Process.Signal(os.Interrupt)
		cmd.Wait()
		if t.Failed() {
			t.Logf("bcd %s:\n%s", args[0], written.String())
		}
	}, written.String
}

// SparseFile makes path a sparse file of size bytes, a disk for a VM or a machine.
func SparseFile(t testing.TB, path string, size int64) {
	t.Helper()
	f, err := os.Create(path)
	if err == nil {
		err = f.Truncate(size)
		f.Close()
	}
	if err != nil {
		t.Fatal(err)
	}
}

// Tree is what dir holds, for a test that a step wrote nothing: each file's and
// directory's path under dir, its mode and, for a file, its content's Digest.
func Tree(t testing.TB, dir string) map[string]string {
	t.Helper()
	tree := map[string]string{}
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, path)
		tree[rel] = info.Mode().String()
		if info.Mode().IsRegular() {
			data, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			tree[rel] += " " + Digest(data)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return tree
}

// CopyDir copies the files of the directory from into a new directory to (0700), each
// 0600: a backup of a data directory's pki/, say.
func CopyDir(t testing.TB, from, to string) {
	t.Helper()
	entries, err := os.ReadDir(from)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(to, 0o700); err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		CopyFile(t, filepath.Join(from, e.Name()), filepath.Join(to, e.Name()))
	}
}

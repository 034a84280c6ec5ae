// Package tftp serves the iPXE binaries over TFTP: read-only, from one directory, with
// blksize and tsize negotiation. Nothing outside the directory can be read: names are
// checked word by word, and files are opened through an os.Root, so a symbolic link that
// points out of the directory fails too.
package tftp

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strings"
)

// ErrRefused is the class of every name the server will not serve.
var ErrRefused = errors.New("tftp: name refused")

// maxName is the longest file name the server looks at.
const maxName = 255

// Resolve turns a requested file name into a path relative to the root, or fails with
// ErrRefused. A leading slash is dropped (firmware often asks for "/undionly.kpxe"); an
// empty name, a NUL or backslash, and any ".." or "." element are refused.
func Resolve(name string) (string, error) {
	n := strings.TrimLeft(name, "/")
	switch {
	case n == "":
		return "", fmt.Errorf("%w: empty name", ErrRefused)
	case len(name) > maxName:
		return "", fmt.Errorf("%w: name longer than %d bytes", ErrRefused, maxName)
	case strings.ContainsAny(n, "\x00\\"):
		return "", fmt.Errorf("%w: %q holds a NUL or a backslash", ErrRefused, name)
	}
	for _, elem := range strings.Split(n, "/") {
		if elem == "" || elem == "." || elem == ".." {
			return "", fmt.Errorf("%w: %q is not a plain path below the root", ErrRefused, name)
		}
	}
	if !fs.ValidPath(n) {
		return "", fmt.Errorf("%w: %q is not a valid path", ErrRefused, name)
	}
	return n, nil
}

// Open opens the regular file a requested name resolves to under root. The root refuses
// any path, symbolic links included, that would leave it.
func Open(root *os.Root, name string) (*os.File, error) {
	rel, err := Resolve(name)
	if err != nil {
		return nil, err
	}
	f, err := root.Open(rel)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, err
		}
		return nil, fmt.Errorf("%w: %v", ErrRefused, err)
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, err
	}
	if !st.Mode().IsRegular() {
		f.Close()
		return nil, fmt.Errorf("%w: %q is not a regular file", ErrRefused, name)
	}
	return f, nil
}

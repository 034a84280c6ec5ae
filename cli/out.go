package cli

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	flag "github.com/spf13/pflag"

	"github.com/better-compute/better-compute/fsutil"
	"github.com/better-compute/better-compute/proto"
	"github.com/better-compute/better-compute/registry/api"
)

// output is the file a command writes what it made to (--out): a new file unless
// --force, written whole with mode 0600, and checked before anything is made.
type output struct {
	path  *string
	force *bool
}

// outFlags declares --out, with usage, and --force on fs.
func outFlags(fs *flag.FlagSet, usage string) output {
	return output{
		path:  fs.String("out", "", usage),
		force: fs.Bool("force", false, "replace the --out file when it exists (by default an existing file is refused)"),
	}
}

// check refuses, before anything is made, a file the command could not write: one that
// exists (it may hold another credential, such as admin.conf) unless --force, a
// directory, or a file in a directory that does not exist or cannot be written.
func (o output) check() error { return checkOut(*o.path, *o.force) }

// write writes data to the file: as a new file, or replacing one with --force.
func (o output) write(data []byte) error { return writeOut(*o.path, data, *o.force) }

// checkOut is output.check for a file at path.
func checkOut(path string, force bool) error {
	info, err := os.Lstat(path)
	switch {
	case err == nil && info.IsDir():
		return proto.Errorf(proto.InvalidInput, "%s is a directory: name a file; nothing was made", path).WithPath("--out")
	case err == nil && !force:
		return proto.Errorf(proto.InvalidInput, "%s exists, and it may hold another credential: name a new file, or pass --force to replace it; nothing was made", path).WithPath("--out")
	case err != nil && !errors.Is(err, fs.ErrNotExist):
		return proto.Errorf(proto.InvalidInput, "%s: %v; nothing was made", path, unwrapPath(err)).WithPath("--out")
	}
	dir := filepath.Dir(path)
	if err := fsutil.CanCreateIn(dir); errors.Is(err, fs.ErrNotExist) {
		return proto.Errorf(proto.InvalidInput, "%s: the directory %s does not exist: make it first (mkdir -p %s); nothing was made", path, dir, dir).WithPath("--out")
	} else if err != nil {
		return proto.Errorf(proto.InvalidInput, "%s: cannot write in the directory %s: %v; nothing was made", path, dir, unwrapPath(err)).WithPath("--out")
	}
	return nil
}

// writeOut writes data to path whole, mode 0600: a new file (one that appeared since the
// check is refused), or replacing the file with force.
func writeOut(path string, data []byte, force bool) error {
	write := fsutil.WriteFileNew
	if force {
		write = fsutil.WriteFileAtomic
	}
	if err := write(path, data, 0o600); err != nil {
		return proto.Errorf(proto.InvalidInput, "write %s: %v", path, unwrapPath(err)).WithPath("--out")
	}
	return nil
}

// unwrapPath is the cause of a file error without the path it repeats.
func unwrapPath(err error) error {
	var pe *fs.PathError
	var le *os.LinkError
	switch {
	case errors.As(err, &pe):
		return pe.Err
	case errors.As(err, &le):
		return le.Err
	}
	return err
}

// revokeMinted undoes what a command made on the registry when writing its --out file
// failed (werr): it revokes it (method, req), and says so, or what to do when revoking
// failed too.
func revokeMinted(x *exec, c *api.Client, what, id, method string, req any, werr error) error {
	e := proto.AsError(werr)
	if err := c.Call(x.ctx, method, req, nil); err != nil {
		return proto.Errorf(e.Code, "%s %s was made, but %s, and revoking it failed too (%s): revoke it yourself (better-compute %s %s)",
			what, id, e.Message, proto.AsError(err).Message, strings.Replace(method, ".", " ", 1), id).WithPath(e.Details.Path)
	}
	return proto.Errorf(e.Code, "%s; %s %s was made and is revoked again: nothing is left, run the command again once the file can be written",
		e.Message, what, id).WithPath(e.Details.Path)
}

package fsutil

import (
	"errors"
	"fmt"
	"io"
	"os"
)

// ErrExposed is the error of ReadPrivate for a file its group or others may use.
var ErrExposed = errors.New("readable by others")

// ReadPrivate reads a file that holds a secret (a credential, a private key), refusing it
// when its group or others have any permission on it (mode & 0077), as ssh refuses such a
// key: whoever else can read it may already hold the secret. The mode is read from the
// open file, so the check and the read are of the same file. The refusal wraps
// ErrExposed and says the chmod that fixes it.
func ReadPrivate(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if perm := st.Mode().Perm(); perm&0o077 != 0 {
		return nil, fmt.Errorf("%s is mode %04o, %w: it holds a secret, so only its owner may read it; run `chmod 600 %s`, and replace the secret if someone else may have read it", path, perm, ErrExposed, path)
	}
	return io.ReadAll(f)
}

package cli

import (
	"errors"
	"strconv"

	"github.com/better-compute/better-compute/cmdline"
)

// sizeFlag is a size in bytes, nil until the flag is given. Only its form is checked
// here; its range is the API's to refuse, at the request's field.
type sizeFlag struct{ n *int64 }

func (f *sizeFlag) Set(s string) error {
	n, ok := cmdline.ParseDecimal(s)
	if !ok {
		return errors.New("give the size in bytes as decimal digits alone, like 1048576, or leave the flag out when it is unknown")
	}
	f.n = &n
	return nil
}

func (f *sizeFlag) String() string {
	if f.n == nil {
		return ""
	}
	return strconv.FormatInt(*f.n, 10)
}

// Type names the value in help.
func (f *sizeFlag) Type() string { return "bytes" }

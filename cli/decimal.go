package cli

import (
	"errors"
	"strconv"
)

// decimal reads a whole number written the one way the CLI prints it back: decimal
// digits alone, without a sign, a leading zero, spaces, underscores or a base prefix.
// strconv alone takes "+5" and the flag would hold what the operator did not write.
func decimal(s string) (int64, bool) {
	if s == "" || len(s) > 1 && s[0] == '0' {
		return 0, false
	}
	for _, c := range []byte(s) {
		if c < '0' || c > '9' {
			return 0, false
		}
	}
	n, err := strconv.ParseInt(s, 10, 64)
	return n, err == nil
}

// sizeFlag is a size in bytes, nil until the flag is given. Only its form is checked
// here; its range is the API's to refuse, at the request's field.
type sizeFlag struct{ n *int64 }

func (f *sizeFlag) Set(s string) error {
	n, ok := decimal(s)
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

package cmdline

import (
	"errors"
	"strconv"
	"strings"
)

// ParseDecimal reads a whole number written the one way the command lines print it back:
// decimal digits alone, without a sign, a leading zero, spaces, underscores or a base
// prefix. strconv, and the integer flags of flag and pflag (base 0), take "+5", "1_000",
// "0x10" and "010" (8), and the flag would hold what the operator did not write.
func ParseDecimal(s string) (int64, bool) {
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

// IntFlag is the integer flag of both command lines (a flag.Value and a pflag.Value): it
// holds what the operator wrote in decimal digits, or refuses it at the flag. Declare
// every integer flag with it, through Decimal or SignedDecimal, never with fs.Int and
// its kin, which read other bases.
type IntFlag struct {
	p *int
	// signed: a leading '-' is taken too, for a flag whose range its command checks.
	signed bool
}

// Decimal is an integer flag of decimal digits alone, holding value until given.
func Decimal(p *int, value int) *IntFlag {
	*p = value
	return &IntFlag{p: p}
}

// SignedDecimal is Decimal that takes a leading '-' too: for a flag whose command refuses
// the values out of its range, negative ones included, with its own message.
func SignedDecimal(p *int, value int) *IntFlag {
	*p = value
	return &IntFlag{p: p, signed: true}
}

func (f *IntFlag) Set(s string) error {
	digits, negative := s, false
	if f.signed {
		digits, negative = strings.CutPrefix(s, "-")
	}
	n, ok := ParseDecimal(digits)
	if !ok || negative && n == 0 || int64(int(n)) != n {
		if f.signed {
			return errors.New("give a whole number in decimal digits, like 12 or -1, with no plus sign, leading zero, base prefix, underscore or space")
		}
		return errors.New("give a whole number in decimal digits alone, like 12, with no sign, leading zero, base prefix, underscore or space")
	}
	if negative {
		n = -n
	}
	*f.p = int(n)
	return nil
}

// String is the value in decimal; "0" for the zero IntFlag, which flag may print.
func (f *IntFlag) String() string {
	if f == nil || f.p == nil {
		return "0"
	}
	return strconv.Itoa(*f.p)
}

// Type names the value in help, as pflag's own integer flags do.
func (f *IntFlag) Type() string { return "int" }

package cmdline_test

import (
	"bytes"
	"context"
	"io"
	"math"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/better-compute/better-compute/agent/bcdcli"
	"github.com/better-compute/better-compute/cli"
	"github.com/better-compute/better-compute/cmdline"
)

// notDecimal is what an integer flag must refuse: other bases, a digit separator, a plus
// sign; each is a number strconv's base 0 reads (8, 16, 1000, 5).
var notDecimal = []string{"010", "0x10", "1_000", "+5"}

// TestIntFlagTakesDecimalDigitsAlone: an integer flag holds what the operator wrote, or
// refuses it and keeps its value; a signed one takes a leading '-' too, and nothing else.
func TestIntFlagTakesDecimalDigitsAlone(t *testing.T) {
	maxInt := strconv.Itoa(math.MaxInt)
	never := append([]string{"", "-", "-0", "00", " 5", "5 ", "0o7", "0b1", "1e3", "5.0", "1,000", "٣", "x", maxInt + "0"}, notDecimal...)
	for _, signed := range []bool{false, true} {
		flag := func(p *int) *cmdline.IntFlag {
			if signed {
				return cmdline.SignedDecimal(p, 7)
			}
			return cmdline.Decimal(p, 7)
		}
		taken, refused := []string{"0", "1", "10", "400", maxInt}, never
		if signed {
			taken = append(taken, "-1", "-10", "-"+maxInt)
		} else {
			refused = append(slices.Clip(never), "-1", "-10")
		}
		for _, s := range taken {
			var n int
			f := flag(&n)
			if err := f.Set(s); err != nil || f.String() != s || strconv.Itoa(n) != s {
				t.Errorf("signed %v, %q: holds %d, prints %q, %v", signed, s, n, f.String(), err)
			}
		}
		for _, s := range refused {
			var n int
			if err := flag(&n).Set(s); err == nil || n != 7 || !strings.Contains(err.Error(), "decimal digits") {
				t.Errorf("signed %v, %q: holds %d, %v", signed, s, n, err)
			}
		}
	}
}

// FuzzIntFlag: an integer flag takes a value or refuses it; a value it takes prints back
// exactly as written, so the number used is the number typed, and is negative only when
// the flag is signed.
func FuzzIntFlag(f *testing.F) {
	for _, s := range append([]string{"0", "12", "-1", "-0", "007", "9223372036854775807", "9223372036854775808", "-9223372036854775808", "", " 1", "--1"}, notDecimal...) {
		f.Add(s, false)
		f.Add(s, true)
	}
	f.Fuzz(func(t *testing.T, s string, signed bool) {
		n := 7
		v := cmdline.Decimal(&n, 7)
		if signed {
			v = cmdline.SignedDecimal(&n, 7)
		}
		if err := v.Set(s); err != nil {
			if n != 7 || v.String() != "7" {
				t.Fatalf("%q refused as %v, holding %d", s, err, n)
			}
			return
		}
		if v.String() != s || n < 0 && !signed {
			t.Fatalf("signed %v: %q took %d, printed %q", signed, s, n, v.String())
		}
	})
}

// TestEveryIntegerFlagReadsDecimalAlone gives each integer flag of every command of both
// command lines 010, 0x10, 1_000 and +5: each is refused by the flag, and the command line
// is a usage error (exit 2) at that flag.
// The integer flags are found in the command trees, so one declared later with fs.Int or
// flag.Int, which read 010 as 8, fails here.
func TestEveryIntegerFlagReadsDecimalAlone(t *testing.T) {
	binaries := []struct {
		root *cobra.Command
		run  func(args []string, out io.Writer) int
	}{
		{cli.Root(cli.Env{}), func(args []string, out io.Writer) int {
			getenv := func(k string) string { return map[string]string{"BC_CONFIG": "/nonexistent/cli.conf"}[k] }
			return cli.Run(context.Background(), args, cli.Env{Stdout: out, Stderr: out, Getenv: getenv})
		}},
		{bcdcli.Root(bcdcli.Env{}), func(args []string, out io.Writer) int {
			return bcdcli.Run(context.Background(), args, bcdcli.Env{Stdout: out, Stderr: out})
		}},
	}
	var found []string
	for _, b := range binaries {
		var visit func(c *cobra.Command)
		visit = func(c *cobra.Command) {
			c.LocalFlags().VisitAll(func(f *pflag.Flag) {
				if !integer(f) {
					return
				}
				found = append(found, c.CommandPath()+" --"+f.Name)
				atFlag := regexp.MustCompile(`\b(path|at): --` + f.Name + "\n")
				for _, v := range notDecimal {
					if f.Value.Set(v) == nil {
						// Not run: a mode such as bcd ramdisk must not start in a test.
						t.Errorf("%s --%s %s: taken as %s; declare it with cmdline.Decimal", c.CommandPath(), f.Name, v, f.Value)
						continue
					}
					args := append(strings.Fields(c.CommandPath())[1:], "--"+f.Name, v)
					var out bytes.Buffer
					if code := b.run(args, &out); code != 2 || !strings.Contains(out.String(), "INVALID_INPUT") || !atFlag.MatchString(out.String()) {
						t.Errorf("%s --%s %s: exit %d, want 2, INVALID_INPUT at --%s\n%s", c.CommandPath(), f.Name, v, code, f.Name, out.String())
					}
				}
			})
			for _, sub := range c.Commands() {
				visit(sub)
			}
		}
		visit(b.root)
	}
	// The probe must see the integer flags there are, or this test would pass on none.
	for _, want := range []string{"better-compute profiles get --profile-version", "better-compute profiles update --if-version",
		"better-compute sites known-macs --limit", "better-compute serve --gc-percent", "better-compute serve --auth-failure-burst",
		"better-compute images register --size", "better-compute tokens create --ttl"} {
		if !slices.Contains(found, want) {
			t.Errorf("%s is not found as an integer flag among %q", want, found)
		}
	}
}

// integer reports whether f takes a whole number: it takes 5 and 12 and refuses a word.
// It sets f's value: f must be of a command tree made for the probe.
func integer(f *pflag.Flag) bool {
	return f.Value.Set("5") == nil && f.Value.Set("12") == nil && f.Value.Set("five") != nil
}

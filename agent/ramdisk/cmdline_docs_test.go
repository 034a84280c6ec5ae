package ramdisk

import (
	"cmp"
	"strings"
	"testing"

	"github.com/better-compute/better-compute/testkit/docstable"
)

// TestCmdlineDocumented: docs/ramdisk.md's table of the kernel command line's parameters
// is what ParseCmdline reads: a command line of the documented parameters alone parses,
// and one without any of them is refused naming it.
func TestCmdlineDocumented(t *testing.T) {
	_, rows := docstable.Table(t, "../../docs/ramdisk.md", "## The ramdisk's join", "parameter")
	value := map[string]string{"bc.pins": "sha256/a,sha256/b,sha256/c"}
	var params []string
	for _, r := range rows {
		params = append(params, docstable.Names(r.Cells[0])...)
	}
	line := func(leave string) string {
		var args []string
		for _, p := range params {
			if p != leave {
				args = append(args, p+"="+cmp.Or(value[p], "x"))
			}
		}
		return strings.Join(args, " ")
	}
	if _, err := ParseCmdline(line("")); err != nil {
		t.Errorf("the documented parameters %v are not all ParseCmdline reads: %v", params, err)
	}
	for _, p := range params {
		if _, err := ParseCmdline(line(p)); err == nil || !strings.Contains(err.Error(), p+"=") {
			t.Errorf("without %s, ParseCmdline answers %v; the docs say it is required", p, err)
		}
	}
}

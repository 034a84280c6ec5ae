package testkit

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/better-compute/better-compute/proto"
)

// TestContractWordsAreProtos checks that the words the registry and the agents share are
// written once, in proto: outside proto no package (tests and e2e aside) sets an error
// reason with a string literal, or names a step kind of proto.Steps as a string literal.
func TestContractWordsAreProtos(t *testing.T) {
	reasonLiteral := regexp.MustCompile(`WithReason\("`)
	var kinds []string
	for _, k := range proto.Steps {
		kinds = append(kinds, regexp.QuoteMeta(`"`+k.Kind+`"`))
	}
	kinds = append(kinds, regexp.QuoteMeta(`"`+proto.CommandDeployImage+`"`))
	kindLiteral := regexp.MustCompile(strings.Join(kinds, "|"))
	eachSourceLine(t, func(rel string) bool { return rel == "e2e" || rel == "proto" }, func(at, line string) {
		if reasonLiteral.MatchString(line) {
			t.Errorf("%s: a reason as a literal: name it in proto/reasons.go", at)
		}
		if m := kindLiteral.FindString(line); m != "" {
			t.Errorf("%s: the step kind %s as a literal: use proto's constant", at, m)
		}
	})
}

// TestStrictJSONIsJsondocs checks that JSON is decoded strictly in one place: no package
// (tests, e2e and the simulated Redfish BMC aside, which refuses what a BMC refuses) sets
// up encoding/json's strictness itself rather than use jsondoc.Decoder, whose rules
// (duplicate keys, trailing data, types) and errors (a proto.Error with the path) are
// the same everywhere.
func TestStrictJSONIsJsondocs(t *testing.T) {
	strict := regexp.MustCompile(`\.DisallowUnknownFields\(\)`)
	eachSourceLine(t, func(rel string) bool {
		return rel == "e2e" || rel == "jsondoc" || rel == filepath.Join("bmc", "redfishsim")
	}, func(at, line string) {
		if strict.MatchString(line) && !strings.Contains(line, "toml.") {
			t.Errorf("%s: strict JSON decoding of its own: decode with jsondoc.Decoder", at)
		}
	})
}

// eachSourceLine calls fn with every line of code (comments aside) of the module's Go
// files but tests, testdata and the directories skip names (by path from the root), and
// where it stands (FILE:LINE).
func eachSourceLine(t *testing.T, skip func(rel string) bool, fn func(at, line string)) {
	t.Helper()
	root := moduleRoot()
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		if d.IsDir() {
			if skip(rel) || d.Name() == "testdata" || strings.HasPrefix(d.Name(), ".") && rel != "." {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for i, line := range strings.Split(string(data), "\n") {
			if !strings.HasPrefix(strings.TrimSpace(line), "//") {
				fn(fmt.Sprintf("%s:%d", rel, i+1), line)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

package testkit

import (
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
	root := moduleRoot()
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		if d.IsDir() {
			if rel == "e2e" || rel == "proto" || d.Name() == "testdata" || strings.HasPrefix(d.Name(), ".") && rel != "." {
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
			if strings.HasPrefix(strings.TrimSpace(line), "//") {
				continue
			}
			if reasonLiteral.MatchString(line) {
				t.Errorf("%s:%d: a reason as a literal: name it in proto/reasons.go", rel, i+1)
			}
			if m := kindLiteral.FindString(line); m != "" {
				t.Errorf("%s:%d: the step kind %s as a literal: use proto's constant", rel, i+1, m)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

package userdata

import (
	"fmt"
	"strings"
	"unicode"

	"github.com/better-compute/better-compute/jsondoc"
	ignitionconfig "github.com/coreos/ignition/v2/config"
)

// maxIgnitionDepth is the deepest nesting checkIgnition reads: encoding/json's own bound,
// which Ignition decodes its config with.
const maxIgnitionDepth = 10000

// checkIgnition refuses a document of kind ignition the machine would not boot with, when
// it is rendered or previewed rather than on the ramdisk once the image is written:
//
//   - one Ignition's own parser refuses (any spec 3 version it knows), each of its errors
//     at its path in the document (storage.files[0].path: path not absolute);
//   - one with an object holding two members Ignition reads as one field: the same name
//     twice, or two spellings of a name that differ in case only ("storage" and
//     "Storage"; Ignition decodes with encoding/json, which matches names case
//     insensitively). Ignition would read both, one over the other, and the ramdisk,
//     adding bcd's files under storage.files, could not keep what the template meant.
func checkIgnition(doc []byte) error {
	if _, report, err := ignitionconfig.Parse(doc); err != nil {
		var problems []string
		for _, e := range report.Entries {
			if !e.Kind.IsFatal() {
				continue
			}
			var at jsondoc.Path
			for _, step := range e.Context.Path {
				if i, ok := step.(int); ok {
					at = at.Index(i)
				} else {
					at = at.Field(fmt.Sprint(step))
				}
			}
			if at != "" {
				e.Message = fmt.Sprintf("%s: %s", at, e.Message)
			}
			problems = append(problems, e.Message)
		}
		if len(problems) == 0 {
			problems = append(problems, err.Error())
		}
		return fmt.Errorf("Ignition refuses the config it renders: %s", strings.Join(problems, "; "))
	}
	v, serr := jsondoc.Parse(doc, jsondoc.Limits{MaxBytes: MaxDocument, MaxDepth: maxIgnitionDepth})
	if serr != nil {
		return fmt.Errorf("the config it renders, at %s: %s", serr.Path, serr.Msg)
	}
	return sameFieldTwice(v, "")
}

// sameFieldTwice finds, in document order, an object of v at p holding two members whose
// names encoding/json folds to one (the same name in another case).
func sameFieldTwice(v *jsondoc.Value, p jsondoc.Path) error {
	seen := map[string]string{}
	for _, m := range v.Members {
		folded := foldName(m.Key)
		if first, ok := seen[folded]; ok {
			return fmt.Errorf("the config it renders, at %s: %q and %q are one field to Ignition, which reads names in any case: write it once",
				p.Field(m.Key), first, m.Key)
		}
		seen[folded] = m.Key
		if err := sameFieldTwice(m.Value, p.Field(m.Key)); err != nil {
			return err
		}
	}
	for i, item := range v.Items {
		if err := sameFieldTwice(item, p.Index(i)); err != nil {
			return err
		}
	}
	return nil
}

// foldName is name with each character replaced by the least of its Unicode simple case
// folding orbit: two names fold to the same exactly when strings.EqualFold, which is how
// encoding/json matches a member to a field, holds between them.
func foldName(name string) string {
	return strings.Map(func(r rune) rune {
		for {
			next := unicode.SimpleFold(r)
			if next <= r {
				return next
			}
			r = next
		}
	}, name)
}

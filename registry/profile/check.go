package profile

import (
	"bytes"
	"encoding/json"
	"slices"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/better-compute/better-compute/jsondoc"
	"github.com/better-compute/better-compute/proto"
	"github.com/better-compute/better-compute/proto/hostunit"
)

// Limits of a profile document, beside its size (proto.MaxProfileDocument).
const (
	maxDepth       = 32
	maxVersion     = 1<<31 - 1
	maxDescription = 1024
	// maxSteps bounds the main phase; maxPhaseSteps acceptance and cleanup.
	maxSteps      = 256
	maxPhaseSteps = 64
	// maxIssues bounds what Check returns for a document full of mistakes.
	maxIssues = 1000
)

// rootPath names the document as a whole in an issue.
const rootPath = "$"

// Issue is one problem of a profile document: where, its code (INVALID_CONFIG) and what
// to do about it.
type Issue struct {
	Path    string     `json:"path"`
	Code    proto.Code `json:"code"`
	Message string     `json:"message"`
}

// Err returns the issue as an error.
func (i Issue) Err() *proto.Error {
	return proto.Errorf(i.Code, "%s", i.Message).WithPath(i.Path)
}

// Define checks a profile document and returns the profile. A problem is an
// INVALID_CONFIG *proto.Error whose path names the first offending field in document
// order.
func Define(doc []byte) (*Profile, error) {
	p, issues := define(doc)
	if len(issues) > 0 {
		return nil, issues[0].Err()
	}
	return p, nil
}

// DefineStored defines again the stored version of profile id: one that no longer passes
// the checks (they have grown stricter since it was stored) is INVALID_STATE, saying to
// run `profiles validate`.
func DefineStored(id string, version int, doc []byte) (*Profile, error) {
	p, err := Define(doc)
	if err != nil {
		return nil, proto.Errorf(proto.InvalidState, "stored profile %s@%d no longer passes the checks (%v): run `profiles validate`", id, version, err)
	}
	return p, nil
}

// Check checks a profile document and returns every problem, in document order (at most
// the first 1000); none when Define would accept it.
func Check(doc []byte) []Issue {
	_, issues := define(doc)
	return issues
}

func define(doc []byte) (*Profile, []Issue) {
	root, err := jsondoc.Parse(doc, jsondoc.Limits{MaxBytes: proto.MaxProfileDocument, MaxDepth: maxDepth})
	if err != nil {
		return nil, []Issue{newIssue(err.Path, "the document is not acceptable JSON: "+err.Error())}
	}
	w := &walker{root: root, p: &Profile{}}
	w.walk()
	if w.r.Len() > 0 {
		var issues []Issue
		for _, pr := range w.r.Problems()[:min(w.r.Len(), maxIssues)] {
			issues = append(issues, newIssue(pr.Path, pr.Message))
		}
		return nil, issues
	}
	w.finish(doc)
	return w.p, nil
}

func newIssue(p jsondoc.Path, msg string) Issue {
	path := string(p)
	if path == "" {
		path = rootPath
	}
	return Issue{Path: path, Code: proto.InvalidConfig, Message: msg}
}

// walker walks a profile document once, recording every problem and building the
// profile as it goes; the profile is kept only when there is no problem.
type walker struct {
	r    jsondoc.Report
	root *jsondoc.Value
	p    *Profile
	// What the rules of one field need to know of others, read before the walk: the
	// target and entry when valid, whether image and userData are present, and how many
	// steps each phase has.
	target, entry         string
	docID                 string
	hasImage, hasUserData bool
	phaseLen              map[string]int
	// walked are the steps (not fallbacks) walked so far, for the rules across steps.
	walked []*walkedStep
	// current is the step whose input is being walked.
	current *walkedStep
}

func (w *walker) walk() {
	if !w.r.Object(w.root, "") {
		return
	}
	w.preread()
	w.r.Fields(w.root, "", map[string]jsondoc.Check{
		"id":          w.id,
		"version":     w.version,
		"target":      w.targetField,
		"description": w.description,
		"role":        w.metalOnly(w.role),
		"entry":       w.metalOnly(w.entryField),
		"drivers":     w.metalOnly(w.drivers),
		"image":       w.notAdopt(w.image),
		"userData":    w.notAdopt(w.userDataField),
		"hostConfig":  w.metalOnly(w.hostConfig),
		"steps":       w.metalOnly(w.notAdopt(w.phase(phaseMain, maxSteps, &w.p.steps))),
		"acceptance":  w.metalOnly(w.phase(phaseAcceptance, maxPhaseSteps, &w.p.acceptance)),
		"cleanup":     w.metalOnly(w.phase(phaseCleanup, maxPhaseSteps, &w.p.cleanup)),
	}, "id", "version", "target")
	if w.target == TargetVPS && !w.hasImage {
		w.r.AddMissing(w.root, "image", "a vps profile boots an image: image is required")
	}
	w.crossStepRules()
}

func (w *walker) preread() {
	if t := w.root.Get("target"); t != nil && t.Kind == jsondoc.String && (t.Text == TargetMetal || t.Text == TargetVPS) {
		w.target = t.Text
	}
	if id := w.root.Get("id"); id != nil && id.Kind == jsondoc.String {
		w.docID = id.Text
	}
	if e := w.root.Get("entry"); e != nil && e.Kind == jsondoc.String && (e.Text == entryAdopt || e.Text == entryDeploy) {
		w.entry = e.Text
	}
	w.hasImage = w.root.Get("image") != nil
	w.hasUserData = w.root.Get("userData") != nil
	w.phaseLen = map[string]int{}
	for _, phase := range phases {
		if v := w.root.Get(phase.field); v != nil {
			w.phaseLen[phase.name] = len(v.Items)
		}
	}
}

// metalOnly refuses a field of metal profiles on a vps profile.
func (w *walker) metalOnly(check jsondoc.Check) jsondoc.Check {
	return func(v *jsondoc.Value, p jsondoc.Path) {
		if w.target == TargetVPS {
			w.r.Add(v, p, "%s belongs to metal profiles; a vps profile has id, version, target, description, image and userData", p)
			return
		}
		check(v, p)
	}
}

// notAdopt refuses a field an adopt profile may not carry.
func (w *walker) notAdopt(check jsondoc.Check) jsondoc.Check {
	return func(v *jsondoc.Value, p jsondoc.Path) {
		if w.entry == entryAdopt {
			w.r.Add(v, p, "an adopt profile carries no image, userData or steps: the machine keeps the OS it runs")
			return
		}
		check(v, p)
	}
}

func (w *walker) id(v *jsondoc.Value, p jsondoc.Path) {
	s, ok := w.r.String(v, p)
	if !ok {
		return
	}
	if !profileID.MatchString(s) {
		w.r.Add(v, p, "%q is not a profile id: 1 to 128 lower-case letters, digits, dots, underscores and hyphens", s)
		return
	}
	w.p.id = s
}

func (w *walker) version(v *jsondoc.Value, p jsondoc.Path) {
	if n, ok := w.r.Whole(v, p, 1, maxVersion); ok {
		w.p.version = int(n)
	}
}

func (w *walker) targetField(v *jsondoc.Value, p jsondoc.Path) {
	if s, ok := w.r.Enum(v, p, TargetMetal, TargetVPS); ok {
		w.p.target = s
	}
}

func (w *walker) description(v *jsondoc.Value, p jsondoc.Path) {
	s, ok := w.r.String(v, p)
	if !ok {
		return
	}
	if n := utf8.RuneCountInString(s); n > maxDescription {
		w.r.Add(v, p, "is %d characters, more than the %d allowed", n, maxDescription)
		return
	}
	if strings.ContainsFunc(s, func(r rune) bool { return unicode.IsControl(r) && r != '\n' && r != '\t' }) {
		w.r.Add(v, p, "may hold line breaks and tabs but no other control characters")
		return
	}
	w.p.description = s
}

// Roles and entries.
const (
	roleHost      = "host"
	roleDedicated = "dedicated"
	entryAdopt    = "adopt"
	entryDeploy   = "deploy"
)

func (w *walker) role(v *jsondoc.Value, p jsondoc.Path) {
	if s, ok := w.r.Enum(v, p, roleHost, roleDedicated); ok {
		w.p.role = s
	}
}

func (w *walker) entryField(v *jsondoc.Value, p jsondoc.Path) {
	if s, ok := w.r.Enum(v, p, entryAdopt, entryDeploy); ok {
		w.p.entry = s
	}
}

// concerns are the driver concerns a profile may bind.
var concerns = []string{"power", "management", "virtual-media", "boot", "deploy", "inspect"}

func (w *walker) drivers(v *jsondoc.Value, p jsondoc.Path) {
	if !w.r.Object(v, p) {
		return
	}
	w.p.drivers = map[string]Driver{}
	for _, m := range v.Members {
		mp := p.Field(m.Key)
		if !slices.Contains(concerns, m.Key) {
			w.r.AddAt(m.KeyOffset, mp, "unknown driver concern %q; the concerns are %s", m.Key, strings.Join(concerns, ", "))
			continue
		}
		var d Driver
		switch m.Value.Kind {
		case jsondoc.String:
			d.Driver = w.driverName(m.Value, mp)
		case jsondoc.Object:
			w.r.Fields(m.Value, mp, map[string]jsondoc.Check{
				"driver": func(v *jsondoc.Value, p jsondoc.Path) { d.Driver = w.driverName(v, p) },
				"config": func(v *jsondoc.Value, p jsondoc.Path) {
					if w.r.Object(v, p) {
						w.driverConfig(v, p)
						d.Config = compact(v.Raw)
					}
				},
			}, "driver")
		default:
			w.r.Add(m.Value, mp, "must be a driver name or {driver, config}, not %s", m.Value.Kind)
		}
		w.p.drivers[m.Key] = d
	}
}

// driverConfig refuses a credentialRef that is not a secret:// reference of the
// registry's secret store (a file of the site host, the secret itself), without echoing
// it, and an option that names a file of the site host (proto.SiteHostFile): a profile,
// whoever's, runs on tenants' machines, and only the platform names such a file, in a
// hardware profile; and a wait longer than a site runs one command (proto.LongWait).
func (w *walker) driverConfig(v *jsondoc.Value, p jsondoc.Path) {
	if f := proto.SiteHostFile(v.Raw); f != "" {
		w.r.Add(v, jsondoc.Path(string(p)+"."+f), "a profile's driver config names no file of the site host: the platform names the BMC's CA file in the machine's hardware profile; trust the BMC by its key with options.tlsPin")
	}
	if f := proto.LongWait(v.Raw); f != "" {
		w.r.Add(v, jsondoc.Path(string(p)+"."+f), "powerTimeout is at most %s, as long as a site runs one command: name a shorter wait", proto.MaxPowerTimeout)
	}
	for _, m := range v.Members {
		if m.Key != "credentialRef" {
			continue
		}
		if s, ok := w.r.String(m.Value, p.Field(m.Key)); ok && !hostunit.IsSecretRef(s) {
			w.r.Add(m.Value, p.Field(m.Key), "a BMC credential is named by a secret:// reference to a secret of the registry, never a file nor the secret itself: it %s", hostunit.SecretRefRule)
		}
	}
}

func (w *walker) driverName(v *jsondoc.Value, p jsondoc.Path) string {
	s, ok := w.r.String(v, p)
	if ok && !proto.IsDriverName(s) {
		w.r.Add(v, p, "%q is not a driver name: 1 to 63 of a-z, 0-9 and -, starting with a letter or digit", s)
	}
	return s
}

func (w *walker) image(v *jsondoc.Value, p jsondoc.Path) {
	img := &Image{}
	w.r.Fields(v, p, map[string]jsondoc.Check{
		"ref": func(v *jsondoc.Value, p jsondoc.Path) {
			imageRef(w, v, p)
			img.Ref = v.Text
		},
		"format": func(v *jsondoc.Value, p jsondoc.Path) { img.Format, _ = w.r.Enum(v, p, texts(proto.ImageFormats)...) },
		"compression": func(v *jsondoc.Value, p jsondoc.Path) {
			img.Compression, _ = w.r.Enum(v, p, texts(proto.Compressions)...)
		},
	}, "ref")
	w.p.image = img
}

// shippedTemplates are the user-data templates that ship, by kind. No template ships for
// talos.
var shippedTemplates = map[string]string{
	"cloud-init": "bcd-host.yaml.hbs",
	"ignition":   "bcd-host.ign",
}

func (w *walker) userDataField(v *jsondoc.Value, p jsondoc.Path) {
	ud := &UserData{}
	w.r.Fields(v, p, map[string]jsondoc.Check{
		"kind": func(v *jsondoc.Value, p jsondoc.Path) { ud.Kind, _ = w.r.Enum(v, p, "cloud-init", "ignition", "talos") },
		"template": func(t *jsondoc.Value, tp jsondoc.Path) {
			s, ok := w.r.String(t, tp)
			if !ok {
				return
			}
			if !proto.IsTemplateName(s) {
				w.r.Add(t, tp, "%q is not a template name: 1 to 128 of a-z, 0-9, ., _ and -, starting with a letter or digit", s)
				return
			}
			kind := v.Get("kind")
			for shippedKind, name := range shippedTemplates {
				if s == name && kind != nil && kind.Kind == jsondoc.String && kind.Text != shippedKind {
					own := "a template of its own"
					if tmpl, ok := shippedTemplates[kind.Text]; ok {
						own = tmpl + " or " + own
					}
					w.r.Add(t, tp, "%s is the shipped %s template; a %s profile names %s", s, shippedKind, kind.Text, own)
					return
				}
			}
			ud.Template = s
		},
	}, "kind", "template")
	w.p.userData = ud
}

func (w *walker) hostConfig(v *jsondoc.Value, p jsondoc.Path) {
	if !w.r.Object(v, p) {
		return
	}
	for _, m := range v.Members {
		hostunit.Check(&w.r, m.Key, m.Value, p.Field(m.Key))
		w.p.hostConfig = append(w.p.hostConfig, HostUnit{Name: m.Key, Settings: compact(m.Value.Raw)})
	}
}

// compact returns a JSON text without insignificant white space.
func compact(raw []byte) json.RawMessage {
	var b bytes.Buffer
	if err := json.Compact(&b, raw); err != nil {
		// The text comes from a parsed document, so it is JSON.
		panic("compacting parsed JSON: " + err.Error())
	}
	return b.Bytes()
}

// finish sets the defaults of an accepted profile and keeps its document.
func (w *walker) finish(doc []byte) {
	if w.p.target == TargetMetal {
		if w.p.role == "" {
			w.p.role = roleHost
		}
		if w.p.entry == "" {
			w.p.entry = entryDeploy
		}
	}
	order := hostunit.Order()
	slices.SortFunc(w.p.hostConfig, func(a, b HostUnit) int {
		return slices.Index(order, a.Name) - slices.Index(order, b.Name)
	})
	w.p.document = compact(doc)
}

package console

import (
	"bytes"
	"encoding/json"
	"fmt"
	"html/template"
	"strings"
	"time"

	"github.com/better-compute/better-compute/proto"
	"github.com/better-compute/better-compute/registry/api"
)

// section is an inventory section as a page shows it: its JSON indented.
type section struct {
	Name      string
	UpdatedAt time.Time
	JSON      string
}

func sectionsOf(in []api.InventorySection) []section {
	out := make([]section, 0, len(in))
	for _, s := range in {
		out = append(out, section{Name: s.Section, UpdatedAt: s.UpdatedAt, JSON: indented(s.Data)})
	}
	return out
}

// indented is a JSON value indented for reading; as it came when it does not parse.
func indented(raw json.RawMessage) string {
	var b bytes.Buffer
	if json.Indent(&b, raw, "", "  ") != nil {
		return string(raw)
	}
	return b.String()
}

// attestation is a node-signed result of the node's last workflow and the registry's
// verdict on it.
type attestation struct {
	Step, Use string
	Attested  bool
	// Summary says what was attested (a wipe's mode, DCGM's level and tests), Reason why
	// not.
	Summary, Reason string
	At              time.Time
}

// attestationsOf are the node-signed results of run: its disk wipe as metal.get reads
// it, and the diag.dcgm steps that passed with their tests.
func attestationsOf(n api.NodeView, run api.WorkflowView) []attestation {
	var out []attestation
	if w := n.Wipe; w != nil && w.WorkflowID == run.ID {
		out = append(out, attestation{Step: w.Step, Use: proto.CommandDiskWipe, Attested: w.Attested, Summary: "mode " + w.Mode, Reason: w.Reason, At: w.FinishedAt})
	}
	for _, s := range run.Steps {
		var r proto.DCGMResult
		switch {
		case s.Use != proto.CommandDiagDCGM:
		case s.Error != nil:
			out = append(out, attestation{Step: s.Path(), Use: s.Use, Reason: string(s.Error.Code) + ": " + s.Error.Message, At: s.FinishedAt})
		case s.Attestation() != nil && json.Unmarshal(s.Result, &r) == nil:
			out = append(out, attestation{Step: s.Path(), Use: s.Use, Attested: r.Passed, At: s.FinishedAt,
				Summary: fmt.Sprintf("level %d, %d tests passed (DCGM %s, driver %s)", r.Level, len(r.Tests), r.DCGMVersion, r.DriverVersion)})
		}
	}
	return out
}

// funcs are the templates' helpers.
var funcs = template.FuncMap{
	"when": func(t time.Time) string {
		if t.IsZero() {
			return "—"
		}
		return t.UTC().Format("2006-01-02 15:04:05Z")
	},
	"bytes": api.BytesText,
	"join":  strings.Join,
	"short": func(s string) string {
		if len(s) > 16 {
			return s[:16] + "…"
		}
		return s
	},
	"json": func(raw json.RawMessage) string { return indented(raw) },
	// seconds is an event's duration as the timeline shows a step's.
	"seconds": func(s float64) string { return durationText(time.Duration(s * float64(time.Second))) },
}

// parsePages parses each page with the layout it fills.
func parsePages() map[string]*template.Template {
	pages := map[string]*template.Template{}
	for _, name := range []string{"signin", "error", "nodes", "node", "confirm", "sites", "knownmacs", "pools", "images"} {
		pages[name] = template.Must(template.New(name).Funcs(funcs).ParseFS(templateFiles, "templates/layout.html", "templates/"+name+".html"))
	}
	return pages
}

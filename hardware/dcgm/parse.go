package dcgm

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"

	"github.com/better-compute/better-compute/proto"
)

// document is what `dcgmi diag -j` prints, both shapes: DCGM 3 nests everything under
// "DCGM GPU Diagnostic" (its version and driver beside the categories, a result's GPUs
// in gpu_ids as a number or a comma-separated string); DCGM 4 under "DCGM Diagnostic",
// with results by entity (entity_group, entity_id), a test_summary per test and the
// versions in "metadata".
type document struct {
	V3       *body          `json:"DCGM GPU Diagnostic"`
	V4       *body          `json:"DCGM Diagnostic"`
	Metadata map[string]any `json:"metadata"`
	// RuntimeError is DCGM's answer when the diagnostic could not run at all.
	RuntimeError string `json:"runtime_error"`
}

type body struct {
	Categories   []*category `json:"test_categories"`
	Version      string      `json:"version"`
	Driver       string      `json:"Driver Version Detected"`
	RuntimeError string      `json:"runtime_error"`
}

type category struct {
	Category string  `json:"category"`
	Tests    []*test `json:"tests"`
}

type test struct {
	Name    string    `json:"name"`
	Results []*result `json:"results"`
	Summary *struct {
		Status string `json:"status"`
	} `json:"test_summary"`
}

type result struct {
	GPUIDs      json.RawMessage   `json:"gpu_ids"`
	EntityGroup string            `json:"entity_group"`
	EntityID    *int              `json:"entity_id"`
	Status      string            `json:"status"`
	Warnings    []json.RawMessage `json:"warnings"`
	Info        json.RawMessage   `json:"info"`
}

// resultOverhead is about what one entity's result takes in the answer's JSON beside its
// warnings and info.
const resultOverhead = 64

// Parse reads the output of `dcgmi diag -r LEVEL -j` of DCGM 3 or 4 into every test
// with its result on each entity. Text before the document (dcgmi prints warnings
// there) is skipped. Output that holds no test is an error: a diagnostic that ran
// nothing proves nothing. So is output whose results would make an answer larger than
// the registry reads of a signed result (proto.MaxResultPayload): each entity of a
// result carries the result's warnings, so a few KiB that list one GPU many times
// beside many warnings would otherwise grow into gigabytes.
func Parse(out []byte) (proto.DCGMResult, error) {
	var res proto.DCGMResult
	if i := bytes.IndexByte(out, '{'); i >= 0 {
		out = out[i:]
	}
	var doc document
	if err := json.Unmarshal(out, &doc); err != nil {
		return res, fmt.Errorf("dcgmi's output is not its JSON document: %v", err)
	}
	b := doc.V4
	if b == nil {
		b = doc.V3
	}
	if b == nil {
		if doc.RuntimeError != "" {
			return res, fmt.Errorf("DCGM could not run the diagnostic: %s", doc.RuntimeError)
		}
		return res, fmt.Errorf("dcgmi's JSON holds neither %q nor %q", "DCGM Diagnostic", "DCGM GPU Diagnostic")
	}
	if msg := firstOf(b.RuntimeError, doc.RuntimeError); msg != "" {
		return res, fmt.Errorf("DCGM could not run the diagnostic: %s", msg)
	}
	res.DCGMVersion = firstOf(b.Version, metadata(doc.Metadata, "version"), metadata(doc.Metadata, "DCGM Version"))
	res.DriverVersion = firstOf(b.Driver, metadata(doc.Metadata, "Driver Version Detected"))
	res.Tests = []proto.DCGMTest{}
	kept := 0 // the bytes of results kept, as the answer's JSON will carry them
	for _, c := range b.Categories {
		if c == nil {
			continue
		}
		for _, t := range c.Tests {
			if t == nil { // DCGM 3 puts nulls between tests
				continue
			}
			pt := proto.DCGMTest{Category: c.Category, Name: t.Name, Results: []proto.DCGMEntityResult{}}
			status := proto.DCGMPass
			if t.Summary != nil {
				status = worst(status, normalize(t.Summary.Status))
			}
			for _, r := range t.Results {
				if r == nil {
					continue
				}
				entries, err := entities(r)
				if err != nil {
					return res, fmt.Errorf("test %q: %v", t.Name, err)
				}
				st, w, in := normalize(r.Status), warnings(r.Warnings), info(r.Info)
				status = worst(status, st)
				for _, e := range entries {
					if kept += resultOverhead + textSize(w) + textSize(in); kept > proto.MaxResultPayload {
						return res, fmt.Errorf("dcgmi's results come to more than %d bytes, more than the registry reads of a signed result", proto.MaxResultPayload)
					}
					e.Status, e.Warnings, e.Info = st, w, in
					pt.Results = append(pt.Results, e)
				}
			}
			if t.Summary == nil && len(pt.Results) == 0 {
				status = proto.DCGMSkip
			}
			pt.Status = status
			res.Tests = append(res.Tests, pt)
		}
	}
	if len(res.Tests) == 0 {
		return res, fmt.Errorf("dcgmi's JSON holds no test: the diagnostic ran nothing")
	}
	res.Passed = len(res.Failures()) == 0 && len(res.Untested()) == 0
	return res, nil
}

// entities are the entities a result is for: DCGM 4 names one; DCGM 3 lists GPU ids
// as a number or as "0,1,2", each GPU once, at most proto.DCGMMaxGPUs of them.
func entities(r *result) ([]proto.DCGMEntityResult, error) {
	if r.EntityID != nil {
		group := r.EntityGroup
		if group == "" {
			group = "GPU"
		}
		return []proto.DCGMEntityResult{{Entity: group, ID: *r.EntityID}}, nil
	}
	if len(r.GPUIDs) == 0 || string(r.GPUIDs) == "null" {
		return nil, nil
	}
	var list string
	var n int
	if err := json.Unmarshal(r.GPUIDs, &n); err == nil {
		list = strconv.Itoa(n)
	} else if err := json.Unmarshal(r.GPUIDs, &list); err != nil {
		return nil, fmt.Errorf("gpu_ids is %s, neither a number nor a list of numbers", r.GPUIDs)
	}
	var out []proto.DCGMEntityResult
	seen := map[int]bool{}
	for f := range strings.SplitSeq(list, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		id, err := strconv.Atoi(f)
		switch {
		case err != nil || id < 0:
			return nil, fmt.Errorf("gpu_ids %q holds %q, not a GPU index", list, f)
		case seen[id]:
			return nil, fmt.Errorf("gpu_ids lists GPU %d twice", id)
		case len(out) == proto.DCGMMaxGPUs:
			return nil, fmt.Errorf("gpu_ids lists more than the %d GPUs DCGM handles", proto.DCGMMaxGPUs)
		}
		seen[id] = true
		out = append(out, proto.DCGMEntityResult{Entity: "GPU", ID: id})
	}
	return out, nil
}

// textSize is the bytes texts take in JSON, about.
func textSize(texts []string) int {
	n := 0
	for _, s := range texts {
		n += len(s) + 3
	}
	return n
}

// normalize maps DCGM's spellings of a status (PASS, Pass, SKIPPED, Warn, ...) to the
// four statuses; anything else counts as a failure, so an unknown status never passes.
func normalize(s string) string {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "pass", "passed":
		return proto.DCGMPass
	case "skip", "skipped", "not run", "notrun":
		return proto.DCGMSkip
	case "warn", "warning":
		return proto.DCGMWarn
	default:
		return proto.DCGMFail
	}
}

// rank orders statuses from best to worst.
var rank = map[string]int{proto.DCGMPass: 0, proto.DCGMSkip: 1, proto.DCGMWarn: 2, proto.DCGMFail: 3}

func worst(a, b string) string {
	if rank[b] > rank[a] {
		return b
	}
	return a
}

// warnings are a result's warning texts: strings (DCGM 3) or objects with a
// "warning" text and error codes (later DCGM 3, DCGM 4).
func warnings(raw []json.RawMessage) []string {
	var out []string
	for _, w := range raw {
		var s string
		if json.Unmarshal(w, &s) == nil {
			out = append(out, s)
			continue
		}
		var o struct{ Warning, Message string }
		if json.Unmarshal(w, &o) == nil && firstOf(o.Warning, o.Message) != "" {
			out = append(out, firstOf(o.Warning, o.Message))
		}
	}
	return out
}

// info is a result's informational text: one string (DCGM 3) or a list (DCGM 4).
func info(raw json.RawMessage) []string {
	var s string
	if json.Unmarshal(raw, &s) == nil && s != "" {
		return []string{s}
	}
	var list []string
	json.Unmarshal(raw, &list)
	return list
}

func metadata(m map[string]any, key string) string {
	s, _ := m[key].(string)
	return s
}

func firstOf(s ...string) string {
	for _, v := range s {
		if v != "" {
			return v
		}
	}
	return ""
}

package dcgm

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"

	"github.com/better-compute/better-compute/proto"
)

// document is what `dcgmi diag -j` prints, both shapes: DCGM 3 nests the categories
// under "DCGM GPU Diagnostic" (its version and driver beside them, or from 3.3 at the
// top with "GPU Device IDs", one per GPU the run was on; a result's GPUs in gpu_ids as
// a number or a comma-separated string, or from 3.3 in gpu_id, and a Deployment
// check's result on no GPU in particular); DCGM 4 under "DCGM Diagnostic", with results
// by entity (entity_group, entity_id), a test_summary per test and the versions in
// "metadata".
type document struct {
	V3       *body          `json:"DCGM GPU Diagnostic"`
	V4       *body          `json:"DCGM Diagnostic"`
	Metadata map[string]any `json:"metadata"`
	Version  string         `json:"version"`
	Driver   string         `json:"Driver Version Detected"`
	DevIDs   []any          `json:"GPU Device IDs"`
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
	GPUID       json.RawMessage   `json:"gpu_id"`
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
// with its result on each entity, on a machine with gpus GPUs on PCI. A result that
// names no GPU (DCGM 3's Deployment checks, of the whole machine) is the result of each
// GPU the run was on: those the document lists (DCGM 3.3's GPU Device IDs), else the
// machine's gpus. Text before the document (dcgmi prints warnings there) is skipped.
// Output that holds no test is an error: a diagnostic that ran nothing proves nothing.
// So is output whose results would make an answer larger than the registry reads of a
// signed result (proto.MaxResultPayload): each entity of a result carries the result's
// warnings, so a few KiB that list one GPU many times beside many warnings would
// otherwise grow into gigabytes.
func Parse(out []byte, gpus int) (proto.DCGMResult, error) {
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
	res.DCGMVersion = firstOf(b.Version, doc.Version, metadata(doc.Metadata, "version"), metadata(doc.Metadata, "DCGM Version"))
	res.DriverVersion = firstOf(b.Driver, doc.Driver, metadata(doc.Metadata, "Driver Version Detected"))
	whole := gpus // the GPUs a result of the whole machine is of
	if len(doc.DevIDs) > 0 {
		whole = len(doc.DevIDs)
	}
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
			status, judged := proto.DCGMPass, t.Summary != nil
			if t.Summary != nil {
				status = worst(status, normalize(t.Summary.Status))
			}
			for _, r := range t.Results {
				if r == nil {
					continue
				}
				judged = true
				entries, err := entities(r, whole)
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
			// A test with no verdict at all did not run; one whose results name no GPU
			// keeps their verdict, a failure above all.
			if !judged {
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
// as a number or as "0,1,2", each GPU once, at most proto.DCGMMaxGPUs of them, or from
// 3.3 names one GPU in gpu_id, as a number or "0". A result that names no GPU (a
// Deployment check, or gpu_id -1) is of the whole machine: GPUs 0 to whole-1.
func entities(r *result, whole int) ([]proto.DCGMEntityResult, error) {
	if r.EntityID != nil {
		group := r.EntityGroup
		if group == "" {
			group = "GPU"
		}
		return []proto.DCGMEntityResult{{Entity: group, ID: *r.EntityID}}, nil
	}
	raw, field := r.GPUIDs, "gpu_ids"
	if len(raw) == 0 || string(raw) == "null" {
		raw, field = r.GPUID, "gpu_id"
	}
	if len(raw) == 0 || string(raw) == "null" || field == "gpu_id" && string(raw) == "-1" {
		var all []proto.DCGMEntityResult
		for id := range min(whole, proto.DCGMMaxGPUs) {
			all = append(all, proto.DCGMEntityResult{Entity: "GPU", ID: id})
		}
		return all, nil
	}
	var list string
	var n int
	if err := json.Unmarshal(raw, &n); err == nil {
		list = strconv.Itoa(n)
	} else if err := json.Unmarshal(raw, &list); err != nil {
		return nil, fmt.Errorf("%s is %s, neither a number nor a list of numbers", field, raw)
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
// "warning" text (a "warnings" one in DCGM 3.3's Deployment checks) and error codes
// (later DCGM 3, DCGM 4).
func warnings(raw []json.RawMessage) []string {
	var out []string
	for _, w := range raw {
		var s string
		if json.Unmarshal(w, &s) == nil {
			out = append(out, s)
			continue
		}
		var o struct {
			Warning, Message string
			Warnings         string `json:"warnings"` // DCGM 3.3's Deployment checks
		}
		if json.Unmarshal(w, &o) == nil && firstOf(o.Warning, o.Message, o.Warnings) != "" {
			out = append(out, firstOf(o.Warning, o.Message, o.Warnings))
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

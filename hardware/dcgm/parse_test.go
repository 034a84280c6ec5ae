package dcgm

import (
	"encoding/json"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"

	"github.com/better-compute/better-compute/proto"
	"github.com/google/go-cmp/cmp"
)

func recorded(t testing.TB, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// gpus is the results of one status on GPUs 0 to n-1.
func gpus(n int, status string) []proto.DCGMEntityResult {
	out := []proto.DCGMEntityResult{}
	for i := range n {
		out = append(out, proto.DCGMEntityResult{Entity: "GPU", ID: i, Status: status})
	}
	return out
}

func TestParseDCGM3(t *testing.T) {
	res, err := Parse(recorded(t, "dcgm3-pass.json"), 8)
	if err != nil {
		t.Fatal(err)
	}
	if !res.Passed || res.DCGMVersion != "3.1.0" || len(res.Tests) != 10 {
		t.Fatalf("passed %v, version %q, %d tests", res.Passed, res.DCGMVersion, len(res.Tests))
	}
	// A Deployment check lists its GPUs as "0,1,...,7": one result per GPU.
	want := proto.DCGMTest{Category: "Deployment", Name: "Denylist", Status: proto.DCGMPass, Results: gpus(8, proto.DCGMPass)}
	if diff := cmp.Diff(want, res.Tests[0]); diff != "" {
		t.Errorf("first test (-want +got):\n%s", diff)
	}
	// The per-GPU test lists each GPU as a number.
	want = proto.DCGMTest{Category: "Custom", Name: "software", Status: proto.DCGMPass, Results: gpus(8, proto.DCGMPass)}
	if diff := cmp.Diff(want, res.Tests[9]); diff != "" {
		t.Errorf("software (-want +got):\n%s", diff)
	}

	res, err = Parse(recorded(t, "dcgm3-fail.json"), 8)
	if err != nil {
		t.Fatal(err)
	}
	if res.Passed {
		t.Fatal("a run with failed tests passed")
	}
	wantFailures := []proto.Failure{{Name: "Page Retirement/Row Remap", GPUs: []int{0, 1, 2, 3, 4, 5, 6, 7}}, {Name: "software", GPUs: []int{5}}}
	if diff := cmp.Diff(wantFailures, res.Failures()); diff != "" {
		t.Errorf("failures (-want +got):\n%s", diff)
	}
	if w := res.Tests[6].Results[0].Warnings; len(w) != 1 || !strings.Contains(w[0], "row remapping failed") {
		t.Errorf("warnings %q", w)
	}
}

// TestParseDCGM33: dcgmi of DCGM 3.3 names a result's GPU in gpu_id, gives a Deployment
// check one result of the whole machine (naming a GPU only beside its warning), and
// puts its version, driver and GPU Device IDs at the top. Before, its failed PCIe test
// was a failure on no GPU, its Deployment checks on none either, and it had no version.
func TestParseDCGM33(t *testing.T) {
	res, err := Parse(recorded(t, "dcgm33-fail.json"), 8)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Tests) != 11 {
		t.Fatalf("%d tests", len(res.Tests))
	}
	if res.Passed || res.DCGMVersion != "3.3.1" || res.DriverVersion != "535.129.03" {
		t.Errorf("passed %v, version %q, driver %q", res.Passed, res.DCGMVersion, res.DriverVersion)
	}
	if diff := cmp.Diff([]proto.Failure{{Name: "PCIe", GPUs: []int{1}}}, res.Failures()); diff != "" {
		t.Errorf("failures (-want +got):\n%s", diff)
	}
	// A check of the whole machine is one of each GPU the run was on: the 2 GPU Device
	// IDs, not the 8 GPUs Parse was told of.
	want := proto.DCGMTest{Category: "Deployment", Name: "Denylist", Status: proto.DCGMPass, Results: gpus(2, proto.DCGMPass)}
	if diff := cmp.Diff(want, res.Tests[0]); diff != "" {
		t.Errorf("Denylist (-want +got):\n%s", diff)
	}
	if r := res.Tests[4].Results; len(r) != 1 || r[0].ID != 1 || r[0].Status != proto.DCGMWarn || len(r[0].Warnings) != 1 || !strings.Contains(r[0].Warnings[0], "Persistence mode for GPU 1") {
		t.Errorf("Persistence Mode %+v", r)
	}
	if u := res.Untested(); len(u) != 0 {
		t.Errorf("untested GPUs %v", u)
	}
}

// TestParseAFailureOnNoGPU: a result whose GPU the parser cannot tell (a field of a
// DCGM it does not know, or no GPU list to stand for) keeps its verdict. Before, a test
// whose results gave the parser no GPU became skip, and its failure a pass.
func TestParseAFailureOnNoGPU(t *testing.T) {
	for name, doc := range map[string]string{
		"no GPU named":    `{"DCGM GPU Diagnostic": {"test_categories": [{"tests": [{"name": "PCIe", "results": [{"status": "Fail"}]}]}]}}`,
		"a field unknown": `{"DCGM GPU Diagnostic": {"test_categories": [{"tests": [{"name": "PCIe", "results": [{"gpu": "1", "status": "Fail"}]}]}]}}`,
	} {
		res, err := Parse([]byte(doc), 0)
		if err != nil {
			t.Fatal(err)
		}
		if res.Passed || res.Tests[0].Status != proto.DCGMFail || len(res.Failures()) != 1 {
			t.Errorf("%s: passed %v, PCIe %s", name, res.Passed, res.Tests[0].Status)
		}
	}
}

func TestParseDCGM4(t *testing.T) {
	res, err := Parse(recorded(t, "dcgm4-pass.json"), 8)
	if err != nil {
		t.Fatal(err)
	}
	if !res.Passed || len(res.Tests) != 1 {
		t.Fatalf("passed %v, %d tests", res.Passed, len(res.Tests))
	}
	got := res.Tests[0]
	if got.Category != "Hardware" || got.Name != "diagnostic" || got.Status != proto.DCGMPass || len(got.Results) != 8 {
		t.Fatalf("test %+v", got)
	}
	if r := got.Results[1]; r.Entity != "GPU" || r.ID != 1 || r.Status != proto.DCGMPass || len(r.Info) != 3 || !strings.Contains(r.Info[2], "GPU 1 calculated") {
		t.Errorf("GPU 1's result %+v", r)
	}

	res, err = Parse(recorded(t, "dcgm4-fail.json"), 8)
	if err != nil {
		t.Fatal(err)
	}
	if res.Passed {
		t.Fatal("a run with a failed GPU passed")
	}
	if diff := cmp.Diff([]proto.Failure{{Name: "diagnostic", GPUs: []int{2}}}, res.Failures()); diff != "" {
		t.Errorf("failures (-want +got):\n%s", diff)
	}
	if w := res.Tests[0].Results[2].Warnings; len(w) != 1 || !strings.Contains(w[0], "619.31 gigaflops") {
		t.Errorf("GPU 2's warnings %q", w)
	}
}

func TestParseStatuses(t *testing.T) {
	doc := func(summary, result string) string {
		return `{"DCGM Diagnostic": {"test_categories": [{"category": "Deployment", "tests": [{"name": "software",
			"results": [{"entity_group": "GPU", "entity_id": 0, "status": "` + result + `"}],
			"test_summary": {"status": "` + summary + `"}}]}]},
			"metadata": {"version": "4.2.3", "Driver Version Detected": "580.82.09"}}`
	}
	for _, tc := range []struct {
		summary, result string
		status          string
	}{
		{"Pass", "Pass", proto.DCGMPass},
		{"Pass", "Warn", proto.DCGMWarn},
		{"Skip", "Skip", proto.DCGMSkip},
		// The summary and the results are each enough to fail the test.
		{"Fail", "Pass", proto.DCGMFail},
		{"Pass", "Fail", proto.DCGMFail},
		// A status DCGM may add later is a failure, never a pass.
		{"Pass", "Inconclusive", proto.DCGMFail},
	} {
		res, err := Parse([]byte(doc(tc.summary, tc.result)), 1)
		if err != nil {
			t.Fatal(err)
		}
		// A GPU every test skipped was not tested: the run does not pass.
		if res.Tests[0].Status != tc.status || res.Passed != (tc.status == proto.DCGMPass || tc.status == proto.DCGMWarn) {
			t.Errorf("summary %s, result %s: %s, passed %v", tc.summary, tc.result, res.Tests[0].Status, res.Passed)
		}
		if res.DCGMVersion != "4.2.3" || res.DriverVersion != "580.82.09" {
			t.Errorf("versions %q %q", res.DCGMVersion, res.DriverVersion)
		}
	}
}

func TestParseRefuses(t *testing.T) {
	for name, doc := range map[string]string{
		"not JSON":      "Error: unable to connect to host engine",
		"another JSON":  `{"health": "ok"}`,
		"no test":       `{"DCGM Diagnostic": {"test_categories": []}}`,
		"runtime error": `{"DCGM GPU Diagnostic": {"runtime_error": "Couldn't find the NVVS executable", "version": "3.3.5"}}`,
		"bad gpu ids":   `{"DCGM GPU Diagnostic": {"test_categories": [{"tests": [{"name": "x", "results": [{"gpu_ids": "0,one", "status": "PASS"}]}]}]}}`,
	} {
		if _, err := Parse([]byte(doc), 1); err == nil {
			t.Errorf("%s: parsed", name)
		}
	}
}

// FuzzParse: dcgmi's output reaches the parser from the machine; whatever it prints,
// Parse answers an error or a result whose verdict agrees with its tests and GPUs.
func FuzzParse(f *testing.F) {
	for _, name := range []string{"dcgm3-pass.json", "dcgm3-fail.json", "dcgm33-fail.json", "dcgm4-pass.json", "dcgm4-fail.json"} {
		f.Add(recorded(f, name))
	}
	f.Add([]byte(`{"DCGM GPU Diagnostic": {"test_categories": [null, {"tests": [null, {"results": [null, {"gpu_ids": 3}]}]}]}}`))
	f.Fuzz(func(t *testing.T, out []byte) {
		res, err := Parse(out, 8)
		if err != nil {
			return
		}
		if len(res.Tests) == 0 {
			t.Fatal("a result without tests")
		}
		failed := false
		for _, tc := range res.Tests {
			if _, ok := rank[tc.Status]; !ok {
				t.Fatalf("status %q", tc.Status)
			}
			failed = failed || tc.Status == proto.DCGMFail
			for _, r := range tc.Results {
				if rank[r.Status] > rank[tc.Status] {
					t.Fatalf("test %q is %s with a result %s", tc.Name, tc.Status, r.Status)
				}
			}
		}
		if res.Passed != (!failed && len(res.Untested()) == 0) {
			t.Fatalf("passed %v with failed tests %v and untested GPUs %v", res.Passed, failed, res.Untested())
		}
		if b, _ := json.Marshal(res); len(b) > proto.MaxResultPayload {
			t.Fatalf("a result of %d bytes from %d bytes of output", len(b), len(out))
		}
	})
}

// TestParseBoundsWhatItKeeps: each GPU a result lists carries the result's warnings,
// so output that lists GPUs many times beside long warnings is refused before it grows.
// Before, 12 KiB listing GPU 0 2048 times beside 2048 warnings made 4 million warnings
// (880 MB), and a warning of 160 KiB on 32 GPUs an answer of 5 MiB, more than the
// registry reads of a signed result.
func TestParseBoundsWhatItKeeps(t *testing.T) {
	doc := func(ids, warnings string) []byte {
		return []byte(`{"DCGM GPU Diagnostic": {"test_categories": [{"tests": [{"name": "x", "results": [{"gpu_ids": "` + ids + `", "status": "PASS", "warnings": [` + warnings + `]}]}]}]}}`)
	}
	var all []string
	for i := range 32 {
		all = append(all, strconv.Itoa(i))
	}
	for name, tc := range map[string]struct {
		out  []byte
		says string
	}{
		"one GPU listed 2048 times": {doc(strings.Repeat("0,", 2048), strings.TrimSuffix(strings.Repeat(`"w",`, 2048), ",")), "GPU 0 twice"},
		"33 GPUs":                   {doc(strings.Join(all, ",")+",32", `"w"`), "more than the 32 GPUs"},
		"a long warning on 32 GPUs": {doc(strings.Join(all, ","), `"`+strings.Repeat("w", 160<<10)+`"`), "more than 4194304 bytes"},
	} {
		t.Run(name, func(t *testing.T) {
			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			_, err := Parse(tc.out, 0)
			runtime.ReadMemStats(&after)
			if err == nil || !strings.Contains(err.Error(), tc.says) {
				t.Errorf("parsed to %v; want an error saying %q", err, tc.says)
			}
			if n := after.TotalAlloc - before.TotalAlloc; n > 4*uint64(len(tc.out))+1<<20 {
				t.Errorf("parsing %d bytes allocated %d", len(tc.out), n)
			}
		})
	}
}

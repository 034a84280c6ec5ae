package proto

// DiagDCGM is the input of diag.dcgm: the DCGM diagnostic level, 1 (seconds, deployment
// checks) to 4 (hours, stress and memory tests); 0 is 1.
type DiagDCGM struct {
	Level int `json:"level,omitempty"`
}

// The statuses of a DCGM test and of each of its results, lower-case whatever DCGM
// version spelled them.
const (
	DCGMPass = "pass"
	DCGMFail = "fail"
	DCGMWarn = "warn"
	DCGMSkip = "skip"
)

// DCGMMaxGPUs is DCGM_MAX_NUM_DEVICES, the most GPUs DCGM 2 and later handle on one
// machine.
const DCGMMaxGPUs = 32

// DCGMResult is the answer of diag.dcgm: every test DCGM ran, with its result on each
// GPU (or other entity), and how many NVIDIA GPUs the agent found on PCI. Passed is true
// when no test failed on any entity and a test passed on every GPU (Untested).
type DCGMResult struct {
	Level         int        `json:"level"`
	DCGMVersion   string     `json:"dcgmVersion,omitempty"`
	DriverVersion string     `json:"driverVersion,omitempty"`
	GPUs          int        `json:"gpus,omitempty"`
	Tests         []DCGMTest `json:"tests"`
	Passed        bool       `json:"passed"`
}

// DCGMTest is one DCGM test: its category (Deployment, Hardware, Integration, Stress,
// ...), its name, its status (the worst of its results and DCGM's own summary) and its
// results.
type DCGMTest struct {
	Category string             `json:"category,omitempty"`
	Name     string             `json:"name"`
	Status   string             `json:"status"`
	Results  []DCGMEntityResult `json:"results"`
}

// DCGMEntityResult is a test's result on one entity: Entity is DCGM's entity group
// ("GPU" for a GPU; DCGM 4 also tests CPUs and switches) and ID its DCGM index.
type DCGMEntityResult struct {
	Entity   string   `json:"entity"`
	ID       int      `json:"id"`
	Status   string   `json:"status"`
	Warnings []string `json:"warnings,omitempty"`
	Info     []string `json:"info,omitempty"`
}

// Failures lists the tests that failed, each with the GPUs (DCGM indices) it failed
// on; a failure on no GPU in particular (a deployment check of the whole machine) has
// none. A status other than pass, warn and skip, on the test or on one of its results,
// is a failure: a result is judged on what it says of each GPU, not on its own verdict.
func (r DCGMResult) Failures() []Failure {
	var out []Failure
	for _, t := range r.Tests {
		failed := !dcgmOK(t.Status)
		f := Failure{Name: t.Name}
		for _, e := range t.Results {
			if !dcgmOK(e.Status) {
				failed = true
				if e.Entity == "GPU" {
					f.GPUs = append(f.GPUs, e.ID)
				}
			}
		}
		if failed {
			out = append(out, f)
		}
	}
	return out
}

// Untested lists the machine's GPUs no test passed on: DCGM's indices 0 to GPUs-1 (GPU
// 0 alone when the result does not say how many GPUs the machine has, at most
// DCGMMaxGPUs) without a pass or a warning in any test. DCGM numbers the GPUs its driver sees from 0, so a GPU on PCI
// that DCGM did not see (fallen off the bus, not bound to the driver) is the last index,
// with no result at all; a GPU every test skipped was not tested either.
func (r DCGMResult) Untested() []int {
	tested := map[int]bool{}
	for _, t := range r.Tests {
		for _, e := range t.Results {
			if e.Entity == "GPU" && (e.Status == DCGMPass || e.Status == DCGMWarn) {
				tested[e.ID] = true
			}
		}
	}
	var out []int
	for id := range min(max(r.GPUs, 1), DCGMMaxGPUs) {
		if !tested[id] {
			out = append(out, id)
		}
	}
	return out
}

// dcgmOK reports whether a status is one that does not fail a test.
func dcgmOK(status string) bool {
	return status == DCGMPass || status == DCGMWarn || status == DCGMSkip
}

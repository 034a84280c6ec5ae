package metal

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/better-compute/better-compute/proto"
	"github.com/better-compute/better-compute/registry/profile"
	"github.com/better-compute/better-compute/registry/store"
	"github.com/better-compute/better-compute/registry/store/etcdtest"
)

// largestProfile is testdata/gpu-host.json grown to the largest document a profile may
// be (proto.MaxProfileDocument, as stored: without insignificant white space), of text
// repeating fill: 32 steps after its own that never run (media.insert steps and their
// fallbacks, with URLs and when expressions as long as they may be; their when names a
// label no node has), and a driver config of the virtual-media concern, whose operations
// no step runs, taking the rest.
func largestProfile(t *testing.T, fill string) []byte {
	t.Helper()
	doc := gpuHostCompacted(t)
	end := strings.Index(doc, `],"acceptance"`)
	head, tail := doc[:end], doc[end:]

	pad := func(n int) string { return padded(fill, n) }
	// A when of four terms of 240 bytes' values: 988 bytes in canonical form, of the
	// 1024 an expression may take.
	term := "never='" + pad(240) + "'"
	when := strings.Join([]string{term, term, term, term}, ",")
	insert := `{"use":"media.insert","with":{"url":"https://images.example/` + pad(2048-len("https://images.example/")) + `"},"when":"` + when + `"`
	head += strings.Repeat(","+insert+`,"fallback":`+insert+"}}", 32)
	const drivers = `"drivers":{"virtual-media":{"driver":"redfish","config":{"pad":"`
	head = strings.Replace(head, `"target":"metal",`, `"target":"metal",`+drivers+pad(proto.MaxProfileDocument-len(head)-len(drivers)-len(`"}}},`)-len(tail))+`"}}},`, 1)
	return definedAtTheBound(t, head+tail)
}

// largestHostConfig is testdata/gpu-host.json with steps (each with a comma before it)
// after its own, grown to the largest document a profile may be, the growth all in its
// hostConfig: a sysctl unit of values of 4 KiB, the most one may take, repeating fill,
// as many as fit.
func largestHostConfig(t *testing.T, fill, steps string) []byte {
	t.Helper()
	doc := gpuHostCompacted(t)
	end := strings.Index(doc, `],"acceptance"`)
	doc = doc[:end] + steps + doc[end:]
	const at = `"hostConfig":{`
	cut := strings.Index(doc, at) + len(at)
	head, tail := doc[:cut]+`"sysctl":{`, `},`+doc[cut:]
	var values []string
	for i := 0; ; i++ {
		value := fmt.Sprintf(`"kernel.pad_%03d":"`, i)
		room := proto.MaxProfileDocument - len(head) - len(tail) - len(strings.Join(values, ",")) - len(value) - len(`"`)
		if len(values) > 0 {
			room-- // the comma before it
		}
		if room > 4096 {
			room = 4096
		}
		values = append(values, value+padded(fill, room)+`"`)
		if room < 4096 {
			break
		}
	}
	return definedAtTheBound(t, head+strings.Join(values, ",")+tail)
}

// gpuHostCompacted is testdata/gpu-host.json without insignificant white space.
func gpuHostCompacted(t *testing.T) string {
	t.Helper()
	raw, err := os.ReadFile("testdata/gpu-host.json")
	if err != nil {
		t.Fatal(err)
	}
	var compacted bytes.Buffer
	if err := json.Compact(&compacted, raw); err != nil {
		t.Fatal(err)
	}
	return compacted.String()
}

// padded is n bytes of fill repeated.
func padded(fill string, n int) string { return strings.Repeat(fill, n/len(fill)+1)[:n] }

// definedAtTheBound defines doc, which must take exactly proto.MaxProfileDocument bytes
// as stored, and returns its document.
func definedAtTheBound(t *testing.T, doc string) []byte {
	t.Helper()
	p, err := profile.Define([]byte(doc))
	if err != nil {
		t.Fatalf("the grown profile does not define: %v", err)
	}
	if got := len(p.Document()); got != proto.MaxProfileDocument {
		t.Fatalf("the grown profile's document takes %d bytes, want %d", got, proto.MaxProfileDocument)
	}
	return p.Document()
}

// TestDeployTheLargestProfileOnADefaultEtcdCluster: on a cluster of etcd's defaults
// (--max-request-bytes 1.5 MiB), a profile of the largest document a profile may be is
// stored and deployed, and its deploy runs to its end: the node is active and the
// version used. Once with text as it is, once with text of <, > and &, which JSON may
// write escaped in six bytes each. Before, the deploy wrote the document twice in one
// transaction (the version marked used, and the run's copy beside the rendered steps),
// and the second document was not even stored.
func TestDeployTheLargestProfileOnADefaultEtcdCluster(t *testing.T) {
	eachFillOnADefaultEtcdCluster(t, func(t *testing.T, h *harness, fill string) {
		node := h.enroll(map[string]string{"nvswitch": "true"})
		doc := largestProfile(t, fill)
		err := h.store.Update(func(tx *store.Tx) error {
			_, err := tx.CreateProfile(store.ProfileRecord{Tenant: "acme", ID: "ubuntu-24.04-gpu-host", Version: 1, Document: doc})
			return err
		})
		if err != nil {
			t.Fatalf("storing the largest profile: %v", err)
		}
		run, err := h.deployRecord(node, func(tx *store.Tx) (store.ProfileRecord, error) {
			rec, _, err := tx.Profile("acme", "ubuntu-24.04-gpu-host", 1)
			return rec, err
		})
		if err != nil {
			t.Fatalf("deploying the largest profile: %v", err)
		}
		run, n := h.end(run.ID)
		if run.State != store.RunSucceeded || n.State != store.NodeActive {
			t.Fatalf("run %s, node %s %+v", run.State, n.State, n.Failure)
		}
		var rec store.ProfileRecord
		h.store.View(func(tx *store.Tx) (err error) {
			rec, _, err = tx.Profile("acme", "ubuntu-24.04-gpu-host", 1)
			return err
		})
		if !rec.Used || !bytes.Equal(rec.Document, doc) {
			t.Errorf("the deployed version: used %t, its document the one stored %t", rec.Used, bytes.Equal(rec.Document, doc))
		}
	})
}

// TestDeployTheLargestHostConfigOnADefaultEtcdCluster: on a cluster of etcd's defaults,
// a profile of the largest document a profile may be, nearly all of it host
// configuration, deploys to its end, and the node's NodeSpec carries that host section;
// the node is released (its NodeSpec, at a new generation, without it) and deployed
// again, the section back at the next generation. Once with
// text as it is, once with text of <, > and &. Before, the end of the deploy wrote the
// host section twice in one transaction, in the node's record and in its NodeSpec (2 MB),
// which etcd refused, and the run stayed running.
func TestDeployTheLargestHostConfigOnADefaultEtcdCluster(t *testing.T) {
	eachFillOnADefaultEtcdCluster(t, func(t *testing.T, h *harness, fill string) {
		node := h.enroll(map[string]string{"nvswitch": "true"})
		doc := largestHostConfig(t, fill, "")
		p, err := profile.Define(doc)
		if err != nil {
			t.Fatal(err)
		}
		var sysctl json.RawMessage
		for _, u := range p.HostConfig() {
			if u.Name == "sysctl" {
				sysctl = u.Settings
			}
		}
		deploy := func(create bool) {
			t.Helper()
			run, err := h.deployRecord(node, func(tx *store.Tx) (store.ProfileRecord, error) {
				if create {
					return tx.CreateProfile(store.ProfileRecord{Tenant: "acme", ID: "ubuntu-24.04-gpu-host", Version: 1, Document: doc})
				}
				rec, _, err := tx.Profile("acme", "ubuntu-24.04-gpu-host", 1)
				return rec, err
			})
			if err != nil {
				t.Fatalf("deploying the profile: %v", err)
			}
			run, n := h.end(run.ID)
			if run.State != store.RunSucceeded || n.State != store.NodeActive {
				t.Fatalf("run %s %+v, node %s", run.State, run.Failure, n.State)
			}
		}
		// specHost is the node's NodeSpec's generation and its sysctl unit.
		specHost := func() (int64, string) {
			t.Helper()
			var spec proto.NodeSpec
			if err := h.store.View(func(tx *store.Tx) (err error) { spec, err = tx.NodeSpec(node); return err }); err != nil {
				t.Fatal(err)
			}
			for _, u := range spec.Host {
				if u.Unit == "sysctl" {
					return spec.Generation, string(u.Settings)
				}
			}
			return spec.Generation, ""
		}

		deploy(true)
		if gen, got := specHost(); gen != 1 || got != string(sysctl) {
			t.Fatalf("the NodeSpec after the deploy: generation %d, its sysctl unit of %d bytes the profile's %t", gen, len(got), got == string(sysctl))
		}
		release, _, err := h.act(node, Release, Options{})
		if err != nil {
			t.Fatal(err)
		}
		if _, n := h.end(release.ID); n.State != store.NodeReady || n.Host != nil {
			t.Fatalf("released: %s, host section of %d units", n.State, len(n.Host))
		}
		if gen, got := specHost(); gen != 2 || got != "" {
			t.Fatalf("the NodeSpec after the release: generation %d, its sysctl unit of %d bytes", gen, len(got))
		}
		deploy(false)
		if gen, got := specHost(); gen != 3 || got != string(sysctl) {
			t.Fatalf("the NodeSpec after the second deploy: generation %d, its sysctl unit the profile's %t", gen, got == string(sysctl))
		}
	})
}

// eachFillOnADefaultEtcdCluster runs fn as a subtest for text as it is ("plain") and for
// text of <, > and & ("html"), which JSON may write escaped in six bytes each, each over
// its own prefix of a cluster of etcd's defaults, checked at start (CheckLimits).
func eachFillOnADefaultEtcdCluster(t *testing.T, fn func(t *testing.T, h *harness, fill string)) {
	cluster := etcdtest.Start(t)
	for name, fill := range map[string]string{"plain": "abcdefgh", "html": "<&>"} {
		t.Run(name, func(t *testing.T) {
			prefix := etcdtest.Prefix(t)
			fn(t, newHarnessOn(t, func(opts store.Options) (*store.Store, error) {
				return store.OpenEtcd(store.EtcdConfig{Endpoints: cluster.Endpoints, Prefix: prefix, CheckLimits: true}, opts)
			}), fill)
		})
	}
}

// TestADeployAtItsBoundEndsOnADefaultEtcdCluster: on a cluster of etcd's defaults, a
// deploy of a profile of the largest document a profile may be, nearly all of it host
// configuration, whose steps answer results of proto.MaxStepResult until its run can
// keep no more, ends active with its host section: the results the run cannot keep
// beside what its end writes fail their steps (onFailure continue) with INVALID_INPUT
// at the result, reason too-large, and the run's end, its record and the node's of
// nearly 1 MiB in one transaction, fits the cluster. Before, the run kept results up to
// store.MaxRunRecord (896 KiB), and its end, beside the node's host section, passed the
// cluster's 1.5 MiB: the run failed at its end with INTERNAL, naming the flag to raise.
func TestADeployAtItsBoundEndsOnADefaultEtcdCluster(t *testing.T) {
	const answering = 8
	eachFillOnADefaultEtcdCluster(t, func(t *testing.T, h *harness, fill string) {
		result := json.RawMessage(`{"state":"on","pad":"` + strings.Repeat("r", proto.MaxStepResult-len(`{"state":"on","pad":""}`)) + `"}`)
		h.machine.answers[proto.CommandGetPower] = func(json.RawMessage) (json.RawMessage, error) { return result, nil }
		node := h.enroll(map[string]string{"nvswitch": "true"})
		doc := largestHostConfig(t, fill, strings.Repeat(`,{"use":"power.getPower","on":"site","onFailure":"continue"}`, answering))
		run, err := h.deployRecord(node, func(tx *store.Tx) (store.ProfileRecord, error) {
			return tx.CreateProfile(store.ProfileRecord{Tenant: "acme", ID: "ubuntu-24.04-gpu-host", Version: 1, Document: doc})
		})
		if err != nil {
			t.Fatalf("deploying the profile: %v", err)
		}
		run, n := h.end(run.ID)
		if run.State != store.RunSucceeded || n.State != store.NodeActive || len(n.Host) == 0 {
			t.Fatalf("run %s %+v, node %s with %d host units; want the run succeeded and the node active with its host section", run.State, run.Failure, n.State, len(n.Host))
		}
		kept, refused := 0, 0
		for _, st := range run.Steps {
			if st.Use != proto.CommandGetPower {
				continue
			}
			switch {
			case st.State == store.StepSucceeded && bytes.Equal(st.Result, result):
				kept++
			case st.State == store.StepFailed && st.Error.Code == proto.InvalidInput && st.Error.Details.Path == st.Path()+".result" && st.Error.Details.Reason == proto.ReasonTooLarge:
				refused++
			default:
				t.Errorf("%s %s: %v, want its result kept or refused INVALID_INPUT at %s.result, reason too-large", st.Path(), st.State, st.Error, st.Path())
			}
		}
		if kept == 0 || refused == 0 {
			t.Errorf("the run kept %d results and refused %d: want it at its bound, some of each", kept, refused)
		}
		runRec, _ := proto.Marshal(run)
		nodeRec, _ := proto.Marshal(n)
		host, _ := proto.Marshal(n.Host)
		t.Logf("the run kept %d results of %d bytes: its record %d bytes (EndBytes %d), the node's %d, its host section %d", kept, len(result), len(runRec), run.EndBytes, len(nodeRec), len(host))
	})
}

package cli

import (
	"encoding/json"
	"encoding/pem"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"

	flag "github.com/spf13/pflag"

	"github.com/better-compute/better-compute/proto"
	"github.com/better-compute/better-compute/registry/api"
)

// The files `workflows attestation` writes.
const (
	attPayload     = "payload.json"
	attMessage     = "message"
	attSignature   = "signature"
	attCertificate = "certificate.pem"
)

var attestationCommands = []command{{
	path:    "workflows attestation",
	usage:   "ID --step STEP --out DIR [--force] [--tenant T]",
	summary: "write a step's node-signed result (payload, signature, the agent's certificate) to DIR and print the openssl commands that verify it offline",
	long:    "write a step's node-signed result into DIR (`payload.json`, `message`, `signature`, `certificate.pem`) and print the openssl commands that verify it offline against the registry's agent CA; STEP as `workflows get` names it (`steps[4]`) or N for `steps[N]` (docs/nodes.md). Files DIR holds already are refused unless `--force`",
	nargs:   1,
	define: func(fs *flag.FlagSet) func(x *exec) error {
		tenant := tenantFlag(fs)
		step := fs.String("step", "", "the `STEP` as workflows get names it (steps[4], cleanup[0]), or N for steps[N] (required)")
		out := fs.String("out", "", "the directory to write the files to; made if missing (required)")
		force := fs.Bool("force", false, "replace the files when the directory holds them (by default they are refused)")
		return func(x *exec) error {
			want := *step
			if _, err := strconv.Atoi(want); err == nil {
				want = "steps[" + want + "]"
			}
			var run api.WorkflowView
			if err := x.call("workflows.get", api.GetWorkflowRequest{TenantID: *tenant, ID: x.args[0]}, &run); err != nil {
				return err
			}
			i := -1
			for j, s := range run.Steps {
				if s.Path() == want {
					i = j
				}
			}
			if i < 0 {
				return proto.Errorf(proto.NotFound, "workflow %s has no step %s: `workflows get %s` lists them", run.ID, want, run.ID).WithPath("step")
			}
			s := run.Steps[i]
			sr := s.Attestation()
			if sr == nil {
				return proto.Errorf(proto.NotFound, "step %s (%s) of workflow %s has no node-signed result", want, s.Use, run.ID).WithPath("step")
			}
			files, err := writeAttestation(*out, sr, *force)
			if err != nil {
				return err
			}
			v := attestationView{WorkflowID: run.ID, Step: want, Use: s.Use, Algorithm: sr.Algorithm, Files: files, Attested: attestedOf(s)}
			x.print(v, func(w *tabwriter.Writer) { attestationText(w, v) })
			return nil
		}
	},
}}

// attestationView is what `workflows attestation` prints with --format json.
type attestationView struct {
	WorkflowID string            `json:"workflowId"`
	Step       string            `json:"step"`
	Use        string            `json:"use"`
	Algorithm  string            `json:"algorithm"`
	Attested   *bool             `json:"attested,omitempty"`
	Files      map[string]string `json:"files"`
}

// writeAttestation writes sr's payload, the signed message, the signature and the
// certificate into dir, and returns their paths by role. Files dir holds already are
// refused, before any is written, unless force.
func writeAttestation(dir string, sr *proto.SignedResult, force bool) (map[string]string, error) {
	if len(sr.Certificate) == 0 {
		return nil, proto.Errorf(proto.InvalidState, "the signed result is stored without its certificate: the registry refused it before it had one (see the step's reason)")
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, proto.Errorf(proto.InvalidInput, "--out %s: %v", dir, unwrapPath(err)).WithPath("--out")
	}
	files := map[string][]byte{
		attPayload:     sr.Payload,
		attMessage:     proto.SignedMessage(sr.Payload),
		attSignature:   sr.Signature,
		attCertificate: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: sr.Certificate}),
	}
	for name := range files {
		if err := checkOut(filepath.Join(dir, name), force); err != nil {
			return nil, err
		}
	}
	paths := map[string]string{}
	for name, data := range files {
		p := filepath.Join(dir, name)
		if err := writeOut(p, data, force); err != nil {
			return nil, err
		}
		paths[strings.TrimSuffix(strings.TrimSuffix(name, ".json"), ".pem")] = p
	}
	return paths, nil
}

// attestedOf is the registry's verdict on a step's signed result, if it gives one.
func attestedOf(s api.RunStep) *bool {
	var r struct {
		Attested *bool `json:"attested"`
	}
	if json.Unmarshal(s.Result, &r) != nil {
		return nil
	}
	return r.Attested
}

// attestationText lists the files and the openssl commands that verify them.
func attestationText(w *tabwriter.Writer, v attestationView) {
	fmt.Fprintf(w, "%s %s of workflow %s, signed with %s", v.Step, v.Use, v.WorkflowID, v.Algorithm)
	if v.Attested != nil {
		fmt.Fprintf(w, "; the registry found it attested: %t", *v.Attested)
	}
	fmt.Fprintln(w)
	names := make([]string, 0, len(v.Files))
	for n := range v.Files {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintf(w, "  %s\t%s\n", n, v.Files[n])
	}
	dir := filepath.Dir(v.Files["payload"])
	fmt.Fprintf(w, "\nverify offline, in bash (agent-ca.crt is DATA_DIR/pki/agent-ca.crt of the registry):\n  cd %s\n", dir)
	for _, c := range verifyCommands(v.Algorithm) {
		fmt.Fprintf(w, "  %s\n", c)
	}
}

// verifyCommands are the openssl commands that verify the files of an attestation
// signed with alg, run in their directory (docs/agent-plane.md#node-signed-results).
func verifyCommands(alg string) []string {
	sig := "openssl dgst -sha256 -verify agent-pub.pem -signature signature message"
	if alg == proto.SigEd25519 {
		sig = "openssl pkeyutl -verify -pubin -inkey agent-pub.pem -rawin -in message -sigfile signature"
	}
	return []string{
		"cmp message <(printf 'bc-result-v1\\n'; cat payload.json)",
		"openssl x509 -in certificate.pem -pubkey -noout > agent-pub.pem",
		sig,
		"openssl verify -CAfile agent-ca.crt -attime \"$(date -d \"$(jq -r .time payload.json)\" +%s)\" certificate.pem",
		"openssl x509 -in certificate.pem -noout -subject",
	}
}

// attestationDetail is how `workflows get` shows a step with a node-signed result: the
// registry's verdict, and why not when it is not attested.
func attestationDetail(s api.RunStep) string {
	var r struct {
		Attested *bool  `json:"attested"`
		Reason   string `json:"reason"`
	}
	if json.Unmarshal(s.Result, &r) != nil || r.Attested == nil {
		return ""
	}
	if *r.Attested {
		return "attested"
	}
	return "not attested: " + r.Reason
}

// wipeDetail shows the last disk.wipe of a node's last workflow.
func wipeDetail(w *tabwriter.Writer, wp *api.NodeWipe) {
	if wp == nil {
		return
	}
	verdict := "attested"
	if !wp.Attested {
		verdict = "NOT attested: " + wp.Reason
	}
	fmt.Fprintf(w, "\nlast disk wipe (%s, %s of workflow %s): %s\n", wp.Mode, wp.Step, wp.WorkflowID, verdict)
}

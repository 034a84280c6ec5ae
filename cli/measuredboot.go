package cli

import (
	"fmt"
	flag "github.com/spf13/pflag"
	"text/tabwriter"
	"time"

	"github.com/better-compute/better-compute/registry/api"
)

var measuredBootCommands = []command{{
	path:    "nodes attestation",
	usage:   "ID [--tenant T]",
	summary: "show a node's measured boot: its enrolled TPM, its baseline, and its last verified boot's PCRs, events and verdict",
	nargs:   1,
	define: func(fs *flag.FlagSet) func(x *exec) error {
		tenant := tenantFlag(fs)
		return func(x *exec) error {
			var out api.NodeAttestation
			if err := x.call("metal.attestation", api.NodeKey{TenantID: *tenant, NodeID: x.args[0]}, &out); err != nil {
				return err
			}
			x.print(out, func(w *tabwriter.Writer) { attestedBootText(w, out) })
			return nil
		}
	},
}, {
	path:    "nodes attest accept",
	usage:   "ID --boot DIGEST [--tenant T]",
	summary: "make a node's last verified boot, named by the digest `nodes attestation` shows, its measured-boot baseline, which later boots must match",
	long: "make a node's last verified boot its measured-boot baseline, which later boots must match. " +
		"`--boot` names that boot by the digest `nodes attestation` shows (`digest` under `last boot`; `lastBoot.digest` in JSON): " +
		"a node verified again since is refused INVALID_STATE, reason boot-changed, and keeps its baseline (docs/attestation.md)",
	nargs: 1,
	define: func(fs *flag.FlagSet) func(x *exec) error {
		tenant := tenantFlag(fs)
		boot := fs.String("boot", "", "the `DIGEST` of the boot accepted, sha256:..., as nodes attestation shows it (required)")
		return func(x *exec) error {
			var out api.NodeAttestation
			if err := x.call("metal.acceptBoot", api.AcceptBootRequest{TenantID: *tenant, NodeID: x.args[0], Boot: *boot}, &out); err != nil {
				return err
			}
			x.print(out, func(w *tabwriter.Writer) { attestedBootText(w, out) })
			return nil
		}
	},
}}

// attestedBootText prints a node's measured boot: the TPM, the baseline's PCRs, the last
// boot's verdict, what differed, its PCRs and events.
func attestedBootText(w *tabwriter.Writer, a api.NodeAttestation) {
	if !a.Enrolled {
		fmt.Fprintf(w, "node %s: no TPM enrolled (its pool's measured-boot policy is off, or no ramdisk has run since it was set)\n", a.NodeID)
		return
	}
	fmt.Fprintf(w, "node\t%s\n", a.NodeID)
	fmt.Fprintf(w, "tpm\tEK sha256:%s, enrolled %s, EK certificate %t\n", a.EKSHA256, a.EnrolledAt.Format(time.RFC3339), a.EKCertificate)
	if b := a.Baseline; b != nil {
		by := "the first verified boot (tofu)"
		if b.AcceptedBy != "" {
			by = "accepted by " + b.AcceptedBy
		}
		fmt.Fprintf(w, "baseline\tset %s, %s\n", b.SetAt.Format(time.RFC3339), by)
		for _, p := range b.PCRs {
			fmt.Fprintf(w, "  PCR %d\t%s\n", p.Index, p.SHA256)
		}
	}
	l := a.LastBoot
	if l == nil {
		fmt.Fprintln(w, "last boot\tnone verified yet")
		return
	}
	fmt.Fprintf(w, "last boot\t%s: %s (policy %s)\n", l.VerifiedAt.Format(time.RFC3339), l.Verdict, l.Mode)
	fmt.Fprintf(w, "  digest\t%s\n", l.Digest)
	for _, m := range l.Mismatches {
		fmt.Fprintf(w, "  differs\t%s\n", m)
	}
	sb := "off"
	if l.SecureBoot.Enabled {
		sb = "on"
	}
	if l.SecureBoot.Problem != "" {
		sb = "unreadable: " + l.SecureBoot.Problem
	}
	fmt.Fprintf(w, "secure boot\t%s\n", sb)
	for _, s := range l.SecureBoot.Authorities {
		fmt.Fprintf(w, "  signed by\t%s\n", s)
	}
	for _, p := range l.PCRs {
		fmt.Fprintf(w, "  PCR %d\t%s\n", p.Index, p.SHA256)
	}
	fmt.Fprintln(w, "events\tPCR\tTYPE\tSHA256\tWHAT")
	for _, e := range l.Events {
		fmt.Fprintf(w, "\t%d\t%s\t%s\t%s\n", e.PCR, e.Type, e.SHA256, e.Description)
	}
}

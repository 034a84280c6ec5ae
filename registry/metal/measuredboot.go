package metal

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/better-compute/better-compute/proto"
	"github.com/better-compute/better-compute/registry/measuredboot"
	"github.com/better-compute/better-compute/registry/profile"
	"github.com/better-compute/better-compute/registry/store"
	"github.com/better-compute/better-compute/registry/workflow"
)

// checkMeasuredBootPolicy refuses a mode it does not know, a PCR outside 0-23, and golden
// values that are not one SHA-256 value in hex for each compared PCR. A golden key is the
// PCR's index as strconv.Itoa writes it: "04" or "+4" beside "4" would give PCR 4 two
// values, and a boot would be compared with whichever the map yields first.
func checkMeasuredBootPolicy(p *store.MeasuredBootPolicy) error {
	if p == nil {
		return nil
	}
	if p.Mode != "" && !slices.Contains(proto.MeasuredBootModes, p.Mode) {
		return proto.Errorf(proto.InvalidInput, "measured-boot mode %q is none of %s", p.Mode, strings.Join(proto.MeasuredBootModes, ", ")).WithPath("policy.measuredBoot.mode")
	}
	for i, pcr := range p.PCRs {
		if pcr < 0 || pcr > 23 {
			return proto.Errorf(proto.InvalidInput, "PCR %d: a TPM's PCRs are 0 to 23", pcr).WithPath(fmt.Sprintf("policy.measuredBoot.pcrs[%d]", i))
		}
	}
	if p.Mode != proto.MeasuredBootGolden {
		if len(p.Golden) > 0 {
			return proto.Errorf(proto.InvalidInput, "golden values are for mode golden, not %q: drop them or set mode golden", p.Mode).WithPath("policy.measuredBoot.golden")
		}
		return nil
	}
	pcrs := bootPCRs(p)
	for k, v := range p.Golden {
		path := "policy.measuredBoot.golden." + k
		idx, err := strconv.Atoi(k)
		if err != nil || k != strconv.Itoa(idx) || !slices.Contains(pcrs, idx) {
			return proto.Errorf(proto.InvalidInput, "golden value for %q: a key is the index of a compared PCR in decimal, without sign or leading zero (%v)", k, pcrs).WithPath(path)
		}
		if b, err := hex.DecodeString(v); err != nil || len(b) != 32 {
			return proto.Errorf(proto.InvalidInput, "golden value of PCR %s is not a SHA-256 value in hex (64 hex digits)", k).WithPath(path)
		}
	}
	for _, pcr := range pcrs {
		if _, ok := p.Golden[strconv.Itoa(pcr)]; !ok {
			return proto.Errorf(proto.InvalidInput, "mode golden compares PCR %d and has no golden value for it: give one, or leave it out of pcrs", pcr).WithPath("policy.measuredBoot.golden")
		}
	}
	return nil
}

func bootPCRs(p *store.MeasuredBootPolicy) []int {
	if p == nil || len(p.PCRs) == 0 {
		return proto.DefaultBootPCRs
	}
	return p.PCRs
}

func bootMode(p *store.MeasuredBootPolicy) string {
	if p == nil || p.Mode == "" {
		return proto.MeasuredBootOff
	}
	return p.Mode
}

// measuredBootState is what an attestation reads of the store.
func (s *Service) measuredBootState(node store.Node) (policy *store.MeasuredBootPolicy, rec store.NodeTPM, enrolled bool, err error) {
	err = s.cfg.Store.View(func(tx *store.Tx) error {
		pool, err := tx.Pool(node.Tenant, node.Pool)
		if err != nil {
			return err
		}
		policy = pool.Policy.MeasuredBoot
		rec, enrolled, err = tx.NodeTPM(node.ID)
		return err
	})
	return policy, rec, enrolled, err
}

// enrollTPM asks the ramdisk for its TPM's EK and a new AK, proves by activation of a
// credential that the AK lives beside the EK, and records both on the node.
func (s *Service) enrollTPM(ctx context.Context, a *workflow.Attempt) (store.NodeTPM, error) {
	raw, err := a.Relay(ctx, profile.Ramdisk, "tpm-enroll", proto.CommandTPMEnroll, json.RawMessage(`{}`))
	if err != nil {
		return store.NodeTPM{}, err
	}
	var e proto.TPMEnrollResult
	if err := json.Unmarshal(raw, &e); err != nil {
		return store.NodeTPM{}, proto.Errorf(proto.DriverError, "the ramdisk's answer to tpm.enroll does not decode: %v", err).WithReason(proto.ReasonActivation)
	}
	// The credential is sealed around a new secret each time it is made; the command
	// keeps the secret's digest (never sent), so that an attempt resumed after a restart
	// relays the credential it sent before and checks the answer against its secret.
	sent, raw, err := a.RelayMade(ctx, profile.Ramdisk, "tpm-activate", proto.CommandTPMActivate, func() (workflow.CommandInput, error) {
		secret, in, err := measuredboot.Challenge(e)
		if err != nil {
			return workflow.CommandInput{}, err
		}
		digest := sha256.Sum256(secret)
		return workflow.CommandInput{Payload: mustJSON(in), Kept: mustJSON(digest[:])}, nil
	})
	if err != nil {
		return store.NodeTPM{}, err
	}
	var want []byte
	if err := json.Unmarshal(sent.Kept, &want); err != nil || len(want) != sha256.Size {
		return store.NodeTPM{}, proto.Errorf(proto.InvalidState, "the tpm.activate this attempt relayed keeps no digest of its credential's secret (an earlier registry relayed it), so its answer cannot be checked: retry the step, whose next try enrolls the TPM again").WithReason(proto.ReasonActivation)
	}
	var out proto.TPMActivateResult
	decodeErr := json.Unmarshal(raw, &out)
	if got := sha256.Sum256(out.Secret); decodeErr != nil || subtle.ConstantTimeCompare(got[:], want) != 1 {
		return store.NodeTPM{}, proto.Errorf(proto.DriverError, "the machine's TPM did not activate the credential made for its EK and AK: the AK is not proven to live in that TPM").WithReason(proto.ReasonActivation)
	}
	rec := store.NodeTPM{Node: a.Node.ID, EKPublic: e.EKPublic, EKCertificate: e.EKCertificate, AKPublic: e.AKPublic, AKBlob: e.AKBlob}
	err = a.Update(func(tx *store.Tx) error {
		if _, ok, err := tx.NodeTPM(a.Node.ID); err != nil || ok {
			return err
		}
		if err := ekEnrolledElsewhere(tx, a.Node, e.EKPublic); err != nil {
			return err
		}
		return tx.PutNodeTPM(rec)
	})
	if err != nil {
		if proto.AsError(err).Details.Reason == proto.ReasonEKEnrolled {
			s.cfg.Log.Warn("measured boot: TPM refused, its EK is enrolled for another node", "node", a.Node.ID, "err", err)
		}
		return store.NodeTPM{}, err
	}
	s.cfg.Log.Info("measured boot: TPM enrolled", "node", a.Node.ID, "ekCertificate", len(e.EKCertificate) > 0)
	_, rec, _, err = s.measuredBootState(a.Node)
	return rec, err
}

// ekEnrolledElsewhere refuses to enroll the TPM of endorsement key ek for node when it is
// enrolled for another node: one TPM is one machine's, so a second node presenting it is
// that machine booted under another node's identity (a ramdisk boot entry of the second
// node read off the network and booted on the first machine) or a record gone wrong,
// and trusting it would attest one machine's boots as two machines'. The other node is
// named to its own tenant only: another tenant learns no node id.
func ekEnrolledElsewhere(tx *store.Tx, node store.Node, ek []byte) error {
	other := tx.TPMEnrolledFor(ek)
	if other == "" || other == node.ID {
		return nil
	}
	whose := "a node of another tenant"
	if o, err := tx.Node(other); err == nil && o.Tenant == node.Tenant {
		whose = "node " + other
	}
	return proto.Errorf(proto.InvalidState, "the TPM this machine presents is enrolled for %s already (its endorsement key): one TPM is one machine's, so node %s is not enrolled with it; boot node %s's own machine, whose identity is its MACs and product UUID",
		whose, node.ID, node.ID).WithReason(proto.ReasonEKEnrolled)
}

// attestBoot is attest.boot: the measured-boot attestation of the pool's policy (skipped
// when it is off).
func (s *Service) attestBoot(ctx context.Context, a *workflow.Attempt) (json.RawMessage, error) {
	res, err := s.attest(ctx, a)
	if err != nil {
		return nil, err
	}
	if res == nil {
		return nil, workflow.Skip(fmt.Sprintf("pool %s's measured-boot policy is off", a.Node.Pool))
	}
	return mustJSON(res), nil
}

// attest runs the pool's measured-boot policy on the node's ramdisk: enrollment where the
// node has none, a quote of the policy's PCRs (and 7) over a fresh nonce with the event
// log, verified with the node's AK and replayed, then the policy's verdict, recorded on
// the node. A boot that differs under tofu or golden is DRIVER_ERROR with the reason
// measurement-mismatch. Policy off: nil, nothing asked.
func (s *Service) attest(ctx context.Context, a *workflow.Attempt) (*proto.AttestBootResult, error) {
	policy, rec, enrolled, err := s.measuredBootState(a.Node)
	if err != nil {
		return nil, err
	}
	mode := bootMode(policy)
	if mode == proto.MeasuredBootOff {
		return nil, nil
	}
	if !enrolled {
		if rec, err = s.enrollTPM(ctx, a); err != nil {
			return nil, err
		}
	}
	pcrs := bootPCRs(policy)
	// A new nonce each time the quote is asked for; an attempt resumed after a restart
	// asks with the nonce it sent before, and the quote is verified over that one.
	sent, raw, err := a.RelayMade(ctx, profile.Ramdisk, "tpm-quote", proto.CommandTPMQuote, func() (workflow.CommandInput, error) {
		nonce := make([]byte, 32)
		_, err := rand.Read(nonce)
		return workflow.CommandInput{Payload: mustJSON(proto.TPMQuote{AKBlob: rec.AKBlob, Nonce: nonce, PCRs: measuredboot.QuotedPCRs(pcrs)})}, err
	})
	if err != nil {
		return nil, err
	}
	var asked proto.TPMQuote
	if err := json.Unmarshal(sent.Payload, &asked); err != nil {
		return nil, proto.Errorf(proto.Internal, "the tpm.quote this attempt relayed does not decode: %v", err)
	}
	var q proto.TPMQuoteResult
	if err := json.Unmarshal(raw, &q); err != nil {
		return nil, proto.Errorf(proto.DriverError, "the ramdisk's answer to tpm.quote does not decode: %v", err).WithReason(proto.ReasonQuote)
	}
	boot, err := measuredboot.Verify(rec.AKPublic, asked.Nonce, pcrs, q)
	if err != nil {
		s.cfg.Log.Warn("measured boot: quote refused", "node", a.Node.ID, "err", err)
		return nil, err
	}
	res := &proto.AttestBootResult{Mode: mode, Boot: boot, VerifiedAt: s.cfg.Clock.Now().UTC()}
	err = a.Update(func(tx *store.Tx) error {
		cur, _, err := tx.NodeTPM(a.Node.ID)
		if err != nil {
			return err
		}
		switch {
		case mode == proto.MeasuredBootGolden:
			res.Mismatches = measuredboot.Compare(pcrs, goldenValues(policy), nil, boot)
		case cur.Baseline != nil:
			res.Mismatches = measuredboot.Compare(pcrs, cur.Baseline.PCRs, cur.Baseline.Events, boot)
		}
		switch {
		case mode == proto.MeasuredBootTOFU && cur.Baseline == nil:
			res.Verdict = proto.VerdictBaseline
			cur.Baseline = &store.BootBaseline{PCRs: boot.PCRs, Events: boot.Events, SetAt: res.VerifiedAt}
		case len(res.Mismatches) > 0:
			res.Verdict = proto.VerdictMismatch
		case mode == proto.MeasuredBootRecord && cur.Baseline == nil:
			res.Verdict = proto.VerdictRecorded
		default:
			res.Verdict = proto.VerdictMatch
		}
		cur.Last = res
		return tx.PutNodeTPM(cur)
	})
	if err != nil {
		return nil, err
	}
	s.cfg.Log.Info("measured boot: boot verified", "node", a.Node.ID, "mode", mode, "verdict", res.Verdict)
	if res.Verdict == proto.VerdictMismatch && mode != proto.MeasuredBootRecord {
		return nil, proto.Errorf(proto.DriverError, "the machine's boot differs from what pool %s's measured-boot policy (%s) expects: %s. If the change is expected, accept this boot as the node's baseline with `nodes attest accept %s --boot %s`",
			a.Node.Pool, mode, strings.Join(res.Mismatches, "; "), a.Node.ID, BootDigest(boot)).WithReason(proto.ReasonMeasurementMismatch)
	}
	return res, nil
}

func goldenValues(p *store.MeasuredBootPolicy) []proto.PCRValue {
	var out []proto.PCRValue
	for k, v := range p.Golden {
		idx, _ := strconv.Atoi(k)
		b, _ := hex.DecodeString(v)
		out = append(out, proto.PCRValue{Index: idx, Digest: b})
	}
	return out
}

// BootDigest names a verified boot for AcceptBoot, as metal.attestation shows it:
// "sha256:" and the SHA-256, in lower-case hex, of the boot's PCR values, a line
// "INDEX:VALUE\n" each (VALUE in lower-case hex) in the order of their index. It is made
// of what an accept writes into the baseline and later boots are compared with, so two
// boots of one digest make the same baseline; the boot's verifiedAt would not name one
// boot, being the clock of whichever replica verified it (replicas' clocks disagree, and a
// clock stepped back repeats a time).
func BootDigest(b proto.MeasuredBoot) string {
	pcrs := slices.SortedFunc(slices.Values(b.PCRs), func(x, y proto.PCRValue) int { return x.Index - y.Index })
	h := sha256.New()
	for _, p := range pcrs {
		fmt.Fprintf(h, "%d:%x\n", p.Index, p.Digest)
	}
	return "sha256:" + hex.EncodeToString(h.Sum(nil))
}

// AcceptBoot makes the node's last verified boot its baseline: what later boots must
// match under tofu, and what record compares with. boot names the boot accepted, its
// BootDigest as the operator read it: it must be the last boot's, or the accept is
// INVALID_STATE (reason boot-changed) and changes nothing, as a boot verified since the
// operator looked (another kernel, another boot loader) would otherwise become the
// baseline unseen. A boot that is not a digest is INVALID_INPUT at boot; a node without
// a verified boot is INVALID_STATE.
func AcceptBoot(tx *store.Tx, node, boot, by string) (store.NodeTPM, error) {
	digits, isDigest := strings.CutPrefix(boot, "sha256:")
	if _, err := hex.DecodeString(digits); !isDigest || err != nil || len(digits) != 2*sha256.Size || strings.ToLower(digits) != digits {
		return store.NodeTPM{}, proto.Errorf(proto.InvalidInput, "boot is not the digest of a boot (sha256: and 64 lower-case hex digits): give the last boot's, as `nodes attestation %s` shows it", node).WithPath("boot")
	}
	rec, ok, err := tx.NodeTPM(node)
	if err != nil {
		return rec, err
	}
	if !ok || rec.Last == nil {
		return rec, proto.Errorf(proto.InvalidState, "node %s has no verified boot to accept: its pool's measured-boot policy must be on and a deploy (or attest.boot) run first", node)
	}
	if last := BootDigest(rec.Last.Boot); last != boot {
		return rec, proto.Errorf(proto.InvalidState, "node %s's last verified boot is %s (verified %s), not %s: the node booted again since, and its baseline is unchanged; look again with `nodes attestation %s` and accept the boot it shows if it is expected",
			node, last, rec.Last.VerifiedAt.Format(time.RFC3339Nano), boot, node).WithPath("boot").WithReason(proto.ReasonBootChanged)
	}
	rec.Baseline = &store.BootBaseline{PCRs: rec.Last.Boot.PCRs, Events: rec.Last.Boot.Events, SetAt: tx.Now(), AcceptedBy: by}
	return rec, tx.PutNodeTPM(rec)
}

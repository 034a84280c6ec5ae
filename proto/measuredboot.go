package proto

import "time"

// Measured boot (docs/attestation.md): the machine's TPM 2.0 is enrolled at first
// contact, and before deploy.image the registry has the ramdisk quote its boot PCRs over a
// fresh nonce and send the event log; the registry verifies the quote with the node's
// attestation key (AK), replays the log against the PCRs and checks the pool's policy.

// The commands the registry relays to a ramdisk for measured boot. They are not profile
// steps: attest.boot (and deploy.deploy, when the pool's policy is not off) relays them.
const (
	// CommandTPMEnroll asks the ramdisk for its TPM's endorsement key and a new
	// attestation key (TPMEnrollResult).
	CommandTPMEnroll = "tpm.enroll"
	// CommandTPMActivate has the ramdisk's TPM decrypt a credential made for the AK and
	// the EK (TPMActivate, TPMActivateResult): only the TPM holding both can.
	CommandTPMActivate = "tpm.activate"
	// CommandTPMQuote asks for a quote of PCRs over a nonce, the PCRs and the event log
	// (TPMQuote, TPMQuoteResult).
	CommandTPMQuote = "tpm.quote"
	// StepAttestBoot is the step the registry runs: enrollment where the node has none,
	// then a verified quote checked against the pool's measured-boot policy.
	StepAttestBoot = "attest.boot"
)

// The measured-boot policies of a pool (policy.measuredBoot.mode).
const (
	// MeasuredBootOff: no quote is asked (the default).
	MeasuredBootOff = "off"
	// MeasuredBootRecord: quotes are verified and recorded, a difference never refuses.
	MeasuredBootRecord = "record"
	// MeasuredBootTOFU: the first verified boot's measurements become the node's
	// baseline; later boots must match it.
	MeasuredBootTOFU = "tofu"
	// MeasuredBootGolden: boots must match the PCR values the operator gave.
	MeasuredBootGolden = "golden"
)

// MeasuredBootModes lists the policies.
var MeasuredBootModes = []string{MeasuredBootOff, MeasuredBootRecord, MeasuredBootTOFU, MeasuredBootGolden}

// DefaultBootPCRs are the PCRs a policy checks when it names none: firmware (0), option
// ROMs and drivers (2), boot manager, boot loader and kernel (4), Secure Boot state and
// the keys that verified the chain (7).
var DefaultBootPCRs = []int{0, 2, 4, 7}

// MaxEventLog bounds the event log a registry reads (a real one is under 100 KiB).
const MaxEventLog = 1 << 20

// TPMEnrollResult is the answer to tpm.enroll.
type TPMEnrollResult struct {
	// EKPublic is the endorsement key's public key, PKIX DER.
	EKPublic []byte `json:"ekPublic"`
	// EKCertificate is the EK's certificate (DER) where the TPM holds one.
	EKCertificate []byte `json:"ekCertificate,omitempty"`
	// AKBlob is the AK as the TPM wrapped it (usable only in that TPM); the registry
	// keeps it and hands it back with each tpm.quote, as a RAM disk keeps nothing.
	AKBlob []byte `json:"akBlob"`
	// AKPublic is the AK's TPMT_PUBLIC; AKCreateData, AKCreateAttestation and
	// AKCreateSignature are its creation data, the TPM's certification of it and that
	// certification's signature.
	AKPublic            []byte `json:"akPublic"`
	AKCreateData        []byte `json:"akCreateData"`
	AKCreateAttestation []byte `json:"akCreateAttestation"`
	AKCreateSignature   []byte `json:"akCreateSignature"`
}

// TPMActivate is the input of tpm.activate: the AK to load and the credential the
// registry made for it and the EK.
type TPMActivate struct {
	AKBlob     []byte `json:"akBlob"`
	Credential []byte `json:"credential"`
	Secret     []byte `json:"secret"`
}

// TPMActivateResult is the answer to tpm.activate: the secret the credential held.
type TPMActivateResult struct {
	Secret []byte `json:"secret"`
}

// TPMQuote is the input of tpm.quote.
type TPMQuote struct {
	AKBlob []byte `json:"akBlob"`
	// Nonce is the registry's, fresh for this command.
	Nonce []byte `json:"nonce"`
	// PCRs are the PCR indexes to quote, in the SHA-256 bank.
	PCRs []int `json:"pcrs"`
}

// PCRValue is one PCR of the SHA-256 bank.
type PCRValue struct {
	Index  int    `json:"index"`
	Digest []byte `json:"digest"`
}

// TPMQuoteResult is the answer to tpm.quote.
type TPMQuoteResult struct {
	// Quote is the TPMS_ATTEST the AK signed; Signature its TPMT_SIGNATURE.
	Quote     []byte `json:"quote"`
	Signature []byte `json:"signature"`
	// PCRs are the values quoted.
	PCRs []PCRValue `json:"pcrs"`
	// EventLog is the firmware's TCG event log (binary_bios_measurements).
	EventLog []byte `json:"eventLog"`
}

// BootEvent is one event of a verified event log, decoded for people.
type BootEvent struct {
	PCR int `json:"pcr"`
	// Type is the event type's name (EV_EFI_BOOT_SERVICES_APPLICATION, ...).
	Type string `json:"type"`
	// Digest is the SHA-256 digest extended, lower-case hex.
	Digest string `json:"digest"`
	// Description says what the event measured, where the event's data tells: a UEFI
	// variable's name, a boot loader's command, a firmware version.
	Description string `json:"description,omitempty"`
}

// SecureBootState is what the event log says of Secure Boot.
type SecureBootState struct {
	Enabled bool `json:"enabled"`
	// Authorities are the subjects of the certificates that verified the boot chain.
	Authorities []string `json:"authorities,omitempty"`
	// Problem is why the Secure Boot state could not be read, "" when it was.
	Problem string `json:"problem,omitempty"`
}

// MeasuredBoot is a verified boot: its PCRs, the events of the policy's PCRs, Secure
// Boot's state.
type MeasuredBoot struct {
	PCRs       []PCRValue      `json:"pcrs"`
	Events     []BootEvent     `json:"events"`
	SecureBoot SecureBootState `json:"secureBoot"`
}

// The verdicts of attest.boot.
const (
	// VerdictMatch: the boot matches the baseline or the golden values.
	VerdictMatch = "match"
	// VerdictBaseline: the boot became the node's baseline (tofu's first boot, or after
	// nodes attest accept).
	VerdictBaseline = "baseline"
	// VerdictRecorded: record mode, nothing compared.
	VerdictRecorded = "recorded"
	// VerdictMismatch: the boot differs; with record it is recorded, otherwise refused.
	VerdictMismatch = "mismatch"
)

// AttestBootResult is attest.boot's result: the verdict and what differed, the boot as
// verified.
type AttestBootResult struct {
	Mode    string `json:"mode"`
	Verdict string `json:"verdict"`
	// Mismatches name the PCRs and events that differ from the baseline.
	Mismatches []string     `json:"mismatches,omitempty"`
	Boot       MeasuredBoot `json:"boot"`
	VerifiedAt time.Time    `json:"verifiedAt"`
}

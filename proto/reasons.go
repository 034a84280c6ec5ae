package proto

// The reasons an Error may carry in details.reason, beside its code: stable,
// machine-readable, and each defined once here for the side that sets it and the side
// that reads it. A reason refines a code; it never replaces one.
const (
	// Joining: the agent's side (bcd join).

	// ReasonPinMismatch (UNAUTHENTICATED): a pin given to bcd join does not match the
	// key the registry's well-known document or the config directory holds.
	ReasonPinMismatch = "pin-mismatch"
	// ReasonServerCertificate (UNAUTHENTICATED): the registry's TLS certificate is
	// missing or does not chain to the pinned serving CA.
	ReasonServerCertificate = "server-certificate"
	// ReasonJoinResponse (UNAUTHENTICATED): the signed JoinResponse does not verify, or
	// does not issue what was asked.
	ReasonJoinResponse = "join-response"

	// Joining: the registry's side (join.join).

	// ReasonTokenInvalid (UNAUTHENTICATED): no join token has this secret.
	ReasonTokenInvalid = "token-invalid"
	// ReasonTokenUsed (UNAUTHENTICATED): the join token was used already.
	ReasonTokenUsed = "token-used"
	// ReasonTokenExpired (UNAUTHENTICATED): the join token expired.
	ReasonTokenExpired = "token-expired"
	// ReasonTokenReused (FORBIDDEN): the error a workflow fails with when a ramdisk or
	// provisioned join token it minted was presented again from another address than its
	// join's: another host may have joined as the node's ramdisk or installed OS; or when
	// another provisioned token of its node was, and the registry's containment of it cut
	// the workflow's agents and tokens off.
	ReasonTokenReused = "token-reused"
	// ReasonSealedToken (UNAUTHENTICATED): the sealed token does not open with the
	// registry's join encryption key for the node and role it names.
	ReasonSealedToken = "sealed-token"
	// ReasonRole (FORBIDDEN): the token's kind joins another role than the one asked; or
	// a node-signed result is signed by the certificate of a role that does not run its
	// kind (a disk.wipe by the installed OS's node agent); or a command was relayed to
	// a role whose agent does not run its kind (RelayRoles).
	ReasonRole = "role"
	// ReasonIdentity (FORBIDDEN): the token was minted for another node.
	ReasonIdentity = "identity"
	// ReasonIdentityRevoked (FORBIDDEN): the node's identity was revoked
	// (metal.revokeIdentity); it neither joins nor connects again.
	ReasonIdentityRevoked = "identity-revoked"
	// ReasonEarlierInstallation (FORBIDDEN): a node-role certificate belongs to an
	// earlier installation of the machine (its identity epoch, IdentityEpoch, is older
	// than the node's): the machine was released, redeployed or retired since.
	ReasonEarlierInstallation = "earlier-installation"
	// ReasonRevoked (FORBIDDEN): an operator revoked the certificates of the agent's
	// identity (nodes revoke-identity, sites revoke-identity) after this one was issued;
	// the identity joins again with a new join token.
	ReasonRevoked = "revoked"
	// ReasonAgentsRevoked (FORBIDDEN): the error a workflow fails with when an operator
	// revoked its node's agents' certificates (nodes revoke-identity) while it ran at the
	// identity epoch the revocation moved: the agents it works with were cut off and its
	// join tokens deleted, so it could not complete.
	ReasonAgentsRevoked = "agents-revoked"
	// ReasonRunEnded (FORBIDDEN): a ramdisk's certificate whose workflow run ended: the
	// run that minted the join token it joined with (AgentRun) is no longer the node's
	// running one, nor a rescue that left its ramdisk running; one that names no run is
	// taken only while a workflow runs on the node. The machine booted its installed OS,
	// or another workflow boots a ramdisk of its own. A join with a ramdisk token that
	// run minted is refused so too, at sealedToken, the token left unused.
	ReasonRunEnded = "run-ended"

	// Images.

	// ReasonSignature (INVALID_STATE, DRIVER_ERROR): a signature does not verify, or what
	// it covers changed: an image's, or a node-signed result's.
	ReasonSignature = "signature"
	// ReasonUnsigned (INVALID_STATE, FORBIDDEN): an image has no trusted signature (so it
	// cannot be used or made public), or a result that must be node-signed is not.
	ReasonUnsigned = "unsigned"
	// ReasonUntrustedSigner (INVALID_STATE): the image's signer is on neither the
	// tenant's allowlist nor the platform's.
	ReasonUntrustedSigner = "untrusted-signer"
	// ReasonSourceNotAllowed: a pre-warm image whose source host is outside the site's
	// (or the pool's) image sources is left out of a site's cache plan; (FORBIDDEN)
	// deploy.deploy of an image the site's cache does not hold and whose source the
	// machine may not fetch from, and media.insert of a URL the machine's BMC may not
	// mount, for the same reason; deploy.image whose source sent the ramdisk (by a
	// redirect, a token realm or a name's address) where it may not fetch from; and a
	// site cache's failed image (ImageCacheEntry.Reason) whose pull was refused so.
	ReasonSourceNotAllowed = "source-not-allowed"
	// ReasonSiteShare: a pre-warm image or extra initrd is left out of a site's cache
	// plan, or an enrolled MAC out of the site's known MACs (sites.knownMacs), which
	// were over their bounds, because its tenant lists the most there.
	ReasonSiteShare = "site-share"
	// ReasonNotRamdisk: an extra initrd of a ramdisk boot is an image of another kind.
	ReasonNotRamdisk = "not-ramdisk"
	// ReasonNotCached: an extra initrd of a ramdisk boot the site's cache does not hold
	// ready yet.
	ReasonNotCached = "not-cached"
	// ReasonCacheCapability (FORBIDDEN): a site cache URL without a valid capability for
	// its image (none, one for another image, expired, or signed by another key).
	ReasonCacheCapability = "cache-capability"
	// ReasonCapacity (INVALID_STATE): the site cache cannot fit an image, even after
	// evicting every image it may; also its failed image's ImageCacheEntry.Reason.
	ReasonCapacity = "capacity"

	// deploy.image and deploy.deploy.

	// ReasonDigestMismatch (DRIVER_ERROR): the artifact's digest differs from the
	// catalog's.
	ReasonDigestMismatch = "digest-mismatch"
	// ReasonImageUnavailable: no location delivered the artifact.
	ReasonImageUnavailable = "image-unavailable"
	// ReasonImageCorrupt: the artifact matches its digest but does not decode as its
	// format.
	ReasonImageCorrupt = "image-corrupt"
	// ReasonDiskWrite: the disk refused a write, or the image does not fit on it.
	ReasonDiskWrite = "disk-write"
	// ReasonFirstBoot: the first-boot files could not be installed into the written OS.
	ReasonFirstBoot = "first-boot"

	// Machines and workflows.

	// ReasonIdentityMismatch (DRIVER_ERROR): the machine that booted is not the one
	// enrolled.
	ReasonIdentityMismatch = "machine-identity-mismatch"
	// ReasonNoRamdisk (UNAVAILABLE): a command for the ramdisk, in a run whose
	// metal.ensureRamdisk failed.
	ReasonNoRamdisk = "no-ramdisk"
	// ReasonCancelled: the error a cancelled run fails with.
	ReasonCancelled = "cancelled"
	// ReasonNotAttested (UNVERIFIED_WIPE): a release's disk wipe is not attested.
	ReasonNotAttested = "not-attested"
	// ReasonHasMAC (INVALID_STATE): nodes confirm-mac on a node that has its MACs.
	ReasonHasMAC = "has-mac"
	// ReasonNoProposal (INVALID_STATE): nodes confirm-mac while PXE discovery proposes no
	// MAC for the node.
	ReasonNoProposal = "no-proposal"
	// ReasonNotListedByBMC (INVALID_INPUT): the MAC to confirm is not among the NICs the
	// machine's BMC lists.
	ReasonNotListedByBMC = "not-listed-by-bmc"
	// ReasonPlatformCredential: only a root-tenant credential binds a platform BMC
	// credential to a machine.
	ReasonPlatformCredential = "platform-credential"
	// ReasonBMCAddressNotAllowed: a BMC address the node's site does not admit.
	ReasonBMCAddressNotAllowed = "bmc-address-not-allowed"
	// ReasonSiteHostFile (FORBIDDEN): only the platform names a file of the site host in
	// a driver's config (proto.SiteHostFile).
	ReasonSiteHostFile = "site-host-file"
	// ReasonPlatformBMC (FORBIDDEN): a tenant's profile names a trust option
	// (BMCTrustOptions) of a BMC the platform bound with its own credential: the BMC is
	// trusted as the platform set it.
	ReasonPlatformBMC = "platform-bmc"
	// ReasonUnsafeScriptValue (INVALID_INPUT): a value would change the structure of an
	// iPXE script.
	ReasonUnsafeScriptValue = "unsafe-script-value"

	// diag.dcgm.

	// ReasonNoGPU (UNSUPPORTED): the machine has no NVIDIA GPU (a commissioning skips
	// diag.dcgm where its pool allows it).
	ReasonNoGPU = "no-gpu"
	// ReasonDCGMMissing (UNSUPPORTED): DCGM is not installed where the agent runs.
	ReasonDCGMMissing = "dcgm-missing"
	// ReasonResult (DRIVER_ERROR): a signed result is not the result of its command.
	ReasonResult = "result"
	// ReasonLevel (DRIVER_ERROR): the machine ran another diagnostic level than asked.
	ReasonLevel = "level"
	// ReasonTestsFailed (DRIVER_ERROR): a diagnostic test failed, or none ran.
	ReasonTestsFailed = "tests-failed"
	// ReasonCertificate (FORBIDDEN): the certificate of a node-signed result is missing,
	// not the agent CA's, or names another node or role.
	ReasonCertificate = "certificate"
	// ReasonTime (FORBIDDEN): a node-signed result was signed outside its command's life,
	// from its relaying to its answer's arrival, give or take the agents' clock allowance.
	ReasonTime = "time"

	// Measured boot (attest.boot, docs/attestation.md).

	// ReasonMeasurementMismatch (DRIVER_ERROR): the boot's measurements differ from the
	// node's baseline or the pool's golden values; the message names the events.
	ReasonMeasurementMismatch = "measurement-mismatch"
	// ReasonNoTPM (UNSUPPORTED): the machine has no TPM 2.0, and its pool's measured-boot
	// policy is not off.
	ReasonNoTPM = "no-tpm"
	// ReasonQuote (DRIVER_ERROR): a quote does not verify with the node's AK, is not over
	// the registry's nonce, or its event log does not replay to its PCRs.
	ReasonQuote = "quote"
	// ReasonActivation (DRIVER_ERROR): the TPM could not prove that the AK lives beside
	// the EK (activation of credential), or the EK is not the one enrolled.
	ReasonActivation = "activation"
	// ReasonEKEnrolled (INVALID_STATE): the TPM's endorsement key is enrolled for another
	// node already: one TPM is one machine's.
	ReasonEKEnrolled = "ek-enrolled"
	// ReasonBootChanged (INVALID_STATE): nodes attest accept (metal.acceptBoot) named a
	// boot that is not the node's last verified boot: the node booted again since the
	// operator looked, and nothing was accepted.
	ReasonBootChanged = "boot-changed"

	// Workflow runs (docs/workflows.md#what-a-run-keeps).

	// ReasonTooLarge (INVALID_INPUT): an agent's answer to a step takes more than a
	// step's result may (MaxStepResult), or a step's result would make its run's record
	// pass what a run keeps; the path names the result. A command whose message, as the
	// registry delivers it, passes an agent frame (MaxFrame) is answered so too, at
	// payload, unsent.
	ReasonTooLarge = "too-large"

	// Rotating the admin credential (credentials.rotateAdmin, on the registry's host).

	// ReasonRotatedElsewhere (CONFLICT): another registry on the same store rotated the
	// admin credential at the same moment and revoked the one this rotation wrote.
	ReasonRotatedElsewhere = "rotated-elsewhere"
	// ReasonConfigNotWritten (UNAVAILABLE): the new admin.conf could not be written; the
	// old one still works and nothing was revoked.
	ReasonConfigNotWritten = "config-not-written"
	// ReasonOldNotRevoked: the new admin.conf works, but the old admin credentials could
	// not be revoked and still work (the store's code, UNAVAILABLE for an internal one).
	ReasonOldNotRevoked = "old-not-revoked"

	// The API's admission of authenticated calls (docs/security.md).

	// ReasonTenantBusy (UNAVAILABLE, with Retry-After): the caller's tenant has as many
	// calls waiting (or long polls open) as the registry takes, or the call waited its
	// most for a slot; nothing of the call ran, and it may be sent again.
	ReasonTenantBusy = "tenant-busy"
	// ReasonSourceFailures (UNAVAILABLE, with Retry-After): so many credential checks
	// failed for calls from the caller's address (an IPv4 address, an IPv6 /64) that
	// its calls are refused before their check, valid credential or not, until the
	// Retry-After has passed; nothing of the call ran.
	ReasonSourceFailures = "source-failures"
	// ReasonSourceBusy (UNAVAILABLE, with Retry-After 1 s): so many calls from the
	// caller's address wait already for the credential checks under way from there
	// (MaxFailureWaiters) that the registry holds no more; nothing of the call ran, its
	// credential was not checked, and it may be sent again.
	ReasonSourceBusy = "source-busy"

	// Each tenant's share of the store (docs/security.md#what-strangers-can-cost).

	// ReasonQuota (INVALID_STATE): the tenant holds as many objects of the kind as the
	// registry lets one tenant hold (its secrets, images, profile versions, credentials,
	// pools or nodes); the message names the bound and what frees a place, and nothing
	// was written.
	ReasonQuota = "quota"

	// Profiles.

	// ReasonReservedID (CONFLICT): a shipped profile has the id, for every tenant.
	ReasonReservedID = "reserved-id"
	// ReasonForeignSecretRef (INVALID_STATE): a profile of another tenant than the
	// node's, neither shipped nor the platform's (the root tenant's), names a secret
	// reference (a k8s-join's tokenRef, a driver's credentialRef): the node would be
	// handed its own tenant's secret of that name, where the profile's owner chose.
	ReasonForeignSecretRef = "foreign-secret-ref"
)

// Package metal is the node lifecycle of bare-metal machines: the metal part of pools'
// policy (its checks, and the units laid over a profile's), enrollment (MACs or product
// UUID, a BMC by reference, the MAC PXE discovery proposes bound by metal.confirmMac),
// hardware profiles and the driver bindings resolved from them (a run's profile's laid
// over them for its own site operations), and the lifecycle table (lifecycle.go): which
// request (enroll, inspect, commission, deploy, remediate, release, retire, rescue,
// unrescue, retry, cancel) a node in which state may make, which shipped profile (or its
// out-of-band variant) it runs, and where the end of its workflow leaves the node,
// unverified wipes included. Health remediation (remediate.go) runs by hand and from a
// pool's policy.remediation, checked by the registry's housekeeping. An operator's
// revocation of a node's agents' certificates (revoke.go: RevokeAgents) moves the node's
// identity epoch without a workflow, and fails at once the running workflow the move
// cuts off, as a containment of a join token presented again does (tokenreuse.go:
// cutOff decides for both).
//
// It registers the control-plane steps with the workflow engine (metal.ensureRamdisk,
// metal.revokeIdentity, userdata.render, wait.agentJoined, wait.generationObserved), the
// registry parts of deploy.deploy (the source a ramdisk may fetch from bounded by the
// node's site's image sources: registry/image's RefuseFetch), power.setPower and diag.dcgm, a relay guard (no
// command for a ramdisk the run failed to boot), and what the end of every lifecycle
// workflow does, and consumes what other rooms provide through small interfaces: Images
// (the catalog), UserData (rendering first-boot user data), Generations (what an agent
// has applied) and Presence (which node agents have a session). docs/nodes.md describes
// it for operators.
package metal

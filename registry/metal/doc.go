// Package metal is the node lifecycle of bare-metal machines, as far as deploying them:
// the metal part of pools' policy (its checks, and the units laid over a profile's),
// enrollment (MACs or product UUID, a BMC by reference), hardware profiles and the driver
// bindings resolved from them, and metal.deploy, which runs a profile's workflow and
// moves the node deploying -> active or failed.
//
// It registers the control-plane steps with the workflow engine (metal.ensureRamdisk,
// metal.revokeIdentity, userdata.render, wait.agentJoined, wait.generationObserved) and
// deploy.deploy's registry part, and consumes what other rooms provide through small
// interfaces: Images (the catalog), UserData (rendering first-boot user data) and
// Generations (what an agent has applied). docs/nodes.md describes it for operators.
package metal

// Package agentplane holds the agent plane's end-to-end tests: the registry's agent
// endpoint (registry/agents) and real agent sessions (agent/session) over loopback QUIC,
// a registry process killed in the middle of a push, and the load benchmarks of thousands
// of agents in separate processes against one registry, and against three replica
// processes on one etcd cluster, one of them killed. It has no code of its own.
package agentplane

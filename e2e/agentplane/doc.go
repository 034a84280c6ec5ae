// Package agentplane holds the agent plane's end-to-end tests: the registry's agent
// endpoint (registry/agents) and real agent sessions (agent/session) over loopback QUIC,
// a registry process killed in the middle of a push, and the load benchmark of thousands
// of agents in separate processes against one registry. It has no code of its own.
package agentplane

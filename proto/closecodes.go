package proto

import (
	"fmt"
	"time"
)

// CloseCode is the application error code a QUIC connection or stream of the agent
// plane is closed (or a stream cancelled) with.
type CloseCode uint64

// The close codes.
const (
	// CloseNormal: the peer is done (an agent stopping).
	CloseNormal CloseCode = 0
	// CloseShutdown: the registry is stopping; its reason phrase (ShutdownReason) says
	// when this agent is to reconnect.
	CloseShutdown CloseCode = 1
	// CloseReplaced: a newer session of the same node took over. Another agent runs with
	// this node's certificate; the replaced one waits its longest backoff before retrying.
	CloseReplaced CloseCode = 2
	// CloseProtocol: the peer broke the protocol.
	CloseProtocol CloseCode = 3
	// CloseRevoked: metal.revokeIdentity revoked the node's identity; the agent waits
	// its longest backoff before each retry, which the registry refuses the same way.
	CloseRevoked CloseCode = 4
)

// ShutdownReason is the reason phrase of a CloseShutdown. It asks the agent to reconnect
// after delay: a registry that stops tells its whole fleet at once, and gives each agent
// its own moment so that the fleet returns at the rate at which it can take them back.
func ShutdownReason(delay time.Duration) string {
	return fmt.Sprintf("registry shutting down; reconnect in %dms", delay.Milliseconds())
}

// ShutdownDelay reads the delay back from a CloseShutdown's reason phrase; ok is false
// when the phrase names none.
func ShutdownDelay(reason string) (delay time.Duration, ok bool) {
	var ms int64
	if _, err := fmt.Sscanf(reason, "registry shutting down; reconnect in %dms", &ms); err != nil || ms < 0 {
		return 0, false
	}
	return time.Duration(ms) * time.Millisecond, true
}

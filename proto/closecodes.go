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
	// over how long a window to spread the reconnect.
	CloseShutdown CloseCode = 1
	// CloseReplaced: a newer session of the same node took over. Another agent runs with
	// this node's certificate; the replaced one waits its longest backoff before retrying.
	CloseReplaced CloseCode = 2
	// CloseProtocol: the peer broke the protocol.
	CloseProtocol CloseCode = 3
)

// ShutdownReason is the reason phrase of a CloseShutdown. It asks the agent to reconnect
// at a uniformly random moment within spread: a registry that stops tells its whole
// fleet at once, and sizes spread to the rate at which it can take them back.
func ShutdownReason(spread time.Duration) string {
	return fmt.Sprintf("registry shutting down; reconnect within %dms", spread.Milliseconds())
}

// ShutdownSpread reads the window back from a CloseShutdown's reason phrase; 0 when the
// phrase names none.
func ShutdownSpread(reason string) time.Duration {
	var ms int64
	if _, err := fmt.Sscanf(reason, "registry shutting down; reconnect within %dms", &ms); err != nil || ms < 0 {
		return 0
	}
	return time.Duration(ms) * time.Millisecond
}

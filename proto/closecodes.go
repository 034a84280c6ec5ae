package proto

import (
	"fmt"
	"math"
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
	// this node's certificate; the replaced one waits its longest backoff before retrying,
	// and then replaces the other's session in turn while both run.
	CloseReplaced CloseCode = 2
	// CloseProtocol: the peer broke the protocol.
	CloseProtocol CloseCode = 3
	// CloseRevoked: the registry refuses the agent's certificate for good: the node's
	// identity was revoked (metal.revokeIdentity), the certificate belongs to an earlier
	// installation, or an operator revoked it (revoke-identity); the agent waits its
	// longest backoff before each retry, which the registry refuses the same way.
	CloseRevoked CloseCode = 4
	// CloseWithdrawn, on a command stream only: the registry withdrew the command (its
	// step timed out, or its workflow was cancelled) and nobody waits for its answer; the
	// agent cancels the command's handler. A stream that ends otherwise (a connection
	// that drops) leaves the command running, for the resend to join.
	CloseWithdrawn CloseCode = 5
)

// ShutdownReason is the reason phrase of a CloseShutdown. It asks the agent to reconnect
// after delay, and says that the stream of returning agents ends after streamEnd: a
// registry that stops tells its whole fleet at once, and gives each agent its own moment
// so that the fleet returns at the rate at which it can take them back. An agent refused
// on its return comes back after the stream's end, at a random moment within spread of
// it (ReslotSpread, or a spread the registry sized from its last return: ReslotSpreadFor).
// Agents that read only the delay, or the delay and the stream's end, read the new phrase
// as the older ones.
func ShutdownReason(delay, streamEnd, spread time.Duration) string {
	return fmt.Sprintf("registry shutting down; reconnect in %dms; stream ends in %dms; refused retry within %dms",
		delay.Milliseconds(), streamEnd.Milliseconds(), spread.Milliseconds())
}

// ReslotSpread is how long after the end of the stream a stopping registry named
// (streamEnd, from when the agent was told) an agent refused on its return comes back at
// the latest, when the registry named no spread (an older registry's phrase) or has
// measured no return to size it from: it picks a random moment within a quarter of the
// stream past its end, at least a second, rather than coming back on top of the stream.
// The agent reads it for its re-slotted tries (agent/session), the registry to wait for
// them before it counts the agent gone (store.Tx.RecordAgentStop).
func ReslotSpread(streamEnd time.Duration) time.Duration {
	return max(minReslotSpread, streamEnd/4)
}

// ReslotTries is how many tries after a refused return an agent re-slots within the
// spread past the stream's end (agent/session), before its backoff decides again: an
// agent refused at each is back within ReslotTries spreads of the stream's end, which
// the registry waits for before it counts the agent gone (store.Tx.RecordAgentStop).
const ReslotTries = 3

// ReslotSpreadFor is the re-slot spread of a stream ending after streamEnd whose
// registry refused share (0 to 1) of the agents of its last measured return: long enough
// that the agents refused are taken back at the stream's own rate if this return refuses
// half as many again as the last did, or the 5% of the fleet a return may refuse,
// whichever is more; at least minMeasuredReslotSpread and at most a quarter of the
// stream. A return that refused few agents no longer keeps the last of them out for a
// quarter of the stream.
func ReslotSpreadFor(streamEnd time.Duration, share float64) time.Duration {
	share = min(max(1.5*share, reslotShareFloor), 0.25)
	return min(ReslotSpread(streamEnd), max(minMeasuredReslotSpread, time.Duration(share*float64(streamEnd))))
}

// reslotShareFloor is the least share of a fleet a re-slot spread makes room for: what a
// return may refuse (registry/agents plans for refusing no more).
const reslotShareFloor = 0.05

// minReslotSpread is ReslotSpread's least spread.
const minReslotSpread = time.Second

// minMeasuredReslotSpread is ReslotSpreadFor's least spread. Its share of the stream
// already takes the agents refused back at no more than the stream's rate; a floor of a
// second held the 5% of 10,000 agents a return may refuse to 500 a second past the
// stream's end, where the machine took 1,800, and kept the last of them back up to a
// second after the rest (docs/benchmarks.md, "A re-slot spread of the stream's share").
const minMeasuredReslotSpread = 250 * time.Millisecond

// ShutdownDelay reads the delay back from a CloseShutdown's reason phrase; ok is false
// when the phrase names none.
func ShutdownDelay(reason string) (delay time.Duration, ok bool) {
	var ms int64
	if _, err := fmt.Sscanf(reason, "registry shutting down; reconnect in %dms", &ms); err != nil {
		return 0, false
	}
	return millis(ms)
}

// ShutdownStreamEnd reads when the stream of returning agents ends from a CloseShutdown's
// reason phrase; ok is false when the phrase does not say (an older registry's).
func ShutdownStreamEnd(reason string) (streamEnd time.Duration, ok bool) {
	var delay, end int64
	if _, err := fmt.Sscanf(reason, "registry shutting down; reconnect in %dms; stream ends in %dms", &delay, &end); err != nil {
		return 0, false
	}
	if _, ok := millis(delay); !ok {
		return 0, false
	}
	return millis(end)
}

// ShutdownReslotSpread reads the spread within which an agent refused on its return
// tries again after the stream's end from a CloseShutdown's reason phrase; ok is false
// when the phrase does not say (an older registry's: ReslotSpread is the rule then).
func ShutdownReslotSpread(reason string) (spread time.Duration, ok bool) {
	var delay, end, within int64
	if _, err := fmt.Sscanf(reason, "registry shutting down; reconnect in %dms; stream ends in %dms; refused retry within %dms", &delay, &end, &within); err != nil {
		return 0, false
	}
	if _, ok := millis(delay); !ok {
		return 0, false
	}
	if _, ok := millis(end); !ok {
		return 0, false
	}
	return millis(within)
}

// millis is ms milliseconds; ok is false for a negative count or one past what a
// Duration holds.
func millis(ms int64) (time.Duration, bool) {
	if ms < 0 || ms > math.MaxInt64/int64(time.Millisecond) {
		return 0, false
	}
	return time.Duration(ms) * time.Millisecond, true
}

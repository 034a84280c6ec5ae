package store

import "crypto/rand"

const (
	bucketAgentKeys   = "agent_keys"
	keyStatelessReset = "agent-stateless-reset-key"
)

// StatelessResetKey returns the agent endpoint's QUIC stateless reset key, made on first
// use. It outlives restarts, so that a restarted registry can tell agents at once that
// their connections are gone instead of leaving them to time out.
func (t *Tx) StatelessResetKey() ([32]byte, error) {
	var key [32]byte
	if raw := t.getRaw(bucketAgentKeys, []byte(keyStatelessReset)); len(raw) == len(key) {
		copy(key[:], raw)
		return key, nil
	}
	rand.Read(key[:])
	return key, t.putRaw(bucketAgentKeys, []byte(keyStatelessReset), key[:])
}

package store

import "crypto/rand"

const bucketAgentKeys = "agent_keys"

// AgentKey returns the agent endpoint's 32-byte random key of the given name, made on
// first use and kept from then on. The endpoint keeps its QUIC stateless reset key and
// its TLS session ticket key here, so that a restarted registry still honours what the
// last one issued: agents learn at once that their connections are gone, and resume
// their sessions without a full handshake.
func (t *Tx) AgentKey(name string) ([32]byte, error) {
	var key [32]byte
	if raw := t.getRaw(bucketAgentKeys, []byte(name)); len(raw) == len(key) {
		copy(key[:], raw)
		return key, nil
	}
	rand.Read(key[:])
	return key, t.putRaw(bucketAgentKeys, []byte(name), key[:])
}

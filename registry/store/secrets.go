package store

import "crypto/rand"

const bucketSecrets = "secrets"

// Secret returns the 32-byte random secret of the given name, made on first use and kept
// from then on. The agent endpoint keeps its QUIC stateless reset key and its TLS session
// ticket key here, so that a restarted registry still honours what the last one issued.
func (t *Tx) Secret(name string) ([32]byte, error) {
	var key [32]byte
	if raw := t.getRaw(bucketSecrets, []byte(name)); len(raw) == len(key) {
		copy(key[:], raw)
		return key, nil
	}
	rand.Read(key[:])
	return key, t.putRaw(bucketSecrets, []byte(name), key[:])
}

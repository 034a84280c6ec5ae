// Package secret is the registry's secret store: secrets are sealed with AES-256-GCM
// before they reach the store, which keeps only ciphertext, and opened after they leave
// it. The key is DATA_DIR/pki/secrets.key (32 random bytes, 0600), made on first start,
// or sealed in the store with a KEK. The store records the key's ID (Box.Key, checked by
// store.Tx.CheckKey and recorded by BindKey), so a registry given another key than the
// one its secrets are sealed with is refused.
// Each ciphertext is bound to its ref, purpose and node (a tenant's secret: its tenant),
// so a record moved to another ref, node or tenant no longer opens.
//
// Two kinds of secrets live here: a node's (its rendered user data, under a ref the
// registry makes) and a tenant's, put by name (secret://k8s/prod-join) for its nodes'
// host units. ForAgent is the rule of which node agent gets a tenant's secret.
//
// One key is derived from the secret key: the Ed25519 key that signs site cache URLs'
// capabilities (Box.CacheCapabilityKey).
package secret

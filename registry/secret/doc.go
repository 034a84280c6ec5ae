// Package secret is the registry's secret store: secrets are sealed with AES-256-GCM
// before they reach the store, which keeps only ciphertext, and opened after they leave
// it. The key is DATA_DIR/pki/secrets.key (32 random bytes, 0600), made on first start.
// Each ciphertext is bound to its ref, purpose and node, so a record moved to another
// ref or node no longer opens.
package secret

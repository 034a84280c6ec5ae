// Package replicas is the end-to-end test of several registries on one store: three
// `better-compute serve --store etcd` processes on a real three-member etcd cluster on
// loopback, their keys sealed in the store with one key-encryption key each reads from
// its own copy of the file, as docs/ARCHITECTURE.md ("Replicas") and the README
// ("Running three registries") run them. It has no code of its own.
package replicas

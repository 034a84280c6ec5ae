// Package site holds the end-to-end tests of `bcd site`: a real registry, `bcd join
// --role site` and `bcd site` as processes on loopback, and a site in a network namespace
// PXE-booting a qemu VM. It has no code of its own.
package site

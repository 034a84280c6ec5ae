// Package bcdargv is the exact argv the user-data templates run bcd with (the
// specification's bcdJoinArgv and bcdNodeArgv). The registry's templates and bcd's own
// tests both use it, and those tests parse it with bcd's flag definitions, so the two
// can never drift apart. It also names bcd's configuration directory and the files in it
// that user data and the ramdisk's first boot install (configdir.go).
package bcdargv

import "github.com/better-compute/better-compute/proto/joinwire"

// Path is where user data installs bcd.
const Path = "/usr/local/bin/bcd"

// TokenFile is where user data writes the join token (0600); bcd join removes it once
// joined.
const TokenFile = ConfigDir + "/join-token"

// Join is the argv that joins an installed node: `bcd join --server URL --token-file
// /etc/bcd/join-token --node-id ID` and the three pins. Without pins (the zero Pins) the
// pin flags are left out, as the specification's templates do; bcd itself then refuses
// to bootstrap.
func Join(server, nodeID string, pins joinwire.Pins) []string {
	argv := []string{Path, "join", "--server", server, "--token-file", TokenFile, "--node-id", nodeID}
	if pins != (joinwire.Pins{}) {
		argv = append(argv,
			"--serving-ca-pin", pins.ServingCA,
			"--join-signing-pin", pins.JoinSigning,
			"--join-encryption-pin", pins.JoinEncryption)
	}
	return argv
}

// Node is the argv of the node agent, run by bcd.service once the node has joined.
func Node() []string {
	return []string{Path, "node"}
}

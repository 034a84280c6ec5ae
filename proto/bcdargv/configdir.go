package bcdargv

// ConfigDir is bcd's configuration directory unless told otherwise: `bcd join` writes it,
// the agent modes read it, and the ramdisk's first boot installs into the written OS the
// files a joining bcd finds there.
const ConfigDir = "/etc/bcd"

// The files of the configuration directory that more than bcd's own config room names.
const (
	// ConfigFile is config.toml.
	ConfigFile = "config.toml"
	// JoinEncryptionFile is the JoinService encryption key as a JWK.
	JoinEncryptionFile = "join-encryption.jwk"
)

// Package hostenv is what one host-config unit works with while bcd converges a host: the
// root every path it reads or writes is under, the one Runner every program it runs goes
// through, the secrets it may fetch, and the record of the corrections it made and the
// reasons it needs a reboot.
//
// A real host is Env{Root: "/", Runner: ExecRunner{}}; tests point Root at a directory tree
// with fake /proc, /sys and /etc files and give a Runner that records calls and answers
// scripted outputs. Messages name host paths as the host sees them (/etc/..., never the
// root prefix), so a report reads the same in both.
package hostenv

package inuse

import (
	"os"
	"strconv"
	"strings"
	"time"
)

// EchoesHeld is how many echoes waiting for ARP at once the checks of an address nothing
// answers at hold when checks of them run at once, each waiting wait: each check's echo
// is held ARPWait, however short its wait, so a slot of checks holds ARPWait/wait of them.
func EchoesHeld(checks int, wait time.Duration) int {
	return checks * int((ARPWait+wait-1)/wait)
}

// neighbourLimit is the file of net.ipv4.neigh.default.gc_thresh3.
const neighbourLimit = "/proc/sys/net/ipv4/neigh/default/gc_thresh3"

// NeighbourLimit is net.ipv4.neigh.default.gc_thresh3: the entries of the host's
// neighbour table, every network namespace's together, past which the kernel refuses an
// echo to an address not in it. An echo to an address nothing answers at holds one
// (incomplete) for ARPWait. ok is false where it can not be read: in a network namespace
// other than the host's, which has neither the setting nor a table of its own.
func NeighbourLimit() (limit int, ok bool) {
	b, err := os.ReadFile(neighbourLimit)
	if err != nil {
		return 0, false
	}
	n, err := strconv.Atoi(strings.TrimSpace(string(b)))
	return n, err == nil
}

package lease

import (
	"container/heap"
	"net/netip"
	"time"
)

// held is the addresses that clients not known hold, by a lease or an offer, each with
// the time its last such hold ends, kept as a heap by that time with each address's
// place in it: a hold that changes moves its address in O(log n), and the addresses
// whose holds ended leave first. Once expire has run, its length is the number of
// addresses clients not known hold, counted without a walk over the leases.
type held struct {
	addrs []heldAddr
	at    map[netip.Addr]int
}

// heldAddr is an address and when its hold by a client not known ends.
type heldAddr struct {
	ip  netip.Addr
	end time.Time
}

func newHeld() *held { return &held{at: map[netip.Addr]int{}} }

// set makes end the end of ip's hold; the zero time removes ip.
func (h *held) set(ip netip.Addr, end time.Time) {
	i, ok := h.at[ip]
	switch {
	case end.IsZero() && ok:
		heap.Remove(h, i)
	case end.IsZero():
	case ok:
		h.addrs[i].end = end
		heap.Fix(h, i)
	default:
		heap.Push(h, heldAddr{ip: ip, end: end})
	}
}

// expire removes the addresses whose hold has ended at now.
func (h *held) expire(now time.Time) {
	for len(h.addrs) > 0 && !now.Before(h.addrs[0].end) {
		heap.Pop(h)
	}
}

// has reports whether ip is held, as of the last expire.
func (h *held) has(ip netip.Addr) bool {
	_, ok := h.at[ip]
	return ok
}

// Len, Less, Swap, Push and Pop are heap.Interface, for the heap functions only.

func (h *held) Len() int           { return len(h.addrs) }
func (h *held) Less(i, j int) bool { return h.addrs[i].end.Before(h.addrs[j].end) }

func (h *held) Swap(i, j int) {
	h.addrs[i], h.addrs[j] = h.addrs[j], h.addrs[i]
	h.at[h.addrs[i].ip], h.at[h.addrs[j].ip] = i, j
}

func (h *held) Push(x any) {
	a := x.(heldAddr)
	h.at[a.ip] = len(h.addrs)
	h.addrs = append(h.addrs, a)
}

func (h *held) Pop() any {
	a := h.addrs[len(h.addrs)-1]
	h.addrs = h.addrs[:len(h.addrs)-1]
	delete(h.at, a.ip)
	return a
}

package inuse

import (
	"errors"
	"syscall"
)

// NotSentRemedy is what an operator does about a check whose echo was not sent
// (ErrNotSent), by the kernel's cause: no buffer is a storm of checks outrunning the room
// for their echoes; no route is a routed subnet the site's host cannot reach. The DHCP
// server's error and its warn both say it, so that the two never advise differently.
func NotSentRemedy(err error) string {
	switch {
	case errors.Is(err, syscall.ENOBUFS), errors.Is(err, syscall.EAGAIN):
		return "many checks of addresses that nothing answers at once fill the kernel's room for their echoes, each for about 3 s: " +
			"if this lasts, raise what the warning at start names (net.ipv4.neigh.default.gc_thresh3, net.core.wmem_max), " +
			"or stagger the storm (power machines on in smaller groups)"
	case errors.Is(err, syscall.ENETUNREACH), errors.Is(err, syscall.EHOSTUNREACH):
		return "the site's host has no route to the address's subnet (a routed subnet of boot.subnets, reached through its relay): " +
			"add a route to it, through the router towards the relay"
	}
	return "the kernel refused the echo for the cause that follows: see to it, or turn the check off (boot.conflictCheck)"
}

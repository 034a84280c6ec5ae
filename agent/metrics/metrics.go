// Package metrics is bcd's Prometheus metrics, for `bcd site` and `bcd node`: every
// collector's name, type and labels are defined here, the one agent-side package that
// imports the Prometheus client. The libraries count through interfaces of their own
// (boot.Observer, cache.Observer), which *Site satisfies; bcd node's converger passes are
// counted by the node agent (Node.Pass). Serve answers /metrics on the listen address a
// config names.
//
// Labels are bounded: a DHCP reply's type, an HTTP answer's kind and status class, a
// pull's outcome, a host unit's kind; never a MAC, an address, a digest or a file name.
package metrics

import (
	"log/slog"
	"net"
	"strconv"

	"github.com/better-compute/better-compute/cache"
	"github.com/better-compute/better-compute/hostconverge"
	"github.com/better-compute/better-compute/metricshttp"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// namespace prefixes every metric of bcd.
const namespace = "bcd"

// newRegistry is a registry with the Go runtime's and the process's collectors, and
// bcd_session_connected read from connected.
func newRegistry(connected func() bool) *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: namespace, Subsystem: "session", Name: "connected",
			Help: "1 while the agent holds its session with the registry, else 0."}, func() float64 {
			if connected() {
				return 1
			}
			return 0
		}))
	return reg
}

// Site is bcd site's collectors: the boot server's and the cache's.
type Site struct {
	reg          *prometheus.Registry
	dhcpReplies  *prometheus.CounterVec
	dhcpDropped  prometheus.Counter
	dhcpNoLease  prometheus.Counter
	dhcpRefused  prometheus.Counter
	dhcpInUse    prometheus.Counter
	dhcpUnsent   prometheus.Counter
	dhcpAway     prometheus.Counter
	tftp         *prometheus.CounterVec
	tftpBytes    prometheus.Counter
	http         *prometheus.CounterVec
	httpBytes    *prometheus.CounterVec
	cacheReqs    *prometheus.CounterVec
	pulledBytes  prometheus.Counter
	pulls        *prometheus.CounterVec
	evictions    prometheus.Counter
	evictedBytes prometheus.Counter
}

// NewSite makes bcd site's collectors; usage, reported (the cache's capacity as the site
// last reported it to the registry) and connected are read at each scrape.
func NewSite(usage func() cache.Usage, reported func() int64, connected func() bool) *Site {
	counter := func(sub, name, help string) prometheus.Counter {
		return prometheus.NewCounter(prometheus.CounterOpts{Namespace: namespace, Subsystem: sub, Name: name, Help: help})
	}
	vec := func(sub, name, help string, labels ...string) *prometheus.CounterVec {
		return prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: namespace, Subsystem: sub, Name: name, Help: help}, labels)
	}
	s := &Site{
		reg:          newRegistry(connected),
		dhcpReplies:  vec("dhcp", "replies_total", "DHCP replies sent, by type (offer, ack, nak, other).", "type"),
		dhcpDropped:  counter("dhcp", "dropped_total", "DHCP requests left unanswered (not a network-boot client, of no subnet served, no free address, another server chosen, ...)."),
		dhcpNoLease:  counter("dhcp", "pool_exhausted_total", "DHCPDISCOVERs left unanswered because their subnet's range had no free address."),
		dhcpRefused:  counter("dhcp", "unknown_refused_total", "DHCPDISCOVERs of machines the site does not know left unanswered because such machines held their share of the range."),
		dhcpInUse:    counter("dhcp", "address_in_use_total", "Addresses of the range a host answered at when checked before an offer: held away, another offered."),
		dhcpUnsent:   counter("dhcp", "check_unsent_total", "DHCPDISCOVERs left unanswered because the echo of the conflict check of their address was not sent (no buffer, no route); also counted in bcd_dhcp_dropped_total."),
		dhcpAway:     counter("dhcp", "held_away_share_total", "Addresses offered without the conflict check, or found in use or declined and not held away, because the addresses held away took their share of the range."),
		tftp:         vec("tftp", "transfers_total", "TFTP reads that ended, by result (ok, failed: an abort, a timeout, or a UEFI size probe)", "result"),
		tftpBytes:    counter("tftp", "sent_bytes_total", "File bytes TFTP sent."),
		http:         vec("http", "responses_total", "HTTP answers of the boot server, by kind (script, ramdisk, ipxe, image) and status class (2xx, 3xx, 4xx, 5xx).", "kind", "status"),
		httpBytes:    vec("http", "sent_bytes_total", "Body bytes the boot server's HTTP listener sent, by kind: image is the deploy stream from the cache.", "kind"),
		cacheReqs:    vec("cache", "requests_total", "Requests of an image from the cache, by result (hit: ready here, miss: not).", "result"),
		pulledBytes:  counter("cache", "pulled_bytes_total", "Bytes the cache's pulls wrote."),
		pulls:        vec("cache", "pulls_total", "Pulls that ended, by outcome (ready, failed, stopped).", "outcome"),
		evictions:    counter("cache", "evictions_total", "Ready images evicted."),
		evictedBytes: counter("cache", "evicted_bytes_total", "Bytes of the images evicted."),
	}
	gauge := func(name, help string, f func(cache.Usage) float64) prometheus.Collector {
		return prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: namespace, Subsystem: "cache", Name: name, Help: help},
			func() float64 { return f(usage()) })
	}
	s.reg.MustRegister(s.dhcpReplies, s.dhcpDropped, s.dhcpNoLease, s.dhcpRefused, s.dhcpInUse, s.dhcpUnsent, s.dhcpAway, s.tftp, s.tftpBytes, s.http, s.httpBytes,
		s.cacheReqs, s.pulledBytes, s.pulls, s.evictions, s.evictedBytes,
		gauge("used_bytes", "Bytes the cache's images take or are about to take (ready, evicting, pulling).", func(u cache.Usage) float64 { return float64(u.UsedBytes) }),
		gauge("capacity_bytes", "The cache's capacity (cache.capacityBytes); 0 is no bound.", func(u cache.Usage) float64 { return float64(u.CapacityBytes) }),
		gauge("pulls_running", "Pulls running now.", func(u cache.Usage) float64 { return float64(u.Pulling) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: namespace, Subsystem: "cache", Name: "reported_capacity_bytes",
			Help: "The capacity the site last reported to the registry, which plans the cache with it: the configured one or, when less, " +
				"what the cache's filesystem can hold, rounded down by about 1% and read again each minute; 1 when it can hold nothing."},
			func() float64 { return float64(reported()) }))
	return s
}

// Gatherer is what the collectors gather from.
func (s *Site) Gatherer() prometheus.Gatherer { return s.reg }

func (s *Site) DHCPReply(kind string) { s.dhcpReplies.WithLabelValues(kind).Inc() }
func (s *Site) DHCPDropped()          { s.dhcpDropped.Inc() }
func (s *Site) DHCPPoolExhausted()    { s.dhcpNoLease.Inc() }
func (s *Site) DHCPUnknownRefused()   { s.dhcpRefused.Inc() }
func (s *Site) DHCPAddressInUse()     { s.dhcpInUse.Inc() }
func (s *Site) DHCPCheckUnsent()      { s.dhcpUnsent.Inc() }
func (s *Site) DHCPHeldAwayShare()    { s.dhcpAway.Inc() }

func (s *Site) TFTPTransfer(ok bool, bytes int64) {
	s.tftp.WithLabelValues(map[bool]string{true: "ok", false: "failed"}[ok]).Inc()
	s.tftpBytes.Add(float64(bytes))
}

func (s *Site) HTTPServed(kind string, status int, bytes int64) {
	s.http.WithLabelValues(kind, strconv.Itoa(status/100)+"xx").Inc()
	s.httpBytes.WithLabelValues(kind).Add(float64(bytes))
}

func (s *Site) ImageRequested(hit bool) {
	s.cacheReqs.WithLabelValues(map[bool]string{true: "hit", false: "miss"}[hit]).Inc()
}
func (s *Site) PullProgress(bytes int64) { s.pulledBytes.Add(float64(bytes)) }
func (s *Site) PullEnded(outcome string) { s.pulls.WithLabelValues(outcome).Inc() }
func (s *Site) Evicted(bytes int64) {
	s.evictions.Inc()
	s.evictedBytes.Add(float64(bytes))
}

// Node is bcd node's collectors: its converger's passes.
type Node struct {
	reg      *prometheus.Registry
	passes   *prometheus.CounterVec
	changes  *prometheus.CounterVec
	failures *prometheus.CounterVec
}

// NewNode makes bcd node's collectors; connected is read at each scrape.
func NewNode(connected func() bool) *Node {
	n := &Node{
		reg: newRegistry(connected),
		passes: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: namespace, Subsystem: "hostconverge", Name: "passes_total",
			Help: "Host converger passes, by result (applied: no unit failed, failed)."}, []string{"result"}),
		changes: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: namespace, Subsystem: "hostconverge", Name: "changes_total",
			Help: "Units that corrected the host in a pass (changed, or rebootRequired), by unit."}, []string{"unit"}),
		failures: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: namespace, Subsystem: "hostconverge", Name: "failures_total",
			Help: "Units that failed in a pass, by unit and code."}, []string{"unit", "code"}),
	}
	n.reg.MustRegister(n.passes, n.changes, n.failures)
	return n
}

// Gatherer is what the collectors gather from.
func (n *Node) Gatherer() prometheus.Gatherer { return n.reg }

// Pass counts one converger pass and what its units did.
func (n *Node) Pass(results []hostconverge.UnitResult) {
	result := "applied"
	if !hostconverge.Applied(results) {
		result = "failed"
	}
	n.passes.WithLabelValues(result).Inc()
	for _, r := range results {
		switch r.Status {
		case hostconverge.Changed, hostconverge.RebootRequired:
			n.changes.WithLabelValues(r.Unit).Inc()
		case hostconverge.Failed:
			n.failures.WithLabelValues(r.Unit, string(r.Code)).Inc()
		}
	}
}

// Serve answers /metrics on addr with g's metrics until stop is called, two scrapes at
// once, and returns the address it listens on (metricshttp.Serve). It fails with
// INVALID_CONFIG at path when addr cannot be listened on.
func Serve(addr, path string, g prometheus.Gatherer, log *slog.Logger) (_ net.Addr, stop func(), err error) {
	return metricshttp.Serve(addr, path, promhttp.HandlerFor(g, promhttp.HandlerOpts{MaxRequestsInFlight: 2}), log)
}

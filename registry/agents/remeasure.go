package agents

import (
	"math"
	"time"

	"github.com/better-compute/better-compute/proto"
	"github.com/quic-go/quic-go"
)

// The registry's end of an idle session takes RTT samples only from what it sends and
// the agent acknowledges: the agent's pings give the agent's end samples, not the
// registry's. quic-go takes the first sample (the handshake's) as the smoothed RTT with
// half of it as the mean deviation, a probe timeout of three times it, and moves the
// estimate only an eighth (the smoothed RTT) and a quarter (the deviation) of the way
// to each later sample: a handshake that waited seconds for a starved processor leaves
// a probe timeout of several times that wait for the whole session, and a packet of a
// later push lost on it is sent again only then. So on each ping the endpoint reads the
// session's estimate (one ConnectionStats call) and, when it is stale (stale), sends the
// agent probes (probeMessage) one at a time until the agent's acknowledgements have
// brought it under the bound.
const (
	// staleFloor and staleRatio bound a session's probe timeout: it is stale above
	// max(staleFloor, staleRatio x its least RTT sample). One honest sample gives a
	// probe timeout of three times it, and a path whose round trips swing between its
	// least and about seven times that keeps one under ten times its least: beyond
	// that the estimate no longer tells of the path. The floor leaves alone a LAN's
	// session whose connect took up to about a third of a second, and the cost of a
	// lost packet on one at the floor (a second) is small beside the push's
	// acknowledgement timeout (30 s).
	staleFloor = time.Second
	staleRatio = 10
	// maxProbes bounds the probes of one burst: twice the samples an estimate of 10
	// minutes needs (samplesUnder: 65; a 9 s one needs 33).
	maxProbes = 2 * 65
	// probeWait is the longest a probe waits for the agent's acknowledgement (which an
	// agent sends within its max_ack_delay, 25 ms) before the next probe is sent;
	// probePoll is how often the session's stats are read meanwhile.
	probeWait = 200 * time.Millisecond
	probePoll = 5 * time.Millisecond
	// remeasuring is how many sessions are probed at once: a connect that starved the
	// processor leaves stale the estimates of many sessions, and their probes wait for
	// their turn (the next ping of each) rather than adding to the load.
	remeasuring = 16
)

// probeMessage is what a probe sends: a secret answer of id proto.ProbeID, which the
// agent drops.
var probeMessage = proto.Message{Type: proto.MsgSecret, Secret: &proto.Secret{ID: proto.ProbeID, Value: []byte{0}}}

// probeTimeout is the probe timeout of a path whose stats are st, as quic-go computes it
// (RFC 9002, section 6.2: the smoothed RTT plus four times its deviation, at least
// quic-go's timer granularity), without the peer's acknowledgement delay.
func probeTimeout(st quic.ConnectionStats) time.Duration {
	return st.SmoothedRTT + max(4*st.MeanDeviation, time.Millisecond)
}

// staleBound is the probe timeout above which the estimate of a path whose stats are
// st is stale: max(staleFloor, staleRatio x its least RTT sample).
func staleBound(st quic.ConnectionStats) time.Duration {
	return max(staleFloor, staleRatio*st.MinRTT)
}

// stale reports whether the RTT estimate of a path whose stats are st is stale.
func stale(st quic.ConnectionStats) bool { return probeTimeout(st) > staleBound(st) }

// probeAgain reports whether a session whose stats are st is to be probed at a ping,
// given left, the probe timeout its last burst of probes left it at while still stale (0
// when it has none): a stale estimate is probed, unless probes left it stale and it has
// not doubled since. A path whose round trips swing widely keeps a probe timeout over
// the bound however many samples it is given; probed at every ping, a few such sessions
// would hold every place (remeasuring) and leave the sessions a starved connect left
// stale, which probes do mend, waiting.
func probeAgain(st quic.ConnectionStats, left time.Duration) bool {
	return stale(st) && (left == 0 || probeTimeout(st) >= 2*left)
}

// samplesUnder is how many RTT samples of sample bring an estimate of smoothed RTT srtt
// and deviation dev to a probe timeout (probeTimeout) of bound or less, as quic-go moves
// it (RFC 9002, section 5.3); at most maxProbes. A 9 s handshake sample (deviation 4.5
// s) takes 33 samples of a millisecond to get under a second: the deviation, a quarter
// of the way to each sample's distance from the smoothed RTT, lags it.
func samplesUnder(srtt, dev, sample, bound time.Duration) int {
	s, d, r := srtt.Seconds(), dev.Seconds(), sample.Seconds()
	n := 0
	for ; n < maxProbes && time.Duration((s+max(4*d, time.Millisecond.Seconds()))*float64(time.Second)) > bound; n++ {
		d = 0.75*d + 0.25*math.Abs(s-r)
		s = 0.875*s + 0.125*r
	}
	return n
}

// remeasure starts probing session s, whose agent just pinged, when its RTT estimate is
// stale and no probe of it is running; once remeasuring sessions are probed, it leaves s
// to a later ping. A session whose estimate is sane costs one ConnectionStats call.
func (e *Endpoint) remeasure(s *session) {
	st := s.conn.ConnectionStats()
	left := time.Duration(s.probedLeft.Load())
	if left != 0 && !stale(st) {
		s.probedLeft.Store(0) // the path is sane again: the next stale estimate is probed
	}
	if !probeAgain(st, left) || !s.probing.CompareAndSwap(false, true) {
		return
	}
	select {
	case e.probing <- struct{}{}:
	default:
		s.probing.Store(false)
		return
	}
	e.wg.Go(func() {
		defer func() { <-e.probing; s.probing.Store(false) }()
		e.probe(s)
	})
}

// probe sends session s's agent probes, each once the agent acknowledged the one
// before (or probeWait passed), until s's estimate is no longer stale: twice as many
// at most as samplesUnder says it takes (a probe the agent acknowledges together with
// another gives one sample for two).
func (e *Endpoint) probe(s *session) {
	st := s.conn.ConnectionStats()
	budget := min(maxProbes, 2*samplesUnder(st.SmoothedRTT, st.MeanDeviation, st.MinRTT, staleBound(st)))
	e.remeasured.Add(1)
	e.log.Debug("agent session's RTT estimate stale: probing", "node", s.node, "role", s.role,
		"probeTimeout", probeTimeout(st), "minRTT", st.MinRTT, "probes", budget)
	defer func() {
		if stale(st) {
			s.probedLeft.Store(int64(probeTimeout(st))) // probed again only once it doubles (probeAgain)
		} else {
			s.probedLeft.Store(0)
		}
	}()
	for range budget {
		if !stale(st) {
			return
		}
		if e.answer(s, &probeMessage) != nil {
			return
		}
		e.probes.Add(1)
		if st = e.probeAnswered(s, st.PacketsReceived); st.PacketsReceived == 0 {
			return // the session or the endpoint ended
		}
	}
}

// probeAnswered waits until session s received a packet more than received (the agent's
// acknowledgement of a probe), or probeWait passed, and returns s's stats then; zero
// stats when the session or the endpoint ended.
func (e *Endpoint) probeAnswered(s *session, received uint64) quic.ConnectionStats {
	tick := time.NewTicker(probePoll)
	defer tick.Stop()
	deadline := time.Now().Add(probeWait)
	for {
		select {
		case <-s.conn.Context().Done():
			return quic.ConnectionStats{}
		case <-e.ctx.Done():
			return quic.ConnectionStats{}
		case <-tick.C:
		}
		if st := s.conn.ConnectionStats(); st.PacketsReceived > received || time.Now().After(deadline) {
			return st
		}
	}
}

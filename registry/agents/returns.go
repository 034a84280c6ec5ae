package agents

import (
	"math"
	"time"

	"github.com/better-compute/better-compute/proto"
	"github.com/better-compute/better-compute/registry/store"
)

// The return plan's starting point and bounds. An endpoint with nothing stored starts
// from defaultRate and defaultAdmission (what two cores did in the benchmark) and adapts
// them after each return it measures (adapt).
const (
	defaultRate, minRate, maxRate                = 900, 100, 20000
	defaultAdmission, minAdmission, maxAdmission = 128, 64, 192
	// sample is the period at which a return is measured.
	sample = 100 * time.Millisecond
	// stallRoom is the stall the admission bound leaves room for: a handshake's steps
	// waiting 100 ms for the processor filled 64 places at 900 a second (benchmarks.md).
	stallRoom = 100 * time.Millisecond
	// saturatedPercent and refusedPercent are the refusals, in percent of the agents
	// told, past which a return saturated the machine, and past which it refused more
	// than a return should: the stream is lowered only past the second.
	saturatedPercent, refusedPercent = 1, 5
	// idleHandshake is the mean handshake time under which a return that kept up barely
	// used the machine (the first packets it refused, if any, were refused in moments),
	// and the next asks twice as much: a handshake that waits for the processor takes
	// tens of milliseconds (benchmarks.md: 2.0-4.5 ms at 900 a second on a host that took
	// 1,400, 33-88 ms at its limit).
	idleHandshake = 10 * time.Millisecond
	// busyHandshake is the mean handshake time from which a return that kept up asks only
	// 25% more (at most what the moments of refused first packets showed). Between the
	// two lines the next stream is between the two answers in proportion: a return of
	// 10.8 ms is hardly busier than one of 9.9, and asking 1,800 after one and 1,125 after
	// the other made the second returns of the same host come back at 0.67x and 0.50x the
	// peer's rate (benchmarks.md, "A plan without a cliff at 10 ms").
	busyHandshake = 20 * time.Millisecond
)

// returnMeasure is what a return did: the handshakes completed; the attempts refused,
// by the agents' count (the endpoint's count of refused first packets runs ahead of
// them: quic-go asks admission again for each copy of a refused attempt's first packet
// it drops unanswered); those completed during the samples in which first packets were
// refused (the machine saturated) and how long those samples lasted; and the mean time
// from an attempt's first packet to its acceptance.
type returnMeasure struct {
	accepted, refusedAttempts int64
	saturatedAccepted         int64
	saturated                 time.Duration
	meanHandshake             time.Duration
}

// adapt is the plan for the next return, from the one the fleet was told and what its
// return did. Its refusals are attempts, by the agents' count: a share of the fleet. A
// return that refused more than refusedPercent of the fleet sets the stream at the
// handshakes completed a second while the machine was saturated (refusing first
// packets), what the machine did, and never above the stream it was told (more than
// that completed means the refused were coming back on top of the stream: the stream
// was not what outran the machine). One that saturated it but refused no more than that
// keeps its stream: a slower one would make the return longer to save refusals already
// within the bound (a refused agent comes back after the stream). One that was not
// saturated (refusals within saturatedPercent) and ran for a second or more at the
// planned rate asks 25% more next time, but no more than it completed a second in the
// moments it refused first packets, if it had any (the machine's limit showed there;
// asking past it saturated the next return), and never less than it was told; unless
// its handshakes took idleHandshake or less on average: then the machine barely worked,
// the first packets it refused, if any, were refused in moments (a collection's mark)
// and showed no limit, and the next return asks twice as much. Between idleHandshake
// and busyHandshake it asks between the two, in proportion (idleShare). The
// measured rate is kept whenever first packets were refused. The admission bound is
// the handshakes in flight the stream keeps at the measured handshake time (Little's
// law) and room for what arrives during a stall of stallRoom, within its bounds.
func adapt(plan store.AgentReturn, m returnMeasure) store.AgentReturn {
	next := plan
	next.Told, next.MeasuredRate = 0, 0
	next.Accepted, next.Refused, next.MeanHandshake = m.accepted, m.refusedAttempts, m.meanHandshake
	told := int64(plan.Told)
	saturated := m.refusedAttempts*100 > told*saturatedPercent && m.saturated > 0
	if m.saturated > 0 {
		next.MeasuredRate = float64(m.saturatedAccepted) / m.saturated.Seconds()
	}
	switch {
	case saturated && m.refusedAttempts*100 > told*refusedPercent:
		next.Rate = min(next.MeasuredRate, plan.Rate)
	case saturated:
		// Within the bound: the stream stays.
	case float64(plan.Told) >= plan.Rate && m.accepted*100 >= told*95:
		busy := 1.25 * plan.Rate
		if next.MeasuredRate > 0 {
			// It kept up, but its limit showed in the moments it refused first packets.
			busy = min(busy, max(next.MeasuredRate, plan.Rate))
		}
		// The shorter its handshakes, the less they waited for the processor: under
		// idleHandshake the machine barely worked, and what first packets it refused were
		// moments (a collection's mark), not its limit.
		idle := idleShare(m.meanHandshake)
		next.Rate = idle*2*plan.Rate + (1-idle)*busy
	}
	next.Rate = min(max(next.Rate, minRate), maxRate)
	if m.meanHandshake > 0 {
		next.Admission = int(math.Round(next.Rate * (m.meanHandshake + stallRoom).Seconds()))
	}
	next.Admission = min(max(next.Admission, minAdmission), maxAdmission)
	return next
}

// idleShare is how far a return that kept up, its handshakes taking mean on average,
// counts as one that barely used the machine: 1 at idleHandshake or under, 0 from
// busyHandshake on (or with nothing measured), in proportion between them.
func idleShare(mean time.Duration) float64 {
	if mean <= 0 {
		return 0
	}
	return min(1, max(0, float64(busyHandshake-mean)/float64(busyHandshake-idleHandshake)))
}

// reslotSpread is the spread a stop with plan names, within which an agent refused on its
// return tries again after the stream's end (streamEnd from the stop's start): sized from
// the share of its last measured return the machine refused (proto.ReslotSpreadFor), at
// most refusedPercent of it, since a return that refused more lowered the stream to what
// the machine did (adapt); a quarter of the stream when it has measured none
// (proto.ReslotSpread).
func reslotSpread(plan store.AgentReturn, streamEnd time.Duration) time.Duration {
	if plan.Accepted <= 0 {
		return proto.ReslotSpread(streamEnd)
	}
	return proto.ReslotSpreadFor(streamEnd, min(float64(plan.Refused)/float64(plan.Accepted), refusedPercent/100.0))
}

// streamStart is how long after the close began the stream of the n agents a stop tells
// starts: once telling them all takes (n/closeRate), so that a registry restarted at once
// listens again; or a quarter past the last measured restart, where that comes first,
// scaled up to a fleet larger than the one that restart's stop told (a close tells every
// agent, so a larger fleet takes longer to close). A registry that restarts faster than
// it tells 10,000 agents at closeRate (0.4-0.5 s against 1.25 s in the benchmark) would
// otherwise sit idle until the stream reached it (benchmarks.md, "The stream's start
// from the last restart").
func streamStart(n int, plan store.AgentReturn) time.Duration {
	telling := time.Duration(n) * time.Second / closeRate
	if plan.Restart <= 0 || plan.RestartTold <= 0 {
		return telling
	}
	scale := max(1, float64(n)/float64(plan.RestartTold))
	return min(telling, time.Duration(restartMargin*scale*float64(plan.Restart)))
}

// restartMargin is the share of the last measured restart the next stream waits for:
// a quarter more, for a restart a little slower than the last.
const restartMargin = 1.25

// measureRestart is plan with the restart that brought the endpoint up measured: from
// the moment its stop timed the stream from (plan.StoppedAt) until now, when it listens.
// A plan whose stop told no agent (none is due, or a return was measured since and no
// stop followed it: a crash), or a time off the clock (negative, or past maxReturn: a
// registry down for longer than any stream waits) measures nothing and keeps the last
// measured restart.
func measureRestart(plan store.AgentReturn, now time.Time) store.AgentReturn {
	if plan.Told <= 0 || plan.StoppedAt.IsZero() {
		return plan
	}
	if r := now.Sub(plan.StoppedAt); r > 0 && r <= maxReturn {
		plan.Restart, plan.RestartTold = r, plan.Told
	}
	return plan
}

// startPlan is the plan an endpoint starts with: the stored one, or the defaults.
func startPlan(stored store.AgentReturn, ok bool) store.AgentReturn {
	if !ok || stored.Rate <= 0 || stored.Admission <= 0 {
		return store.AgentReturn{Rate: defaultRate, Admission: defaultAdmission, Told: stored.Told, StoppedAt: stored.StoppedAt, Restart: stored.Restart, RestartTold: stored.RestartTold}
	}
	return stored
}

// measureReturn measures the return of the agents the last stop told to come back, until
// they are all back or three times the planned stream and 30 s have passed, then plans
// the next return with what it found (adapt), sets the admission bound, and stores the
// plan. A stop during the return leaves the plan as it was.
func (e *Endpoint) measureReturn(plan store.AgentReturn) {
	stream := time.Duration(float64(plan.Told) / plan.Rate * float64(time.Second))
	deadline := time.Now().Add(3*stream + 30*time.Second)
	tick := time.NewTicker(sample)
	defer tick.Stop()
	var m returnMeasure
	lastAccepted, lastRefused := e.adm.admitted.Load(), e.adm.refused.Load()
	for lastAccepted < int64(plan.Told) && time.Now().Before(deadline) {
		select {
		case <-e.ctx.Done():
			return
		case <-tick.C:
		}
		accepted, refused := e.adm.admitted.Load(), e.adm.refused.Load()
		if refused > lastRefused {
			m.saturatedAccepted += accepted - lastAccepted
			m.saturated += sample
		}
		lastAccepted, lastRefused = accepted, refused
	}
	m.accepted = lastAccepted
	// The agents refused come back last, re-slotted after the stream: wait for the hellos
	// of those accepted, a second at most, for their count of the attempts refused.
	for wait := time.Now().Add(time.Second); e.adm.hellos.Load() < lastAccepted && time.Now().Before(wait); {
		select {
		case <-e.ctx.Done():
			return
		case <-tick.C:
		}
	}
	m.refusedAttempts = e.adm.attemptsRefused(lastRefused)
	if n := e.adm.handshakes.Load(); n > 0 {
		m.meanHandshake = time.Duration(e.adm.handshakeTime.Load() / n)
	}
	next := adapt(plan, m)
	e.log.Info("agents returned", "told", plan.Told, "rate", plan.Rate, "accepted", m.accepted, "refused", m.refusedAttempts, "refusedFirstPackets", lastRefused,
		"saturatedRate", next.MeasuredRate, "meanHandshake", m.meanHandshake, "nextRate", next.Rate, "admission", next.Admission, "restart", next.Restart)
	if err := e.cfg.Store.Update(func(tx *store.Tx) error { return tx.PutAgentReturn(e.cfg.Replica, next) }); err != nil {
		e.log.Error("store the agents' return plan", "err", err)
	}
	e.mu.Lock()
	e.plan = next
	e.mu.Unlock()
	e.adm.limit.Store(int64(next.Admission))
}

// Return is the endpoint's plan for its fleet's next return: the stream and admission
// bound in use, and what the last measured return did.
func (e *Endpoint) Return() store.AgentReturn {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.plan
}

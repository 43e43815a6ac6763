package main

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"maps"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"time"

	"github.com/sqlelect/election"
)

// Clock faults: the private server's wall clock stepped (StepClock), as
// NTP or an operator steps a database host's, while the candidates'
// clocks run on. A healthy leader must outlast them: no term may end
// (trial.Deposed) and no two may act at once (overlap.go). With the
// leader SIGKILLed at once, the next must lead no later than a check
// interval after a plain SIGKILL can (failoverBound).
const (
	fClockForward     = "clock-forward"      // ahead by 3 s to 5 min for 0.2 to 3 s, then back to real time
	fClockBack        = "clock-back"         // behind, the same
	fClockStrobe      = "clock-strobe"       // ahead by 3 s to 1 min and back every 300 ms, for 2 to 5 s
	fClockSawtooth    = "clock-sawtooth"     // ahead by 3 s to 1 min and back every lease, 3 to 6 times
	fClockForwardKill = "clock-forward-kill" // ahead by 3 s to 1 min and the leader SIGKILLed, back once the next acts
	fClockBackKill    = "clock-back-kill"    // behind, the same
)

// clockFaults are drawn only when -fault-kinds names them: they need a
// private server under libfaketime (mysqltest.StartSteppable).
var clockFaults = []string{fClockForward, fClockBack, fClockStrobe, fClockSawtooth, fClockForwardKill, fClockBackKill}

// isClock reports whether fault steps the server's clock.
func isClock(fault string) bool { return slices.Contains(clockFaults, fault) }

// clockKills reports whether the clock fault SIGKILLs the leader too.
func clockKills(fault string) bool { return fault == fClockForwardKill || fault == fClockBackKill }

// steppedClockHits reports whether the clock faults are for contender:
// this library's strategies, which judge a leader by the server's clock,
// and plain GET_LOCK, whose timed waits follow it. The timeout recipes
// judge by it alone, unfenced: a step is their failure by design.
func steppedClockHits(contender string) bool {
	return isLibrary(contender) || contender == plainGetLock
}

// strobePeriod is how long a strobe holds each of its two offsets; a
// sawtooth holds each for a lease, long enough for every waiter to read the
// record on each, and for the leader to renew on each.
const strobePeriod = 300 * time.Millisecond

// alternation is how long a strobe or a sawtooth holds each offset.
func (a *arena) alternation(fault string) time.Duration {
	if fault == fClockSawtooth {
		return a.tm.Lease
	}
	return strobePeriod
}

// drawClock draws a clock fault's step, ahead of real time or behind it
// (negative), and how long the clock stays off real time (a kill's: until
// the next leader acts, not drawn).
func (a *arena) drawClock(fault string) (step, hold time.Duration) {
	r := a.clockRand
	switch fault {
	case fClockForward, fClockBack:
		step, hold = logUniform(r, 3*time.Second, 5*time.Minute), uniform(r, 200*time.Millisecond, 3*time.Second)
	case fClockStrobe:
		step, hold = logUniform(r, 3*time.Second, time.Minute), uniform(r, 2*time.Second, 5*time.Second)
	case fClockSawtooth:
		step, hold = logUniform(r, 3*time.Second, time.Minute), time.Duration(2*(3+r.IntN(4)))*a.alternation(fault)
	default:
		step = logUniform(r, 3*time.Second, time.Minute)
	}
	if fault == fClockBack || fault == fClockBackKill {
		step = -step
	}
	return step, hold
}

// logUniform draws from lo to hi with each tenfold as likely: steps of
// seconds as often as steps of minutes.
func logUniform(r *rand.Rand, lo, hi time.Duration) time.Duration {
	return time.Duration(float64(lo) * math.Pow(float64(hi)/float64(lo), r.Float64())).Round(time.Millisecond)
}

// uniform draws from lo to hi.
func uniform(r *rand.Rand, lo, hi time.Duration) time.Duration {
	return (lo + time.Duration(r.Int64N(int64(hi-lo)))).Round(time.Millisecond)
}

// termEnd is a term that ended during a clock fault.
type termEnd struct {
	ID      string  `json:"id"`
	Term    string  `json:"term"`
	Reason  string  `json:"reason"`                   // the leader's, from its end event
	History string  `json:"history_reason,omitempty"` // the election's history's, for this library's contenders
	AfterS  float64 `json:"after_s"`                  // since the step
}

// String names the end as the report prints it.
func (e termEnd) String() string { return fmt.Sprintf("term %s of %s ended %s", e.Term, e.ID, e.why()) }

// why is the leader's reason, and the history's if it differs.
func (e termEnd) why() string {
	s := cmp.Or(e.Reason, "(no reason)")
	if e.History != "" && e.History != e.Reason {
		s += " (history: " + e.History + ")"
	}
	return s
}

// stepClock injects a clock fault into the leader old: it steps the
// server's clock as drawn, SIGKILLs the leader too if the fault says so,
// brings the clock back to real time (for a kill, once the next leader
// acts, or the limit passed), then watches for the settle. A term that
// ended meanwhile was deposed; without a kill, a term that began is the
// failover the fault must not have caused.
func (a *arena) stepClock(ctx context.Context, tr trial, fault string, old event, limit time.Duration) (trial, error) {
	if clockKills(fault) {
		a.campaigning(ctx, limit) // as before a plain SIGKILL, whose failover bounds this one's
	}
	step, hold := a.drawClock(fault)
	tr.StepS, tr.HeldS = step.Seconds(), hold.Seconds()
	// However the trial ends, the server gets real time back.
	defer a.srv.StepClock(0)
	from := len(a.log)
	t0 := time.Now()
	tr.At = t0.UnixNano()
	if err := a.srv.StepClock(step); err != nil {
		return tr, err
	}
	newTerm := func(e event) bool { return e.Ev == "start" && e.Term != old.Term && e.At > t0.UnixNano() }
	switch {
	case clockKills(fault):
		p := a.proc(old.ID)
		if err := a.strike(ctx, fSIGKILL, p); err != nil {
			return tr, err
		}
		if e, ok := a.next(newTerm, limit); ok {
			tr.FailoverS = time.Unix(0, e.At).Sub(t0).Seconds()
		}
		if err := a.srv.StepClock(0); err != nil {
			return tr, err
		}
		tr.HeldS = time.Since(t0).Seconds()
		if err := a.heal(ctx, fSIGKILL, p); err != nil {
			return tr, err
		}
	case fault == fClockStrobe, fault == fClockSawtooth:
		for offset := step; time.Since(t0) < hold; {
			a.watch(a.alternation(fault))
			offset = step - offset // back to real time and ahead again, in turn
			if err := a.srv.StepClock(offset); err != nil {
				return tr, err
			}
		}
	default:
		a.watch(hold)
	}
	if err := a.srv.StepClock(0); err != nil {
		return tr, err
	}
	a.watch(a.clockSettle())
	a.drain()
	for _, e := range a.log[from:] {
		switch {
		case e.At < tr.At: // printed before the fault struck
		case e.Ev == "end":
			tr.Deposed = append(tr.Deposed, termEnd{ID: e.ID, Term: e.Term, Reason: e.Reason, AfterS: time.Unix(0, e.At).Sub(t0).Seconds()})
		case e.Ev == "exit" && e.ID == old.ID && !clockKills(fault):
			// Its stderr is not kept: a leader that crashed says no more.
			tr.Deposed = append(tr.Deposed, termEnd{ID: e.ID, Term: old.Term, Reason: "its process exited", AfterS: time.Unix(0, e.At).Sub(t0).Seconds()})
		case !clockKills(fault) && newTerm(e) && tr.FailoverS < 0:
			tr.FailoverS = time.Unix(0, e.At).Sub(t0).Seconds()
		}
	}
	return tr, nil
}

// clockSettle is how long a clock fault is watched once the clock is back
// to real time: a waiter that judged the leader on the stepped clock acts
// within a check interval of the step back, and the leader learns within
// an interval more; a lease leaves room for both, and for a GET_LOCK wait
// the step cut short.
func (a *arena) clockSettle() time.Duration { return a.tm.Lease }

// watch takes the events that arrive for d.
func (a *arena) watch(d time.Duration) { a.next(func(event) bool { return false }, d) }

// checkInterval is this library's CheckInterval as the candidates run it.
func (tm timing) checkInterval() time.Duration { return cmp.Or(tm.Check, tm.Interval) }

// nameHistoryReasons sets beside each deposed term's own reason the one
// its election's history keeps (terms: Operator.History), which may be the
// deputy's word (hang-killed) rather than the leader's.
func nameHistoryReasons(trials []trial, terms []election.TermRecord) {
	why := map[string]string{}
	for _, t := range terms {
		why[fmt.Sprint(t.Token)] = t.Reason
	}
	for i := range trials {
		for j := range trials[i].Deposed {
			trials[i].Deposed[j].History = why[trials[i].Deposed[j].Term]
		}
	}
}

// clockVerdict is what a chaos run's clock faults did.
type clockVerdict struct {
	Faults  map[string]int `json:"faults"`        // injected, by kind
	Deposed map[string]int `json:"deposed_terms"` // the terms they ended, by kind
	// Failover compares the kills' failover with plain SIGKILL's; nil if
	// no clock fault killed.
	Failover *failoverBound `json:"failover_bound,omitempty"`
}

// failoverBound is the bound on a clock kill's failover: a check interval
// past the latest a plain SIGKILL fails over, since a renewal stamped
// before the step and first read after it counts as made at that read,
// up to a look later than it was. How late a plain SIGKILL fails over
// depends on where it falls between the leader's renewals and the
// waiters' looks, which a run's few SIGKILLs may all have found early:
// under LeaseRow that latest is, by design, L + S + C after the kill, or
// the slowest SIGKILL's of the run if it was slower.
type failoverBound struct {
	SigkillRuns int     `json:"sigkill_runs"`
	SigkillMaxS float64 `json:"sigkill_max_s"`      // -1: no sigkill failed over
	DesignS     float64 `json:"design_s,omitempty"` // L + S + C under LeaseRow
	CheckS      float64 `json:"check_interval_s"`
	BoundS      float64 `json:"bound_s"`    // -1: no bound (Missing says why)
	Over        int     `json:"over_bound"` // clock kills past the bound, or with no failover within the limit
	Missing     string  `json:"missing,omitempty"`
}

// checkClock sums up the clock faults among trials and adds to v a
// violation for each term they ended and for each clock kill whose next
// leader came past failoverBound, or not within the limit.
func checkClock(a *arena, trials []trial, v *verdict) clockVerdict {
	cv := clockVerdict{Faults: map[string]int{}, Deposed: map[string]int{}}
	b := &failoverBound{SigkillMaxS: -1, CheckS: a.tm.checkInterval().Seconds(), BoundS: -1}
	if library(a.contender) == libLease {
		b.DesignS = (a.tm.Lease + a.tm.Margin + a.tm.checkInterval()).Seconds()
	}
	kills := false
	for i, t := range trials {
		switch {
		case t.NoLeader:
			continue
		case t.Fault == fSIGKILL:
			b.SigkillRuns++
			b.SigkillMaxS = max(b.SigkillMaxS, t.FailoverS)
			continue
		case !isClock(t.Fault):
			continue
		}
		kills = kills || clockKills(t.Fault)
		cv.Faults[t.Fault]++
		cv.Deposed[t.Fault] += len(t.Deposed)
		for _, e := range t.Deposed {
			v.Violations = append(v.Violations, fmt.Sprintf("a clock fault must end no term: %s %s after %s (trial %d)\n%s",
				e, secs(e.AfterS), describeClock(t), i+1, a.aroundTerms(time.Unix(0, t.At).Add(time.Duration(e.AfterS*float64(time.Second))))))
		}
	}
	if !kills {
		return cv
	}
	cv.Failover = b
	if b.SigkillMaxS < 0 {
		b.Missing = "no plain sigkill failed over in this run to bound the clock kills' failover by: add sigkill to -fault-kinds"
		return cv
	}
	b.BoundS = max(b.SigkillMaxS, b.DesignS) + b.CheckS
	for i, t := range trials {
		if !clockKills(t.Fault) || t.NoLeader || t.FailoverS >= 0 && t.FailoverS <= b.BoundS {
			continue
		}
		b.Over++
		took := "no new leader within the limit"
		if t.FailoverS >= 0 {
			took = "the next leader acted after " + secs(t.FailoverS)
		}
		v.Violations = append(v.Violations, fmt.Sprintf("%s (trial %d): %s, past %s",
			describeClock(t), i+1, took, b))
	}
	return cv
}

// describeClock says what a clock trial did to the server's clock.
func describeClock(t trial) string {
	what := "stepped"
	switch {
	case t.Fault == fClockStrobe, t.Fault == fClockSawtooth:
		what = "strobed"
	case clockKills(t.Fault):
		what = "stepped, the leader killed,"
	}
	return fmt.Sprintf("%s (the server's clock %s %+.1f s for %s)", t.Fault, what, t.StepS, secs(t.HeldS))
}

// printClock writes the clock faults' tables: how far each kind stepped
// the clock and for how long, the terms they ended and why; then the
// kills' failover beside plain SIGKILL's, against the bound.
func printClock(w io.Writer, cv clockVerdict, trials []trial, sums []summary) {
	tw := newTable(w, "CLOCK FAULT\tRUNS\tSTEPS\tHELD\tDEPOSED TERMS\tHOW THEY ENDED")
	for _, f := range clockFaults {
		if cv.Faults[f] == 0 {
			continue
		}
		lo, hi, short, long := math.Inf(1), math.Inf(-1), math.Inf(1), math.Inf(-1)
		why := map[string]int{}
		for _, t := range trials {
			if t.Fault != f || t.NoLeader {
				continue
			}
			lo, hi, short, long = min(lo, t.StepS), max(hi, t.StepS), min(short, t.HeldS), max(long, t.HeldS)
			for _, e := range t.Deposed {
				why[e.why()]++
			}
		}
		var whys []string
		for _, r := range slices.Sorted(maps.Keys(why)) {
			whys = append(whys, fmt.Sprintf("%s ×%d", r, why[r]))
		}
		fmt.Fprintf(tw, "%s\t%d\t%+.1f .. %+.1f s\t%s .. %s\t%d\t%s\n", f, cv.Faults[f], lo, hi, secs(short), secs(long), cv.Deposed[f], cmp.Or(strings.Join(whys, ", "), "-"))
	}
	tw.Flush()
	b := cv.Failover
	if b == nil {
		return
	}
	fmt.Fprintln(w)
	tw = newTable(w, "KILL\tRUNS\tFAILOVER p50\tMAX\tNO FAILOVER\tPAST THE BOUND")
	for _, s := range sums {
		if s.Fault != fSIGKILL && !clockKills(s.Fault) {
			continue
		}
		over := "-"
		if clockKills(s.Fault) && b.BoundS >= 0 {
			n := 0
			for _, t := range trials {
				if t.Fault == s.Fault && !t.NoLeader && (t.FailoverS < 0 || t.FailoverS > b.BoundS) {
					n++
				}
			}
			over = fmt.Sprint(n)
		}
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%d\t%s\n", s.Fault, s.Runs, secs(s.P50), secs(s.Max), s.NoFail, over)
	}
	tw.Flush()
	if b.Missing != "" {
		fmt.Fprintln(w, "bound: none:", b.Missing)
		return
	}
	fmt.Fprintf(w, "bound: %s\n", b)
}

// String says the bound and where it comes from.
func (b *failoverBound) String() string {
	from := fmt.Sprintf("the slowest plain sigkill's %s", secs(b.SigkillMaxS))
	if b.DesignS > b.SigkillMaxS {
		from = fmt.Sprintf("L + S + C = %s, the latest a plain sigkill fails over by design (the slowest of this run: %s)", secs(b.DesignS), secs(b.SigkillMaxS))
	}
	return fmt.Sprintf("%s: %s + the check interval %s", secs(b.BoundS), from, secs(b.CheckS))
}

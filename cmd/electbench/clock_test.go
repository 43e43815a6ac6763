package main

import (
	"strings"
	"testing"
	"time"
)

// near reports whether x is y, but for float rounding.
func near(x, y float64) bool { return x-y < 1e-9 && y-x < 1e-9 }

// The clock faults' own verdict, from hand-made trials: a term a clock
// fault ended is a violation, and so is a clock kill's failover past the
// slowest sigkill's plus the check interval, or none; without a sigkill
// there is no bound, and the verdict says to add one.
func TestCheckClock(t *testing.T) {
	a := &arena{arenaSpec: arenaSpec{tm: timing{Interval: 100 * time.Millisecond, Check: 200 * time.Millisecond}}}
	trials := []trial{
		{Fault: fSIGKILL, At: 1, FailoverS: 2.8},
		{Fault: fClockBackKill, At: 2, FailoverS: 3.05, StepS: -10}, // within 2.9 + 0.2
		{Fault: fClockBackKill, At: 3, FailoverS: 12.8, StepS: -10}, // past it
		{Fault: fClockForwardKill, At: 4, FailoverS: -1, StepS: 10}, // none within the limit
		{Fault: fClockForwardKill, NoLeader: true},                  // struck nothing
		{Fault: fClockForward, At: 5, FailoverS: 0.2, StepS: 60, HeldS: 1, Deposed: []termEnd{{ID: "c1", Term: "7", Reason: "lock-lost", AfterS: 0.2}}},
		{Fault: fClockStrobe, At: 6, FailoverS: -1, StepS: 5, HeldS: 3},
		{Fault: fSIGKILL, At: 7, FailoverS: 2.9},
	}
	var v verdict
	cv := checkClock(a, trials, &v)
	b := cv.Failover
	if b == nil || b.SigkillRuns != 2 || b.SigkillMaxS != 2.9 || !near(b.BoundS, 3.1) || b.Over != 2 {
		t.Fatalf("bound %+v", b)
	}
	if cv.Faults[fClockForwardKill] != 1 || cv.Deposed[fClockForward] != 1 || cv.Deposed[fClockStrobe] != 0 {
		t.Errorf("faults %v, deposed %v", cv.Faults, cv.Deposed)
	}
	wants := []string{"term 7 of c1 ended lock-lost", "(trial 3): the next leader acted after 12.80 s, past 3.10 s", "(trial 4): no new leader within the limit"}
	if len(v.Violations) != len(wants) {
		t.Fatalf("violations %q, want %d", v.Violations, len(wants))
	}
	for i, want := range wants {
		if !strings.Contains(v.Violations[i], want) {
			t.Errorf("violation %d: %q, want %q", i, v.Violations[i], want)
		}
	}
	v = verdict{}
	if cv := checkClock(a, trials[1:4], &v); cv.Failover == nil || cv.Failover.BoundS >= 0 || !strings.Contains(cv.Failover.Missing, "add sigkill") || len(v.Violations) != 0 {
		t.Errorf("without a sigkill: %+v, %q", cv.Failover, v.Violations)
	}
}

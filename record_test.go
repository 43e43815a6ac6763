package election

import (
	"testing"
	"time"
)

// The record's rule, from one read: whether the term it names may still
// act (Leading), whether its session must be killed (overdue), what a
// term that follows it owes (lockDelay) and when it could act no longer
// (lastActed).
func TestRecordRule(t *testing.T) {
	const expiry = 6 * time.Second
	now := time.Date(2026, 11, 26, 12, 0, 0, 0, time.UTC)
	lease := func(state string, ago time.Duration) Record {
		return Record{Strategy: LeaseRow.String(), State: state, Renewed: now.Add(-ago), RenewedAgo: ago, Expiry: expiry}
	}
	getLock := func(state string, ago time.Duration, lockHeldBy uint64) Record {
		return Record{Strategy: GetLock.String(), State: state, ConnID: 7, LockConnID: lockHeldBy, Renewed: now.Add(-ago), RenewedAgo: ago, Expiry: expiry}
	}
	demoted := func(r Record, ago time.Duration) Record {
		r.demoted, r.DemotedAgo = true, ago
		return r
	}
	for _, tc := range []struct {
		name      string
		rec       Record
		leading   bool
		overdue   string
		lockDelay time.Duration
		lastActed time.Time
	}{
		{"no record", Record{}, false, "", 0, time.Time{}},
		{"lease renewed", lease(stateLeading, time.Second), true, "", 0, now},
		{"lease renewed at its expiry", lease(stateLeading, expiry), true, "", 0, now},
		{"lease stale", lease(stateLeading, expiry+1), false, "", 0, now.Add(-1)},
		{"lease asked to step down", demoted(lease(stateLeading, time.Second), time.Second), true, "", expiry - time.Second, now},
		{"lease that ignored a demotion", demoted(lease(stateLeading, time.Second), expiry+1), false, "", expiry - time.Second, now},
		{"lease resigned", lease(stateResigned, time.Second), false, "", 0, now},
		{"get_lock holding", getLock(stateLeading, time.Second, 7), true, "", 0, now},
		{"get_lock whose lock moved", getLock(stateLeading, time.Second, 8), false, "", 0, now},
		{"get_lock whose lock is free", getLock(stateLeading, time.Second, 0), false, "", 0, now},
		{"get_lock stuck in a query", getLock(stateLeading, expiry+1, 7), false, stateHangKilled, 0, now.Add(-1)},
		{"get_lock that ignored a demotion", demoted(getLock(stateLeading, time.Second, 7), expiry+1), true, stateDemoteKilled, expiry - time.Second, now},
		{"get_lock killed as stuck", getLock(stateHangKilled, 2*time.Second, 0), false, "", expiry - 2*time.Second, now},
		{"get_lock demoted, then its session lost", demoted(getLock(stateSessionLost, 2*time.Second, 0), time.Second), false, "", expiry - 2*time.Second, now},
		{"get_lock session lost", getLock(stateSessionLost, 2*time.Second, 0), false, "", 0, now},
		{"get_lock handed over", demoted(getLock(stateHandedOver, 2*time.Second, 0), time.Second), false, "", 0, now},
	} {
		r := tc.rec
		if got := r.Leading(); got != tc.leading {
			t.Errorf("%s: Leading %v, want %v", tc.name, got, tc.leading)
		}
		if got := r.overdue(); got != tc.overdue {
			t.Errorf("%s: overdue %q, want %q", tc.name, got, tc.overdue)
		}
		if got := r.lockDelay(); got != tc.lockDelay {
			t.Errorf("%s: lockDelay %v, want %v", tc.name, got, tc.lockDelay)
		}
		if got := r.lastActed(now); !got.Equal(tc.lastActed) {
			t.Errorf("%s: lastActed %v, want %v", tc.name, got, tc.lastActed)
		}
	}
}

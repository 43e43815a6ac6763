package election

import (
	"testing"
	"time"
)

// The deputy waits until CheckInterval after the leader it read could
// first be overdue (its renewal, or its ignored demotion, older than its
// lease plus margin), capped at its own lease plus margin, and at least
// CheckInterval; CheckInterval while no GetLock term holds the lock as
// recorded.
func TestWatchFor(t *testing.T) {
	cfg := Config{Lease: 2 * time.Second, Margin: time.Second, CheckInterval: 200 * time.Millisecond}
	ms := time.Millisecond
	leading := Record{State: stateLeading, Strategy: GetLock.String(), ConnID: 7, LockConnID: 7, Expiry: 3 * time.Second}
	with := func(f func(*Record)) Record { r := leading; f(&r); return r }
	for _, c := range []struct {
		name string
		rec  Record
		want time.Duration
	}{
		{"renewed just now", with(func(r *Record) { r.RenewedAgo = 0 }), 3200 * ms},
		{"renewed a second ago", with(func(r *Record) { r.RenewedAgo = time.Second }), 2200 * ms},
		{"overdue by now", with(func(r *Record) { r.RenewedAgo = 4 * time.Second }), 200 * ms},
		{"a longer expiry than ours", with(func(r *Record) { r.Expiry = 10 * time.Second }), 3200 * ms},
		{"demoted 2.5 s ago", with(func(r *Record) { r.demoted, r.DemotedAgo = true, 2500*ms }), 700 * ms},
		{"demoted, renewal sooner due", with(func(r *Record) { r.RenewedAgo, r.demoted, r.DemotedAgo = 2900*ms, true, 0 }), 300 * ms},
		{"ended", with(func(r *Record) { r.State = stateResigned }), 200 * ms},
		{"a winner yet to claim", with(func(r *Record) { r.LockConnID = 8 }), 200 * ms},
		{"lock free", with(func(r *Record) { r.LockConnID = 0 }), 200 * ms},
		{"a lease", with(func(r *Record) { r.Strategy = LeaseRow.String() }), 200 * ms},
	} {
		if got := watchFor(c.rec, cfg); got != c.want {
			t.Errorf("%s: watchFor = %v, want %v", c.name, got, c.want)
		}
	}
}

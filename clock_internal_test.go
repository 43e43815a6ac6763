package election

import (
	"testing"
	"time"
)

// at is a reading of a server whose clock is off (the server's minus real
// time) when a statement sent at sent (ms since t0) took rtt ms, and ran
// halfway through.
func at(t0 time.Time, offset time.Duration, sent, rtt int) reading {
	s := t0.Add(time.Duration(sent) * time.Millisecond)
	run := s.Add(time.Duration(rtt) * time.Millisecond / 2)
	return reading{serverUS: run.Add(offset).UnixMicro(), sent: s, recv: s.Add(time.Duration(rtt) * time.Millisecond)}
}

// The watch sees a step of the server's clock between two readings,
// forward or back, and nothing else: not the round trips, not readings
// that overlap or come out of order, not a rate within NTP's.
func TestServerClockSeesSteps(t *testing.T) {
	t0 := time.Now()
	hour := time.Hour
	for _, tc := range []struct {
		name string
		a, b reading
		step bool
	}{
		{"no step", at(t0, hour, 0, 1), at(t0, hour, 200, 1), false},
		{"long round trips", at(t0, hour, 0, 300), at(t0, hour, 1000, 900), false},
		{"overlapping", at(t0, hour, 0, 50), at(t0, hour, 10, 5), false},
		{"out of order", at(t0, hour, 100, 2), at(t0, hour, 0, 2), false},
		{"a rate 500 ppm off over an hour", at(t0, 0, 0, 1), at(t0, 1800*time.Millisecond, 3600_000, 1), false},
		{"forward 10 s", at(t0, 0, 0, 1), at(t0, 10*time.Second, 200, 1), true},
		{"back 10 s", at(t0, 0, 0, 1), at(t0, -10*time.Second, 200, 1), true},
		{"forward 20 ms", at(t0, 0, 0, 1), at(t0, 20*time.Millisecond, 200, 1), true},
		{"a second server, 50 ms apart", at(t0, 0, 0, 1), at(t0, -50*time.Millisecond, 200, 1), true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var c serverClock
			c.see(tc.a)
			step, anchor := c.see(tc.b)
			if (step != 0) != tc.step {
				t.Fatalf("step %v, want a step: %v", step, tc.step)
			}
			if want := tc.a; tc.step {
				if anchor != tc.b {
					t.Errorf("the run begins at %+v, want the reading after the step", anchor)
				}
			} else if anchor != want {
				t.Errorf("the run begins at %+v, want the first reading", anchor)
			}
		})
	}
}

// A stamp is placed on the local clock by the reading's offset, but never
// after the reading's receipt nor before the run's first receipt: a stamp
// from before a step is as old as the run at most.
func TestStampedBy(t *testing.T) {
	t0 := time.Now()
	first := at(t0, 0, 0, 2)
	r := at(t0, 0, 5000, 2)
	us := func(d time.Duration) int64 { return t0.Add(d).UnixMicro() }
	for _, tc := range []struct {
		name  string
		stamp int64
		want  time.Time
	}{
		{"within the run", us(4 * time.Second), r.recv.Add(-time.Duration(r.serverUS-us(4*time.Second)) * time.Microsecond)},
		{"before the run", us(-time.Hour), first.recv},
		{"ahead of the reading", us(time.Hour), r.recv},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := stampedBy(tc.stamp, r, first); !got.Equal(tc.want) {
				t.Errorf("stamped by %v, want %v", got.Sub(t0), tc.want.Sub(t0))
			}
		})
	}
}

// A value once seen only ages: seen again after the server's clock went
// back (a later bound), it keeps its first bound; a new value starts anew.
func TestSightingOnlyAges(t *testing.T) {
	t0 := time.Now()
	var s sighting
	if got := s.see(7, 100, t0); !got.Equal(t0) {
		t.Fatalf("first sight: %v", got)
	}
	if got := s.see(7, 100, t0.Add(time.Minute)); !got.Equal(t0) {
		t.Errorf("seen again with a later bound: %v, want the first", got.Sub(t0))
	}
	if got := s.see(7, 100, t0.Add(-time.Second)); !got.Equal(t0.Add(-time.Second)) {
		t.Errorf("seen again with an earlier bound: %v, want it", got.Sub(t0))
	}
	if got := s.see(7, 101, t0.Add(time.Minute)); !got.Equal(t0.Add(time.Minute)) {
		t.Errorf("a new renewal: %v, want its own bound", got.Sub(t0))
	}
	if got := s.see(8, 101, t0.Add(2*time.Minute)); !got.Equal(t0.Add(2 * time.Minute)) {
		t.Errorf("the same stamp in another term: %v, want its own bound", got.Sub(t0))
	}
}

// The record's rule, on a vouched read, decides by the reader's ages, not
// the server's: a renewal the server's clock calls an hour old, which the
// reader first saw a moment ago, is fresh; one it has seen unchanged for
// longer than the lease plus margin is stale, whatever the server says.
func TestRuleOnVouchedAges(t *testing.T) {
	now := time.Now()
	rec := Record{State: stateLeading, Strategy: LeaseRow.String(), Expiry: 3 * time.Second, RenewedAgo: time.Hour}
	if !rec.stale() {
		t.Fatal("a record read once is stale by the server's clock")
	}
	rec.read, rec.renewedBy = now, now.Add(-time.Second)
	if !rec.Leading() {
		t.Error("a renewal first seen a second ago, an hour old by the server's clock, is not leading")
	}
	rec.RenewedAgo, rec.renewedBy = 0, now.Add(-4*time.Second)
	if rec.Leading() {
		t.Error("a renewal seen unchanged for 4 s, with a lease plus margin of 3 s, leads")
	}
	if d := rec.lockDelay(); d != 0 {
		t.Errorf("lock-delay %v after a stale term that was not forced out", d)
	}
	rec.demoted, rec.renewedBy = true, now.Add(-time.Second)
	if d := rec.lockDelay(); d != 2*time.Second {
		t.Errorf("lock-delay %v after a demoted term renewed a second ago by the reader's watch, want 2s", d)
	}
}

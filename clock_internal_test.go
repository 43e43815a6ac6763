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

// The watch sees a step of the server's clock between readings, forward or
// back, and nothing else: not the round trips, not readings that overlap or
// come out of order, not a rate within NTP's. A slow reading does not hide
// a step the run's quicker readings bound; a long pause starts a new run,
// silently.
func TestServerClockSeesSteps(t *testing.T) {
	t0 := time.Now()
	hour := time.Hour
	for _, tc := range []struct {
		name     string
		readings []reading
		step     bool // the last reading saw a step
		newRun   bool // the last reading starts a run
	}{
		{"no step", []reading{at(t0, hour, 0, 1), at(t0, hour, 200, 1)}, false, false},
		{"long round trips", []reading{at(t0, hour, 0, 300), at(t0, hour, 1000, 900)}, false, false},
		{"overlapping", []reading{at(t0, hour, 0, 50), at(t0, hour, 10, 5)}, false, false},
		{"out of order", []reading{at(t0, hour, 100, 2), at(t0, hour, 0, 2)}, false, false},
		{"a rate 500 ppm off over 10 s, read every second", rated(t0, 500), false, false},
		{"forward 10 s", []reading{at(t0, 0, 0, 1), at(t0, 10*time.Second, 200, 1)}, true, true},
		{"back 10 s", []reading{at(t0, 0, 0, 1), at(t0, -10*time.Second, 200, 1)}, true, true},
		{"forward 20 ms", []reading{at(t0, 0, 0, 1), at(t0, 20*time.Millisecond, 200, 1)}, true, true},
		{"forward 400 ms under a slow reading of 1 s", []reading{at(t0, 0, 0, 1), at(t0, 0, 100, 1000), at(t0, 400*time.Millisecond, 1200, 1)}, true, true},
		{"a second server, 50 ms apart", []reading{at(t0, 0, 0, 1), at(t0, -50*time.Millisecond, 200, 1)}, true, true},
		{"a pause of a minute", []reading{at(t0, 0, 0, 1), at(t0, 0, 60_000, 1)}, false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var c serverClock
			var step time.Duration
			var p placing
			for _, r := range tc.readings {
				step, p = c.see(r)
			}
			last := tc.readings[len(tc.readings)-1]
			if (step != 0) != tc.step {
				t.Errorf("step %v, want a step: %v", step, tc.step)
			}
			if newRun := p.first.Equal(last.recv); newRun != tc.newRun {
				t.Errorf("the run begins %v after the first reading's receipt, want a new run: %v", p.first.Sub(tc.readings[0].recv), tc.newRun)
			}
		})
	}
}

// rated is readings a second apart over 10 s of a server whose clock runs
// ppm faster than the local one.
func rated(t0 time.Time, ppm int) []reading {
	var rs []reading
	for i := range 11 {
		rs = append(rs, at(t0, time.Duration(i*ppm)*time.Millisecond/1000, i*1000, 1))
	}
	return rs
}

// A stamp is placed on the local clock by the run's offset, but never after
// the reading's receipt nor before the run's first receipt: a stamp from
// before a step is as old as the run at most.
func TestStampedBy(t *testing.T) {
	t0 := time.Now()
	var c serverClock
	first := at(t0, time.Hour, 0, 2)
	c.see(first)
	r := at(t0, time.Hour, 5000, 2)
	_, p := c.see(r)
	us := func(d time.Duration) int64 { return t0.Add(time.Hour + d).UnixMicro() }
	for _, tc := range []struct {
		name  string
		stamp int64
		lo    time.Duration // the instant it is placed at is no earlier than this after t0
		hi    time.Duration // and no later
	}{
		{"within the run", us(4 * time.Second), 4 * time.Second, 4*time.Second + 2*time.Millisecond},
		{"before the run", us(-time.Hour), first.recv.Sub(t0), first.recv.Sub(t0)},
		{"ahead of the reading", us(time.Hour), r.recv.Sub(t0), r.recv.Sub(t0)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := p.stampedBy(tc.stamp).Sub(t0); got < tc.lo || got > tc.hi {
				t.Errorf("placed %v after t0, want %v to %v", got, tc.lo, tc.hi)
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

package election

import (
	"testing"
	"time"
)

// Only a readTimeout's cuts teach a limit: two cuts in a row after the
// same time. Faults cut waits after random times, and a wait that outlasts
// a cut shows no readTimeout made it. (TestReadTimeoutBelowTheWaits runs
// the real cuts.)
func TestReadLimitLearnsOnlyRepeatedCuts(t *testing.T) {
	const ms = time.Millisecond
	type wait struct {
		ran      time.Duration
		cut      bool
		wantStep time.Duration // what ended returns
	}
	for _, tc := range []struct {
		name  string
		waits []wait
		fit   time.Duration // fit(time.Hour) afterwards
	}{
		{"two cuts after the same time", []wait{{500 * ms, true, 0}, {540 * ms, true, 250 * ms}}, 250 * ms},
		{"cuts after different times", []wait{{300 * ms, true, 0}, {900 * ms, true, 0}, {20 * ms, true, 0}}, time.Hour},
		{"a wait outlasts the first cut", []wait{{500 * ms, true, 0}, {time.Second, false, 0}, {500 * ms, true, 0}}, time.Hour},
		{"a shorter wait says nothing", []wait{{500 * ms, true, 0}, {100 * ms, false, 0}, {500 * ms, true, 250 * ms}}, 250 * ms},
		{"learnt once", []wait{{500 * ms, true, 0}, {500 * ms, true, 250 * ms}, {500 * ms, true, 0}, {500 * ms, true, 0}}, 250 * ms},
	} {
		var l readLimit
		for i, w := range tc.waits {
			if got := l.ended(w.ran, w.cut); got != w.wantStep {
				t.Errorf("%s: wait %d (%v, cut %v) taught step %v, want %v", tc.name, i, w.ran, w.cut, got, w.wantStep)
			}
		}
		if got := l.fit(time.Hour); got != tc.fit {
			t.Errorf("%s: an hour's wait fits as %v, want %v", tc.name, got, tc.fit)
		}
	}
}

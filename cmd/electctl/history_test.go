package main

import (
	"testing"
	"time"

	"github.com/sqlelect/election"
)

// A term's duration is its leader's measure where it recorded one, and
// says how far the server's clock moved beside it when the server's times
// disagree by more than round trips: held still while the clock was
// stepped back, or jumped when it was stepped forward.
func TestDurationSaysTheClockMoved(t *testing.T) {
	t0 := time.Date(2026, 11, 28, 12, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name string
		term election.TermRecord
		want string
	}{
		{"going on", election.TermRecord{Started: t0}, "-"},
		{"no measure of its leader's (a crash)", election.TermRecord{Started: t0, Ended: t0.Add(3 * time.Second)}, "3s"},
		{"the clocks agree", election.TermRecord{Started: t0, Ended: t0.Add(3*time.Second + 300*time.Millisecond), Lasted: 3 * time.Second}, "3s"},
		{"stepped forward", election.TermRecord{Started: t0, Ended: t0.Add(13 * time.Second), Lasted: 3 * time.Second}, "3s (the server's clock moved +10s)"},
		{"held still while stepped back", election.TermRecord{Started: t0, Ended: t0, Lasted: 3 * time.Second}, "3s (the server's clock moved -3s)"},
	} {
		if got := duration(tc.term); got != tc.want {
			t.Errorf("%s: %q, want %q", tc.name, got, tc.want)
		}
	}
}

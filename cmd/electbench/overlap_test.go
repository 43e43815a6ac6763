package main

import (
	"slices"
	"strings"
	"testing"
	"time"
)

// The acting spans' overlaps, from hand-made histories: spans that touch
// do not overlap, a span inside another overlaps for its whole length, a
// killed leader acts until its process's exit and no longer, a term whose
// process never ended acts to the end of the log; each overlap goes to the
// trial during which it began (one in which nobody led struck nothing),
// or to none before the first fault and once the faults stopped; and only
// those during a clock fault or none are violations.
func TestActingOverlaps(t *testing.T) {
	ms := func(n int) int64 { return int64(n) * int64(time.Millisecond) }
	start := func(id, term string, at int) event { return event{Ev: "start", ID: id, Term: term, At: ms(at)} }
	end := func(id, term string, at int) event { return event{Ev: "end", ID: id, Term: term, At: ms(at)} }
	log := []event{
		start("c0", "1", 10), end("c0", "1", 50), start("c1", "2", 50), end("c1", "2", 90), // touching
		start("c0", "3", 110), start("c1", "4", 140), end("c0", "3", 150), end("c1", "4", 180), // 10 ms, during sigstop
		start("c2", "5", 205), start("c0", "6", 210), end("c0", "6", 220), end("c2", "5", 280), // nested, 10 ms, during clock-forward
		start("c1", "7", 310), start("c2", "8", 320), {Ev: "exit", ID: "c1", At: ms(330)}, // killed: 10 ms, during kill-connection
		start("c1", "9", 335), end("c2", "8", 350), end("c1", "9", 360), // c1 again, after c2's: 15 ms
		start("c0", "10", 410), start("c1", "11", 415), end("c0", "10", 420), end("c1", "11", 430), // 5 ms, once stopped
		start("c2", "12", 440), start("c0", "13", 450), end("c0", "13", 455), {Ev: "write", ID: "c2", Term: "12", At: ms(470)}, // never ended: 5 ms
	}
	trials := []trial{
		{Fault: fSIGSTOP, At: ms(100)},
		{Fault: fClockForward, At: ms(200)},
		{Fault: fSIGKILL, NoLeader: true},
		{Fault: fKillConn, At: ms(300)},
	}
	ov := actingOverlaps(log, trials, time.Unix(0, ms(400)))
	type got struct {
		first, second string
		ms            int
		trial         int
		fault         string
	}
	var overlaps []got
	for _, o := range ov.Overlaps {
		overlaps = append(overlaps, got{o.First, o.Second, int(time.Duration(o.S * float64(time.Second)).Round(time.Millisecond).Milliseconds()), o.Trial, o.Fault})
	}
	want := []got{
		{"term 3 of c0", "term 4 of c1", 10, 0, fSIGSTOP},
		{"term 5 of c2", "term 6 of c0", 10, 1, fClockForward},
		{"term 7 of c1", "term 8 of c2", 10, 3, fKillConn},
		{"term 8 of c2", "term 9 of c1", 15, 3, fKillConn},
		{"term 10 of c0", "term 11 of c1", 5, -1, noFault},
		{"term 12 of c2", "term 13 of c0", 5, -1, noFault},
	}
	if !slices.Equal(overlaps, want) {
		t.Errorf("overlaps:\n%v\nwant\n%v", overlaps, want)
	}
	if s := ov.ByFault[fKillConn]; s == nil || s.Count != 2 || !near(s.TotalS, 0.025) || !near(s.WorstS, 0.015) || !near(ov.TotalS, 0.055) || !near(ov.WorstS, 0.015) {
		t.Errorf("sums: kill-connection %+v, total %v, worst %v", s, ov.TotalS, ov.WorstS)
	}
	var v verdict
	checkOverlaps(&arena{log: log}, ov, &v)
	if len(v.Violations) != 3 || !strings.Contains(v.Violations[0], "during clock-forward (trial 2)") ||
		!strings.Contains(v.Violations[1], "during no fault") || !strings.Contains(v.Violations[2], "term 12 of c2 and term 13 of c0") {
		t.Errorf("violations: %q, want the clock fault's and the two outside every fault", v.Violations)
	}
}

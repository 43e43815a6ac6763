package timeline

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

var t0 = time.Date(2026, 11, 28, 12, 0, 0, 0, time.UTC)

func at(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }

// sample is a history with every kind of end: a hand-over, kills, a gap
// nobody led, terms too short for their token, and a term leading now.
func sample() []Term {
	return []Term{
		{Token: 1000001, Leader: "host-a", Started: at(0), Ended: at(20), Reason: "handed-over"},
		{Token: 1000002, Leader: "host-b", Started: at(20), Ended: at(35), Reason: "hang-killed"},
		{Token: 1000003, Leader: "host-c", Started: at(41), Ended: at(41.2), Reason: "lease-expired"},
		{Token: 1000004, Leader: "host-c", Started: at(41.2), Ended: at(41.4), Reason: "session-lost"},
		{Token: 1000005, Leader: "host-c", Started: at(41.4), Ended: at(41.6), Reason: "lost"},
		{Token: 1000006, Leader: "host-a", Started: at(41.6), Ended: at(60), Reason: "demote-killed"},
		{Token: 1000007, Leader: "host-b", Started: at(70), Ended: at(80), Reason: "resigned"},
		{Token: 1000008, Leader: "a-much-longer-identity-name", Started: at(80), Reason: Leading},
	}
}

func TestLayoutOfAHistory(t *testing.T) {
	l := Arrange("Terms of jobs", sample(), at(100))
	var lanes []string
	for _, ln := range l.Lanes {
		lanes = append(lanes, ln.Leader)
	}
	if got := strings.Join(lanes, " "); got != "host-a host-b host-c a-much-longer-identity-name" {
		t.Fatalf("lanes %q, want one per identity, by first term", got)
	}
	if len(l.Bars) != len(sample()) {
		t.Fatalf("%d bars for %d terms", len(l.Bars), len(sample()))
	}
	for i, a := range l.Bars {
		lane := l.Lanes[a.Lane]
		if a.Term.Leader != lane.Leader || a.Box.Y < lane.Box.Y || a.Box.Y+a.Box.H > lane.Box.Y+lane.Box.H {
			t.Errorf("bar of %d is not in %s's lane", a.Term.Token, a.Term.Leader)
		}
		if a.Box.W <= 0 {
			t.Errorf("bar of %d has width %v", a.Term.Token, a.Box.W)
		}
		for _, b := range l.Bars[i+1:] {
			if a.Lane == b.Lane && a.Box.Overlaps(b.Box) {
				t.Errorf("bars of %d and %d overlap: %+v %+v", a.Term.Token, b.Term.Token, a.Box, b.Box)
			}
		}
		if !strings.Contains(fmt.Sprint(a.Term.Token), strings.TrimPrefix(a.Token.Text, "…")) {
			t.Errorf("bar of %d labelled %q", a.Term.Token, a.Token.Text)
		}
	}
	labels := l.Labels()
	for i, a := range labels {
		if a.Box.X < 0 || a.Box.X+a.Box.W > l.Width || a.Box.Y < 0 || a.Box.Y+a.Box.H > l.Height {
			t.Errorf("label %q leaves the picture: %+v in %vx%v", a.Text, a.Box, l.Width, l.Height)
		}
		for _, b := range labels[i+1:] {
			if a.Text != "" && b.Text != "" && a.Box.Overlaps(b.Box) {
				t.Errorf("labels %q and %q overlap: %+v %+v", a.Text, b.Text, a.Box, b.Box)
			}
		}
	}
	// Nobody led from 35 s to 41 s and from 60 s to 70 s.
	var gaps []string
	for _, g := range l.Gaps {
		gaps = append(gaps, fmt.Sprintf("%v-%v", g.From.Sub(t0), g.To.Sub(t0)))
		if !g.Band.Overlaps(l.Axis) || g.Band.W <= 0 {
			t.Errorf("gap %v is not on the top band: %+v", g, g.Band)
		}
	}
	if got := strings.Join(gaps, " "); got != "35s-41s 1m0s-1m10s" {
		t.Errorf("gaps %s, want 35s-41s 1m0s-1m10s", got)
	}
	if len(l.HandOvers) != 1 || l.Bars[l.HandOvers[0].From].Term.Token != 1000001 || l.Bars[l.HandOvers[0].To].Term.Token != 1000002 {
		t.Errorf("hand-overs %+v, want 1000001 to 1000002", l.HandOvers)
	}
	if len(l.Kills) != 2 {
		t.Errorf("kills %+v, want the hang-killed and demote-killed terms'", l.Kills)
	}
	if len(l.Ticks) < 3 {
		t.Errorf("%d ticks on the time axis", len(l.Ticks))
	}
	svg := string(l.SVG())
	for _, want := range []string{"token 1000008, leader a-much-longer-identity-name", ReasonColor("hang-killed"), ReasonColor(Leading), "nobody led for 6s", "url(#nobody-led)"} {
		if !strings.Contains(svg, want) {
			t.Errorf("the SVG has no %q", want)
		}
	}
}

// A gap shorter than a millisecond is shown in microseconds, not as 0s.
func TestShortGapIsShown(t *testing.T) {
	terms := []Term{
		{Token: 1, Leader: "a", Started: at(0), Ended: at(1), Reason: "resigned"},
		{Token: 2, Leader: "b", Started: at(1.0004), Ended: at(2), Reason: "resigned"},
	}
	if svg := string(Arrange("Terms of jobs", terms, at(2)).SVG()); !strings.Contains(svg, "nobody led for 400µs") {
		t.Errorf("the SVG does not say nobody led for 400µs:\n%s", svg)
	}
}

// A history shorter than the axis's second: after now, where the axis runs
// on, nobody is said to lead or not.
func TestNoGapAfterNow(t *testing.T) {
	terms := []Term{
		{Token: 1, Leader: "a", Started: at(0), Ended: at(0.05), Reason: "resigned"},
		{Token: 2, Leader: "b", Started: at(0.05), Reason: Leading},
	}
	if l := Arrange("Terms of jobs", terms, at(0.1)); len(l.Gaps) != 0 {
		t.Errorf("gaps %+v in a history led throughout until now", l.Gaps)
	}
	ended := []Term{{Token: 1, Leader: "a", Started: at(0), Ended: at(0.05), Reason: "resigned"}}
	if l := Arrange("Terms of jobs", ended, at(0.1)); len(l.Gaps) != 1 || !l.Gaps[0].From.Equal(at(0.05)) || !l.Gaps[0].To.Equal(at(0.1)) {
		t.Errorf("gaps %+v, want nobody leading from the end to now", l.Gaps)
	}
}

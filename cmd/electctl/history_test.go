package main

import (
	"context"
	"encoding/xml"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/sqlelect/election"
	"github.com/sqlelect/election/internal/timeline"
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

// history --svg draws the terms of a real election: an SVG document on
// stdout, well-formed XML, with a lane and a tooltip per term, the ended
// term in the colour of its reason and the one going on as leading.
func TestHistorySVG(t *testing.T) {
	c := newCluster(t)
	c.add("jobs", "a")
	if c.waitLeader("jobs") != "a" {
		t.Fatal("a does not lead")
	}
	first := c.token("jobs")
	c.add("jobs", "b")
	c.cancel["a"]() // a resigns; b, the only candidate left, takes over
	deadline := time.Now().Add(10 * time.Second)
	for c.waitLeader("jobs") != "b" && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	second := c.token("jobs")
	if second == first {
		t.Fatal("b did not begin a term")
	}
	op, err := election.NewOperator(c.db, "jobs", election.Config{})
	if err != nil {
		t.Fatal(err)
	}
	// A resignation frees the lock before it writes its end, which then
	// replaces the "lost" b's start wrote meanwhile.
	for {
		terms, err := op.History(context.Background(), 0)
		if err == nil && len(terms) == 2 && terms[1].Reason == "resigned" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("a's resignation is not in the history: %+v, %v", terms, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	code, out, errOut := c.ctl("history", "jobs", "--svg")
	if code != exitOK {
		t.Fatalf("history --svg: %d\n%s%s", code, out, errOut)
	}
	dec := xml.NewDecoder(strings.NewReader(out))
	var root string
	var titles []string
	for inTitle := false; ; {
		tok, err := dec.Token()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("history --svg is not XML: %v\n%s", err, out)
		}
		switch tok := tok.(type) {
		case xml.StartElement:
			if root == "" {
				root = tok.Name.Space + " " + tok.Name.Local
			}
			inTitle = tok.Name.Local == "title"
		case xml.CharData:
			if inTitle {
				titles = append(titles, string(tok))
			}
		case xml.EndElement:
			inTitle = false
		}
	}
	if root != "http://www.w3.org/2000/svg svg" {
		t.Fatalf("history --svg: the root element is %q, want svg", root)
	}
	all := strings.Join(titles, "\n")
	for _, want := range []string{
		"Terms of election jobs",
		fmt.Sprintf("token %d, leader a: ", first),
		fmt.Sprintf("token %d, leader b: ", second),
	} {
		if !strings.Contains(all, want) {
			t.Errorf("history --svg: no title %q among\n%s", want, all)
		}
	}
	for _, reason := range []string{"resigned", timeline.Leading} {
		if !strings.Contains(out, `fill="`+timeline.ReasonColor(reason)+`"`) {
			t.Errorf("history --svg: no bar in %s's colour\n%s", reason, out)
		}
	}
	// A Go program gets the same picture from its Operator.
	var lib strings.Builder
	if err := op.HistorySVG(context.Background(), &lib, 0); err != nil {
		t.Fatal(err)
	}
	if want := fmt.Sprintf("token %d, leader b: ", second); !strings.Contains(lib.String(), want) {
		t.Errorf("Operator.HistorySVG: no %q in\n%s", want, lib.String())
	}
	if code, _, errOut := c.ctl("history", "jobs", "--svg", "--json"); code != exitUsage {
		t.Errorf("history --svg --json: %d, want a usage error\n%s", code, errOut)
	}
}

package main

import (
	"cmp"
	"fmt"
	"io"
	"slices"
	"time"
)

// The acting leaders' overlap: safety as the leaders' own code lived it,
// beside what the fence let through (check.go, linearize.go). A term acts
// from its start event, printed as its leader function begins, to its end
// event, printed as the function returns; a term whose process was killed
// acts until the arena saw its output end (the exit event). All are stamped
// with the machine's clock, which no clock fault steps. Two terms whose
// spans intersect had two leaders acting at once. Each overlap is laid to
// the trial during which it began: from its fault's strike to the next
// fault's, or to none, before the first fault and once the faults stopped.

// noFault names the time outside every trial.
const noFault = "none"

// actingSpan is when one term of one candidate acted, in Unix ns.
type actingSpan struct {
	id, term string
	from, to int64
}

// String names the span's term and candidate.
func (s actingSpan) String() string { return fmt.Sprintf("term %s of %s", s.term, s.id) }

// actingSpans returns the spans of the terms in log, by their start. A term
// whose candidate printed no end and whose process did not exit acts to the
// log's last event.
func actingSpans(log []event) []actingSpan {
	var spans []actingSpan
	open := map[string]int{} // a candidate's term → its span, until it ends
	last := int64(0)
	for _, e := range log {
		last = max(last, e.At)
		key := e.ID + " " + e.Term
		switch e.Ev {
		case "start":
			open[key] = len(spans)
			spans = append(spans, actingSpan{id: e.ID, term: e.Term, from: e.At})
		case "end":
			if i, ok := open[key]; ok {
				spans[i].to = e.At
				delete(open, key)
			}
		case "exit":
			for key, i := range open {
				if spans[i].id == e.ID {
					spans[i].to = e.At
					delete(open, key)
				}
			}
		}
	}
	for _, i := range open {
		spans[i].to = last
	}
	slices.SortStableFunc(spans, func(x, y actingSpan) int { return cmp.Compare(x.from, y.from) })
	return spans
}

// overlap is two terms acting at once.
type overlap struct {
	First  string  `json:"first"`  // the term that began first
	Second string  `json:"second"` // the other
	At     int64   `json:"at"`     // when both acted, from: the second's start (Unix ns)
	S      float64 `json:"s"`      // for how long
	Trial  int     `json:"trial"`  // the trial it began in, by its index in the run's; -1: none
	Fault  string  `json:"fault"`  // that trial's fault, or noFault
}

// overlapSum totals the overlaps laid to one kind of fault.
type overlapSum struct {
	Count  int     `json:"count"`
	TotalS float64 `json:"total_s"`
	WorstS float64 `json:"worst_s"`
}

// actingOverlap is the acting leaders' overlap over a run.
type actingOverlap struct {
	TotalS   float64                `json:"total_s"`
	WorstS   float64                `json:"worst_s"`
	ByFault  map[string]*overlapSum `json:"by_fault"`
	Overlaps []overlap              `json:"overlaps,omitempty"`
}

// actingOverlaps finds every two terms in log whose spans intersect (spans
// that only touch do not) and lays each overlap to its trial: the last of
// trials (in the order injected) that struck at or before it began, unless
// it began at or after stopped, when the faults had stopped.
func actingOverlaps(log []event, trials []trial, stopped time.Time) actingOverlap {
	res := actingOverlap{ByFault: map[string]*overlapSum{}}
	spans := actingSpans(log)
	for i, s := range spans {
		for _, u := range spans[i+1:] {
			if u.from >= s.to {
				break // the spans after u begin later still
			}
			o := overlap{First: s.String(), Second: u.String(), At: u.from, S: time.Duration(min(s.to, u.to) - u.from).Seconds(),
				Trial: -1, Fault: noFault}
			if u.from < stopped.UnixNano() {
				for k, tr := range trials {
					if tr.At != 0 && tr.At <= u.from {
						o.Trial, o.Fault = k, tr.Fault
					}
				}
			}
			sum := res.ByFault[o.Fault]
			if sum == nil {
				sum = &overlapSum{}
				res.ByFault[o.Fault] = sum
			}
			sum.Count++
			sum.TotalS += o.S
			sum.WorstS = max(sum.WorstS, o.S)
			res.TotalS += o.S
			res.WorstS = max(res.WorstS, o.S)
			res.Overlaps = append(res.Overlaps, o)
		}
	}
	return res
}

// forbidsOverlap reports whether two leaders acting at once during fault
// break a guarantee: during a clock fault, whose leader is healthy, or
// during no fault at all. The other faults are the documented windows: a
// leader whose session the server ended (kill-connection, reset) learns
// within an interval while the next already leads; a paused or cut-off
// one, only once it runs again; their writes are the fence's to refuse.
func forbidsOverlap(fault string) bool { return fault == noFault || isClock(fault) }

// checkOverlaps adds a violation to v for each overlap that fault forbids,
// with the history around it.
func checkOverlaps(a *arena, ov actingOverlap, v *verdict) {
	for _, o := range ov.Overlaps {
		if !forbidsOverlap(o.Fault) {
			continue
		}
		during := "no fault"
		if o.Trial >= 0 {
			during = fmt.Sprintf("%s (trial %d)", o.Fault, o.Trial+1)
		}
		v.Violations = append(v.Violations, fmt.Sprintf("%s and %s acted at once for %s during %s\n%s",
			o.First, o.Second, secs(o.S), during, a.aroundTerms(time.Unix(0, o.At))))
	}
}

// printOverlaps writes the acting leaders' overlap by fault, in the order
// the faults first overlapped.
func printOverlaps(w io.Writer, ov actingOverlap) {
	if len(ov.Overlaps) == 0 {
		fmt.Fprintln(w, "acting leaders at once (their leader functions' spans, on the machine's clock): never")
		return
	}
	fmt.Fprintf(w, "acting leaders at once (their leader functions' spans, on the machine's clock): %d overlaps, %s in all, the worst %s\n",
		len(ov.Overlaps), secs(ov.TotalS), secs(ov.WorstS))
	tw := newTable(w, "DURING\tOVERLAPS\tTOTAL\tWORST\tVIOLATION")
	var faults []string
	for _, o := range ov.Overlaps {
		if !slices.Contains(faults, o.Fault) {
			faults = append(faults, o.Fault)
		}
	}
	for _, f := range faults {
		s, bad := ov.ByFault[f], "no"
		if forbidsOverlap(f) {
			bad = "yes"
		}
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\n", f, s.Count, secs(s.TotalS), secs(s.WorstS), bad)
	}
	tw.Flush()
}

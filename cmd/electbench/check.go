package main

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/anishathalye/porcupine"
)

// verdict is what the checker finds in one contender's recorded history.
type verdict struct {
	Contender string `json:"contender"`
	Terms     int    `json:"terms"`
	Writes    int    `json:"writes"`                   // rows in bench_writes, or etcd's writes/ keys
	Acked     int    `json:"acked_writes"`             // writes the candidates reported committed
	Refused   int    `json:"refused_writes,omitempty"` // writes their fence refused, as the candidates reported
	// Counter is bench_counter, bumped in the same transactions; nil for
	// etcd, which keeps none.
	Counter  *int    `json:"counter,omitempty"`
	Lost     int     `json:"acked_writes_lost"`
	Stale    int     `json:"stale_writes_accepted"`
	OverlapS float64 `json:"overlap_total_s"` // acting leaders overlapping, as their accepted writes show
	WorstS   float64 `json:"overlap_worst_s"`
	// Linearizable is Porcupine's verdict on the register's history (see
	// linearize.go), of Operations writes and reads; fenced MySQL
	// contenders only.
	Linearizable string `json:"linearizable,omitempty"`
	Operations   int    `json:"operations,omitempty"`
	// Violations are broken guarantees; each comes with the history around it.
	Violations []string `json:"violations,omitempty"`
}

// row is one write in bench_writes, or in etcd (its id is the revision
// that committed it).
type row struct {
	id               int64
	holder, term, op string
	token            uint64
	at               time.Time
}

// check reads the arena's writes and events after the candidates stopped.
// In commit order a write is stale when a term that began writing after its
// own term already wrote: the old leader acted after the new one had. For
// this library and etcd every write is fenced, so a stale one, a token that
// does not grow with its terms, a counter that disagrees with the rows, or
// an acknowledged write that is missing, is a violation. etcd keeps no
// counter, and its history is not Porcupine's to check (the parent's reads
// of the register are MySQL's): both are left out.
func check(ctx context.Context, a *arena) (verdict, error) {
	v := verdict{Contender: a.contender}
	ws, err := readWrites(ctx, a)
	if err != nil {
		return v, err
	}
	v.Writes = len(ws)
	fenced := isLibrary(a.contender) || a.etcd != nil
	checkWrites(a, ws, fenced, &v)
	checkEvents(a, fenced, &v)
	if v.Lost = max(0, v.Acked-v.Writes); v.Lost > 0 {
		v.Violations = append(v.Violations, fmt.Sprintf("%d acknowledged writes are missing", v.Lost))
	}
	committed := map[string]int64{} // op → its row
	for _, w := range ws {
		committed[w.op] = w.id
	}
	checkRefused(a, committed, &v)
	if a.etcd != nil {
		return v, nil
	}
	v.Counter = new(int)
	if err := a.admin.QueryRowContext(ctx, "SELECT n FROM bench_counter").Scan(v.Counter); err != nil {
		return v, err
	}
	if *v.Counter != v.Writes {
		v.Violations = append(v.Violations, fmt.Sprintf("counter %d but %d write rows", *v.Counter, v.Writes))
	}
	if !fenced {
		return v, nil
	}
	res, n, where := linearizable(a.log, a.reads, committed, linearizeTimeout)
	v.Linearizable, v.Operations = string(res), n
	switch res {
	case porcupine.Illegal:
		v.Violations = append(v.Violations, "Porcupine: the history is not linearizable as a fenced register: "+where)
	case porcupine.Unknown:
		v.Violations = append(v.Violations, fmt.Sprintf("Porcupine: no verdict within %v (%s)", linearizeTimeout, where))
	}
	return v, nil
}

// linearizeTimeout bounds Porcupine's search over a whole history.
const linearizeTimeout = 10 * time.Minute

// readWrites returns the rows of bench_writes, or etcd's writes, in commit
// order.
func readWrites(ctx context.Context, a *arena) ([]row, error) {
	if a.etcd != nil {
		return a.etcdWrites(ctx)
	}
	rows, err := a.admin.QueryContext(ctx, "SELECT id, holder, term, op, token, DATE_FORMAT(at, '%Y-%m-%d %H:%i:%s.%f') FROM bench_writes ORDER BY id")
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var ws []row
	for rows.Next() {
		var r row
		var at string
		if err := rows.Scan(&r.id, &r.holder, &r.term, &r.op, &r.token, &at); err != nil {
			return nil, err
		}
		r.at, _ = time.Parse("2006-01-02 15:04:05.000000", at)
		ws = append(ws, r)
	}
	return ws, nil
}

// checkWrites counts the stale writes in ws (violations if fenced) and how
// long the terms' spans of accepted writes overlap.
func checkWrites(a *arena, ws []row, fenced bool, v *verdict) {
	// Terms in the order they first wrote; their spans of accepted writes.
	type span struct {
		order       int
		first, last time.Time
	}
	spans := map[string]*span{}
	var order []string
	newest := ""
	for _, w := range ws {
		s := spans[w.term]
		if s == nil {
			s = &span{order: len(order), first: w.at}
			spans[w.term] = s
			order = append(order, w.term)
			newest = w.term
		}
		s.last = w.at
		if s.order < spans[newest].order {
			v.Stale++
			if fenced {
				v.Violations = append(v.Violations, fmt.Sprintf("stale write %d of term %s (%s) accepted after term %s began writing\n%s",
					w.id, w.term, w.holder, newest, a.around(w.at)))
			}
		}
	}
	for i, t := range order {
		for _, u := range order[i+1:] {
			if o := spans[t].last.Sub(spans[u].first); o > 0 {
				v.OverlapS += o.Seconds()
				v.WorstS = max(v.WorstS, o.Seconds())
			}
		}
	}
}

// checkEvents counts the terms and the acknowledged and refused writes the
// candidates reported and, if fenced, finds tokens that do not grow with
// their terms. A fenced term that began with its lease already run out, or
// its etcd key gone (its process was paused between its claim and its
// first step), is left out of that order:
// it never acted, and a write it tried is the write check's to judge.
func checkEvents(a *arena, fenced bool, v *verdict) {
	var starts []event
	for _, e := range a.log {
		switch {
		case e.Ev == "start":
			v.Terms++
			if e.OK || !fenced {
				starts = append(starts, e)
			}
		case e.Ev == "write" && e.OK:
			v.Acked++
		case e.Ev == "write" && e.Refused:
			v.Refused++
		}
	}
	sort.Slice(starts, func(i, j int) bool { return starts[i].At < starts[j].At })
	if !fenced {
		return
	}
	for i := 1; i < len(starts); i++ {
		if starts[i].Token <= starts[i-1].Token {
			v.Violations = append(v.Violations, fmt.Sprintf("term of %s started with token %d after token %d\n%s",
				starts[i].ID, starts[i].Token, starts[i-1].Token, a.around(time.Unix(0, starts[i].At))))
		}
	}
}

// around prints the events within a second of t but the writes' returns.
func (a *arena) around(t time.Time) string {
	return a.near(t, func(e event) bool { return e.Ev != "write" })
}

// aroundTerms prints the events within a second of t but the writes: the
// terms' starts and ends, the processes' exits, the traps.
func (a *arena) aroundTerms(t time.Time) string {
	return a.near(t, func(e event) bool { return e.Ev != "write" && e.Ev != "call" })
}

// near prints the events within a second of t that keep holds for.
func (a *arena) near(t time.Time, keep func(event) bool) string {
	var b strings.Builder
	for _, e := range a.log {
		if d := time.Unix(0, e.At).Sub(t); d > -time.Second && d < time.Second && keep(e) {
			fmt.Fprintf(&b, "  %+8.3fs %-4s %s term %s token %d %s\n", d.Seconds(), e.ID, e.Ev, e.Term, e.Token, e.Reason)
		}
	}
	return b.String()
}

// checkRefused finds writes that their fence refused (ErrFenced, or etcd's
// guard) and that committed all the same: a refusal must leave nothing
// behind.
func checkRefused(a *arena, committed map[string]int64, v *verdict) {
	for _, e := range a.log {
		if _, ok := committed[e.Op]; ok && e.Ev == "write" && e.Refused {
			v.Violations = append(v.Violations, fmt.Sprintf("write %s was refused (ErrFenced) but committed\n%s", e.Op, a.around(time.Unix(0, e.At))))
		}
	}
}

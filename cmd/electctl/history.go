package main

import (
	"context"
	"fmt"
	"time"

	"github.com/sqlelect/election"
)

// history prints the last --limit terms of election name, newest first.
func (c *cli) history(ctx context.Context, name string) int {
	e, err := c.operator(name)
	if err != nil {
		return c.fail(err)
	}
	hist, err := e.History(ctx, c.limit)
	if err != nil {
		return c.fail(err)
	}
	if len(hist) == 0 {
		return c.noTerm(name)
	}
	if c.svg {
		if err := e.HistorySVG(ctx, c.out, c.limit); err != nil {
			return c.fail(err)
		}
		return exitOK
	}
	if c.json {
		type termView struct {
			Token   uint64   `json:"token"`
			Leader  string   `json:"leader"`
			Host    string   `json:"host"`
			PID     int      `json:"pid"`
			Server  string   `json:"server"`
			Started jsonTime `json:"started"`
			Ended   jsonTime `json:"ended"`
			Reason  string   `json:"reason"`
			// DURATION's (null while the term goes on); by the leader's
			// own clock (null: it did not record its end), and how far the
			// server's clock moved during the term beyond that (null: not
			// known, or within the round trips).
			DurationMS   *float64 `json:"duration_ms"`
			LastedMS     *float64 `json:"lasted_ms"`
			ClockMovedMS *float64 `json:"clock_moved_ms"`
		}
		views := []termView{}
		for _, t := range hist {
			v := termView{Token: t.Token, Leader: t.Identity, Host: t.Host, PID: t.PID, Server: t.Server, Started: jsonTime(t.Started), Ended: jsonTime(t.Ended),
				Reason: t.Reason}
			if !t.Ended.IsZero() {
				d := ms(lasted(t))
				v.DurationMS = &d
			}
			if t.Lasted > 0 {
				lasted := ms(t.Lasted)
				v.LastedMS = &lasted
			}
			if moved, ok := clockMoved(t); ok {
				m := ms(moved)
				v.ClockMovedMS = &m
			}
			views = append(views, v)
		}
		return c.printJSON(views)
	}
	// A term with no end recorded leads only if the record says so: its
	// leader may be gone without a word (killed, the only candidate, and
	// none has started a term since to close it).
	leader, err := e.Leader(ctx)
	leads := err == nil && leader.Leading()
	var rows [][]string
	for i, t := range hist {
		reason := shown(t.Reason)
		switch {
		case t.Reason != "":
		case i == 0 && leads && leader.Token == t.Token:
			reason = "(leading)"
		default:
			reason = "(no end recorded)"
		}
		rows = append(rows, []string{fmt.Sprint(t.Token), shown(t.Identity), shown(t.Host), fmt.Sprint(t.PID), servedBy(t, hist[i+1:]),
			stamp(t.Started), stamp(t.Ended), duration(t), reason})
	}
	c.table("TOKEN\tLEADER\tHOST\tPID\tSERVER\tSTARTED\tENDED\tLASTED\tREASON", rows)
	return exitOK
}

// servedBy prints the database server that granted term t, marked
// "changed" when the last earlier term that names one (older holds them,
// newest first) had another: a failover of the database itself, or on
// Galera a leader on another node.
func servedBy(t election.TermRecord, older []election.TermRecord) string {
	if t.Server == "" {
		return "-"
	}
	for _, o := range older {
		if o.Server != "" {
			if o.Server != t.Server {
				return shown(t.Server) + " (changed)"
			}
			break
		}
	}
	return shown(t.Server)
}

// lasted is how long an ended term lasted: by its leader's own clock where
// it recorded its end, else between its start and end on the server's.
func lasted(t election.TermRecord) time.Duration {
	if t.Lasted > 0 {
		return t.Lasted
	}
	return t.Ended.Sub(t.Started)
}

// duration prints how long a term lasted (lasted), or - while it goes on;
// and, where the server's clock disagrees with the leader's by more than
// the statements' delays, how far the server's clock moved meanwhile (a
// step: the history holds its times still while the clock is behind, so
// that no term starts before the last one ended).
func duration(t election.TermRecord) string {
	if t.Ended.IsZero() {
		return "-"
	}
	out := lasted(t).Round(time.Millisecond).String()
	if moved, ok := clockMoved(t); ok {
		sign := ""
		if moved > 0 {
			sign = "+"
		}
		out += " (the server's clock moved " + sign + moved.Round(time.Millisecond).String() + ")"
	}
	return out
}

// clockMoved is how much longer term t lasted on the server's clock than by
// its leader's, where it differs by more than a second and 1 %: more than
// the statements that took its start and its end waited, even in a batch
// of thousands of starts, and the clocks' rates, account for. (NTP steps
// by 128 ms or more; a smaller step goes unremarked here.)
func clockMoved(t election.TermRecord) (time.Duration, bool) {
	if t.Lasted <= 0 || t.Ended.IsZero() {
		return 0, false
	}
	moved := t.Ended.Sub(t.Started) - t.Lasted
	return moved, moved.Abs() > time.Second+t.Lasted/100
}

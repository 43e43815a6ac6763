package main

import (
	"context"
	"fmt"
	"time"

	"github.com/sqlelect/election"
)

// watch prints every change of leader of election name until interrupted.
func (c *cli) watch(ctx context.Context, name string) int {
	e, err := c.operator(name)
	if err != nil {
		return c.fail(err)
	}
	// Watch sends a term's end again when its leader later writes its own
	// account (see Event): that line is marked revised, and says who leads
	// now rather than "no leader" when a later term has started.
	var newest election.Event // the latest start seen, and whether it has ended
	ended := map[uint64]bool{}
	for ev := range e.Watch(ctx) {
		revised := !ev.Leading && ev.Token != 0 && ended[ev.Token]
		if !ev.Leading && ev.Token != 0 {
			ended[ev.Token] = true
		}
		if c.json {
			c.writeJSON(map[string]any{"token": ev.Token, "leader": ev.Identity, "leading": ev.Leading, "reason": ev.Reason, "at": stamp(ev.At), "revised": revised}, "")
		}
		switch {
		case ev.Leading:
			newest = ev
		case ev.Token != 0 && ev.Token >= newest.Token:
			newest.Leading = false
		}
		if c.json {
			continue
		}
		switch {
		case ev.Leading:
			fmt.Fprintf(c.out, "%s  term %d started: %s leads\n", stamp(ev.At), ev.Token, shown(ev.Identity))
		case ev.Token == 0:
			fmt.Fprintf(c.out, "%s  no leader: the election has had no term\n", stamp(time.Now()))
		default:
			now := "no leader"
			if newest.Leading {
				now = fmt.Sprintf("%s leads (term %d)", shown(newest.Identity), newest.Token)
			}
			mark := ""
			if revised {
				mark = ", revised"
			}
			fmt.Fprintf(c.out, "%s  term %d of %s ended (%s)%s: %s\n", stamp(ev.At), ev.Token, shown(ev.Identity), shown(ev.Reason), mark, now)
		}
	}
	return exitOK
}

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
	if c.json {
		type termView struct {
			Token    uint64 `json:"token"`
			Leader   string `json:"leader"`
			Host     string `json:"host"`
			PID      int    `json:"pid"`
			Server   string `json:"server"`
			Started  string `json:"started"`
			Ended    string `json:"ended"`
			Reason   string `json:"reason"`
			Duration string `json:"duration"`
		}
		views := []termView{}
		for _, t := range hist {
			views = append(views, termView{t.Token, t.Identity, t.Host, t.PID, t.Server, stamp(t.Started), stamp(t.Ended), t.Reason, duration(t)})
		}
		return c.printJSON(views)
	}
	var rows [][]string
	for i, t := range hist {
		reason := shown(t.Reason)
		if t.Reason == "" {
			reason = "(leading)"
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

// duration prints how long a term lasted, or - while it goes on.
func duration(t election.TermRecord) string {
	if t.Ended.IsZero() {
		return "-"
	}
	return t.Ended.Sub(t.Started).Round(time.Millisecond).String()
}

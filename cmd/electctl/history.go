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
	if c.json {
		type termView struct {
			Token    uint64   `json:"token"`
			Leader   string   `json:"leader"`
			Host     string   `json:"host"`
			PID      int      `json:"pid"`
			Server   string   `json:"server"`
			Started  jsonTime `json:"started"`
			Ended    jsonTime `json:"ended"`
			Reason   string   `json:"reason"`
			Duration string   `json:"duration"`
		}
		views := []termView{}
		for _, t := range hist {
			views = append(views, termView{t.Token, t.Identity, t.Host, t.PID, t.Server, jsonTime(t.Started), jsonTime(t.Ended), t.Reason, duration(t)})
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

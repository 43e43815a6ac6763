package main

import (
	"context"
	"fmt"
)

// candidates prints who is in the race of election name: the leader, the
// live candidates and the dead ones.
func (c *cli) candidates(ctx context.Context, name string) int {
	e, err := c.operator(name)
	if err != nil {
		return c.fail(err)
	}
	cs, err := e.Candidates(ctx)
	if err != nil {
		return c.fail(err)
	}
	if len(cs) == 0 {
		fmt.Fprintf(c.errOut, "electctl: election %q has no candidates\n", name)
		return exitNotFound
	}
	if c.json {
		type candView struct {
			Identity  string  `json:"identity"`
			Host      string  `json:"host"`
			PID       int     `json:"pid"`
			Since     string  `json:"since"`
			SeenAgoMS float64 `json:"seen_ago_ms"`
			Alive     bool    `json:"alive"`
			Leader    bool    `json:"leader"`
		}
		views := []candView{}
		for _, k := range cs {
			views = append(views, candView{k.Identity, k.Host, k.PID, stamp(k.Since), ms(k.SeenAgo), k.Alive, k.Leader})
		}
		return c.printJSON(views)
	}
	var rows [][]string
	for _, k := range cs {
		role := "candidate"
		switch {
		case k.Leader:
			role = "leader"
		case !k.Alive:
			role = "dead"
		}
		rows = append(rows, []string{shown(k.Identity), role, shown(k.Host), fmt.Sprint(k.PID), stamp(k.Since), ago(k.SeenAgo)})
	}
	c.table("CANDIDATE\tROLE\tHOST\tPID\tSINCE\tSEEN", rows)
	return exitOK
}

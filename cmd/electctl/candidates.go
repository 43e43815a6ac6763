package main

import (
	"context"
	"errors"
	"fmt"

	"github.com/sqlelect/election"
)

// candidates prints who is in the race of election name: the leader, the
// live candidates and the dead ones; none, with exit 0, for an election
// that has had a term but has no candidate now.
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
		// Not found, as for status and history, only if the election has
		// had no term either; one that has is listed as having none now.
		r, err := e.Leader(ctx)
		switch {
		case errors.Is(err, election.ErrNoLeader) && r.Token == 0:
			return c.noTerm(name)
		case err != nil && !errors.Is(err, election.ErrNoLeader):
			return c.fail(err)
		}
	}
	if c.json {
		views := []candidateView{}
		for _, k := range cs {
			views = append(views, candidate(k))
		}
		return c.printJSON(views)
	}
	if len(cs) == 0 {
		fmt.Fprintf(c.out, "no candidates: nobody campaigns in election %s now\n", shown(name))
		return exitOK
	}
	var rows [][]string
	for _, k := range cs {
		role, seen, health := "candidate", ago(k.SeenAgo), shownOrDash(k.Health)
		switch {
		case k.Leader:
			role = "leader"
		case !k.Alive && k.Health == "unhealthy":
			role = "unhealthy" // withdrawn, not dead
		case !k.Alive:
			// Its last health is not its health now; and when a GetLock
			// candidate's session ended, the server does not say.
			role, health = "dead", "-"
			if gone(k) {
				seen = "-"
			}
		}
		rows = append(rows, []string{shown(k.Identity), role, shown(k.Host), fmt.Sprint(k.PID), stamp(k.Since), seen, shownOrDash(k.Session),
			fmt.Sprint(k.Priority), shownOrDash(k.Version), health, shownOrDash(k.Value)})
	}
	c.table("CANDIDATE\tROLE\tHOST\tPID\tSINCE\tSEEN\tSESSION\tPRIORITY\tVERSION\tHEALTH\tVALUE", rows)
	return exitOK
}

// gone reports whether k is a GetLock candidate whose session has ended
// (its lock is free): when it ended is not known.
func gone(k election.Candidate) bool {
	return !k.Alive && k.Health != "unhealthy" && k.Session != election.SessionPool
}

// candidateView is the JSON form of a candidate. Health is "healthy",
// "unhealthy", or empty for a candidate that runs no check; Session is
// "own", "shared" or "pool" (election.Candidate.Session). SeenAgoMS is
// null for a GetLock candidate that is gone.
type candidateView struct {
	Identity  string   `json:"identity"`
	Host      string   `json:"host"`
	PID       int      `json:"pid"`
	Since     jsonTime `json:"since"`
	SeenAgoMS *float64 `json:"seen_ago_ms"`
	Alive     bool     `json:"alive"`
	Leader    bool     `json:"leader"`
	Value     string   `json:"value"`
	Priority  int32    `json:"priority"`
	Version   string   `json:"version"`
	Health    string   `json:"health"`
	Session   string   `json:"session"`
}

// candidate gives the JSON form of candidate k.
func candidate(k election.Candidate) candidateView {
	var seen *float64
	if !gone(k) {
		d := ms(k.SeenAgo)
		seen = &d
	}
	return candidateView{k.Identity, k.Host, k.PID, jsonTime(k.Since), seen, k.Alive, k.Leader, k.Value, k.Priority, k.Version, k.Health, k.Session}
}

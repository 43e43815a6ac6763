package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/sqlelect/election"
)

// demote forces a re-election of election name, or with to a hand-over to the
// live candidate to, and waits for the next leader to print the outcome.
func (c *cli) demote(ctx context.Context, name, to string) int {
	e, err := c.operator(name)
	if err != nil {
		return c.fail(err)
	}
	before, err := e.Leader(ctx)
	if errors.Is(err, election.ErrNoLeader) && before.Token == 0 {
		return c.noTerm(name)
	}
	if err != nil {
		return c.fail(err)
	}
	if to != "" && to == before.Identity {
		fmt.Fprintf(c.out, "%s leads already (token %d)\n", shown(to), before.Token)
		return exitOK
	}
	var killed bool
	if to == "" {
		killed, err = e.Demote(ctx)
	} else {
		killed, err = e.Handover(ctx, to)
	}
	if err != nil {
		return c.fail(err)
	}
	// Wait for the next leader, so that the operator sees the outcome.
	var after election.Record
	for {
		after, err = e.Leader(ctx)
		if err == nil && after.Token != before.Token && (to == "" || after.Identity == to) {
			break
		}
		select {
		case <-ctx.Done():
			fmt.Fprintf(c.errOut, "electctl: term %d of %s ended, but no new leader within --timeout\n", before.Token, shown(before.Identity))
			return exitNoLeader
		case <-time.After(50 * time.Millisecond):
		}
	}
	how := "stepped down"
	if killed {
		how = "did not step down in time; its session was killed"
	}
	if c.json {
		return c.printJSON(map[string]any{"old_leader": before.Identity, "old_token": before.Token, "killed": killed,
			"new_leader": after.Identity, "new_token": after.Token})
	}
	fmt.Fprintf(c.out, "%s (token %d) %s\n%s leads now (token %d)\n", shown(before.Identity), before.Token, how, shown(after.Identity), after.Token)
	return exitOK
}

// remove deletes election name, which nobody may campaign in.
func (c *cli) remove(ctx context.Context, name string) int {
	e, err := c.operator(name)
	if err != nil {
		return c.fail(err)
	}
	last, err := e.Leader(ctx)
	if errors.Is(err, election.ErrNoLeader) && last.Token == 0 {
		// No term yet: an election only if some candidate left a row.
		if cs, err := e.Candidates(ctx); err != nil || len(cs) == 0 {
			return c.noTerm(name)
		}
	}
	if err := e.Remove(ctx); err != nil {
		return c.fail(err)
	}
	if c.json {
		return c.printJSON(map[string]any{"removed": name, "last_token": last.Token})
	}
	fmt.Fprintf(c.out, "election %s removed (its last token was %d)\n", shown(name), last.Token)
	return exitOK
}

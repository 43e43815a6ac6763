package main

import (
	"context"
	"errors"
	"fmt"
	"text/tabwriter"

	"github.com/sqlelect/election"
)

// recordView is the JSON form of a record.
type recordView struct {
	Election     string   `json:"election"`
	Strategy     string   `json:"strategy"`
	Leading      bool     `json:"leading"`
	State        string   `json:"state"`
	Leader       string   `json:"leader"`
	Value        string   `json:"value"` // what the leader proclaims
	Host         string   `json:"host"`
	PID          int      `json:"pid"`
	Token        uint64   `json:"token"`
	Since        jsonTime `json:"since"`
	RenewedAgoMS float64  `json:"renewed_ago_ms"`
	ExpiryMS     float64  `json:"expiry_ms"`
	ConnID       uint64   `json:"conn_id"`
	LockConnID   uint64   `json:"lock_conn_id"`
	Demoting     bool     `json:"demotion_pending"`
	HandoverTo   string   `json:"handover_to,omitempty"`
	Server       string   `json:"server"`           // the server read from
	Behind       string   `json:"behind,omitempty"` // why it may show an old leader
	// Candidate is the leader's candidate row (status NAME, while a
	// candidate leads), as candidates gives it: priority, version, health.
	Candidate *candidateView `json:"candidate,omitempty"`
}

// view gives the JSON form of an election's record, read from src.
func view(r election.Record, src source) recordView {
	return recordView{
		Election: r.Name, Strategy: r.Strategy, Leading: r.Leading(), State: r.State, Leader: r.Identity, Value: r.Value, Host: r.Host, PID: r.PID,
		Token: r.Token, Since: jsonTime(r.Since), RenewedAgoMS: ms(r.RenewedAgo), ExpiryMS: ms(r.Expiry),
		ConnID: r.ConnID, LockConnID: r.LockConnID, Demoting: r.DemotedAgo > 0, HandoverTo: r.HandoverTo,
		Server: src.Name, Behind: src.Behind,
	}
}

// lockState says whether the lock is held by the recorded session.
func lockState(r election.Record) string {
	switch {
	case r.Strategy == election.LeaseRow.String():
		return "not used (lease)"
	case r.LockConnID == 0:
		return "free"
	case r.LockConnID == r.ConnID:
		return fmt.Sprintf("held by session %d (recorded)", r.LockConnID)
	}
	return fmt.Sprintf("held by session %d (not the recorded %d)", r.LockConnID, r.ConnID)
}

// statusAll prints every election of the database: who leads, since when, and the lock.
func (c *cli) statusAll(ctx context.Context) int {
	recs, err := election.Elections(ctx, c.db, c.prefix)
	if err != nil {
		return c.fail(err)
	}
	if c.json {
		views := []recordView{}
		for _, r := range recs {
			views = append(views, view(r, c.src))
		}
		return c.printJSON(views)
	}
	var rows [][]string
	for _, r := range recs {
		leader, state, value := shown(r.Identity), shown(r.State), shownOrDash(r.Value)
		if !r.Leading() {
			leader, value = "(none)", "-"
			if r.State == "leading" {
				state = "stale"
			}
		}
		rows = append(rows, []string{shown(r.Name), shown(r.Strategy), leader, fmt.Sprint(r.Token), state, stamp(r.Since), ago(r.RenewedAgo), lockState(r), value})
	}
	c.table("ELECTION\tSTRATEGY\tLEADER\tTOKEN\tSTATE\tSINCE\tRENEWED\tLOCK\tVALUE", rows)
	return exitOK
}

// status prints who leads election name, or how its last term ended; it exits
// 3 when none leads.
func (c *cli) status(ctx context.Context, name string) int {
	e, err := c.operator(name)
	if err != nil {
		return c.fail(err)
	}
	r, err := e.Leader(ctx)
	if errors.Is(err, election.ErrNoLeader) && r.Token == 0 {
		return c.noTerm(name)
	}
	if err != nil && !errors.Is(err, election.ErrNoLeader) {
		return c.fail(err)
	}
	code := exitOK
	if !r.Leading() {
		code = exitNoLeader
	}
	var lead *election.Candidate // the leader's candidate row
	if r.Leading() {
		cs, err := e.Candidates(ctx)
		if err != nil {
			return c.fail(err)
		}
		for _, k := range cs {
			if k.Identity == r.Identity {
				lead = &k
				break
			}
		}
	}
	if c.json {
		v := view(r, c.src)
		if lead != nil {
			k := candidate(*lead)
			v.Candidate = &k
		}
		c.printJSON(v)
		return code
	}
	w := tabwriter.NewWriter(c.out, 0, 4, 2, ' ', 0)
	if r.Leading() {
		fmt.Fprintf(w, "election:\t%s\nstrategy:\t%s\nleader:\t%s (host %s, pid %d)\nvalue:\t%s\n",
			shown(r.Name), shown(r.Strategy), shown(r.Identity), shown(r.Host), r.PID, shownOrDash(r.Value))
		if lead != nil {
			fmt.Fprintf(w, "priority:\t%d\nversion:\t%s\nhealth:\t%s\n", lead.Priority, shownOrDash(lead.Version), shownOrDash(lead.Health))
		}
		fmt.Fprintf(w, "token:\t%d\nsince:\t%s\nrenewed:\t%s (expires after %v)\nlock:\t%s\n",
			r.Token, stamp(r.Since), ago(r.RenewedAgo), r.Expiry, lockState(r))
		if r.DemotedAgo > 0 {
			fmt.Fprintf(w, "demotion:\trequested %s", ago(r.DemotedAgo))
			if r.HandoverTo != "" {
				fmt.Fprintf(w, ", hand-over to %s", shown(r.HandoverTo))
			}
			fmt.Fprintln(w)
		}
	} else {
		fmt.Fprintf(w, "election:\t%s\nstrategy:\t%s\nleader:\tnone\nlast term:\t%d, %s (host %s), %s\nended:\t%s\nlock:\t%s\n",
			shown(r.Name), shown(r.Strategy), r.Token, shown(r.Identity), shown(r.Host), shown(r.State), stamp(r.Ended), lockState(r))
	}
	fmt.Fprintf(w, "server:\t%s (%s)\n", shown(c.src.Name), c.src.Role)
	if c.src.Behind != "" {
		fmt.Fprintf(w, "behind:\t%s\n", c.src.Behind)
	}
	w.Flush()
	return code
}

// check exits 0 if id leads election name, 6 if another does, 3 if none
// and 4 if the election has had no term: a leader check for load balancers.
func (c *cli) check(ctx context.Context, name, id string) int {
	e, err := c.operator(name)
	if err != nil {
		return c.fail(err)
	}
	r, err := e.Leader(ctx)
	switch {
	case errors.Is(err, election.ErrNoLeader) && r.Token == 0:
		return c.noTerm(name)
	case errors.Is(err, election.ErrNoLeader):
		fmt.Fprintln(c.out, "no leader")
		return exitNoLeader
	case err != nil:
		return c.fail(err)
	case r.Identity != id:
		fmt.Fprintf(c.out, "%s leads, not %s\n", shown(r.Identity), shown(id))
		return exitNotLeader
	}
	fmt.Fprintf(c.out, "%s leads (token %d)\n", shown(id), r.Token)
	return exitOK
}

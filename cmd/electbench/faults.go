package main

import (
	"context"
	"fmt"
	"slices"
	"syscall"
	"time"

	"github.com/sqlelect/election/internal/mysqltest"
)

// Faults, as named on the command line.
const (
	fSIGKILL  = "sigkill"
	fSIGTERM  = "sigterm"
	fSIGSTOP  = "sigstop"
	fBlackH   = "blackhole"
	fReset    = "reset"
	fKillConn = "kill-connection"
	fRestart  = "restart"
)

var allFaults = []string{fSIGKILL, fSIGTERM, fSIGSTOP, fBlackH, fReset, fKillConn, fRestart}

// faultsFor drops the restart fault unless srv is private: a server given
// by -dsn is not ours to restart.
func faultsFor(srv *mysqltest.Server, faults []string) []string {
	if !srv.Private() {
		faults = slices.DeleteFunc(faults, func(f string) bool { return f == fRestart })
	}
	return faults
}

// trial is the outcome of one injected fault.
type trial struct {
	Contender string  `json:"contender"`
	Fault     string  `json:"fault"`
	FailoverS float64 `json:"failover_s"`       // to the next acting leader; -1: none within the limit
	KnewS     float64 `json:"old_knew_s"`       // until the old leader's term ended; -1: never seen
	NoLeader  bool    `json:"no_leader_before"` // nobody led within the limit before the fault
}

// inject applies fault to the current leader, waits for the next acting
// leader, heals, and returns the trial.
func (a *arena) inject(ctx context.Context, fault string, limit time.Duration) (trial, error) {
	tr := trial{Contender: a.contender, Fault: fault, FailoverS: -1, KnewS: -1}
	old, ok := a.leader(limit)
	if !ok {
		// A contender that left a zombie leader, or none, after the last
		// fault: there is nobody to fault; say so and go on.
		tr.NoLeader = true
		return tr, nil
	}
	p := a.proc(old.ID)
	t0 := time.Now()
	if err := a.strike(ctx, fault, p); err != nil {
		return tr, err
	}
	newTerm := func(e event) bool { return e.Ev == "start" && e.Term != old.Term && e.At > t0.UnixNano() }
	if e, ok := a.next(newTerm, limit); ok {
		tr.FailoverS = time.Unix(0, e.At).Sub(t0).Seconds()
	}
	// Heal, then give the old leader time to learn that it lost.
	if err := a.heal(ctx, fault, p); err != nil {
		return tr, err
	}
	if fault != fSIGKILL {
		if e, ok := a.next(func(e event) bool { return e.Ev == "end" && e.Term == old.Term }, min(limit, 3*a.tm.Interval+5*time.Second)); ok {
			tr.KnewS = time.Unix(0, e.At).Sub(t0).Seconds()
		}
	}
	return tr, nil
}

// strike applies fault to the leader p; a restart hits every candidate.
func (a *arena) strike(ctx context.Context, fault string, p *proc) error {
	switch fault {
	case fSIGKILL:
		p.cmd.Process.Kill()
	case fSIGTERM:
		p.cmd.Process.Signal(syscall.SIGTERM)
	case fSIGSTOP:
		p.cmd.Process.Signal(syscall.SIGSTOP)
	case fBlackH:
		p.proxy.Blackhole()
	case fReset:
		p.proxy.Reset()
	case fKillConn:
		return a.killConnections(ctx, p.user)
	case fRestart:
		if err := a.srv.Kill(); err != nil {
			return err
		}
		return a.srv.Boot(ctx)
	}
	return nil
}

// killConnections ends every session of user on the server, as an
// operator's KILL CONNECTION would.
func (a *arena) killConnections(ctx context.Context, user string) error {
	rows, err := a.admin.QueryContext(ctx, "SELECT id FROM information_schema.PROCESSLIST WHERE user = ?", user)
	if err != nil {
		return err
	}
	var ids []int64
	for rows.Next() {
		var id int64
		rows.Scan(&id)
		ids = append(ids, id)
	}
	rows.Close()
	for _, id := range ids {
		a.admin.ExecContext(ctx, fmt.Sprintf("KILL CONNECTION %d", id))
	}
	return nil
}

// heal undoes fault on p: a killed candidate is started again, a stopped
// one continued, a blackhole lifted. The other faults heal by themselves.
func (a *arena) heal(ctx context.Context, fault string, p *proc) error {
	switch fault {
	case fSIGKILL, fSIGTERM:
		p.cmd.Wait()
		return a.spawn(ctx, p.id)
	case fSIGSTOP:
		p.cmd.Process.Signal(syscall.SIGCONT)
	case fBlackH:
		p.proxy.Restore()
	}
	return nil
}

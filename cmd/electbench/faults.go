package main

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"syscall"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/sqlelect/election/internal/failpoint"
	"github.com/sqlelect/election/internal/galeratest"
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
	// On a Galera cluster (chaos -galera), instead of restart: the node
	// the leader is connected to SIGKILLed then restarted, or SIGSTOPped
	// then continued.
	fNodeKill = "node-kill"
	fNodeStop = "node-stop"
	// On etcd-3: etcd's raft leader SIGKILLed, then restarted. It is made
	// the node the acting leader is connected to first, so that the fault
	// hits both: the leader's connection and etcd's own leader.
	fRaftLeader = "raft-leader"
)

// baseFaults hit any contender; allFaults add the traps, which only this
// library's strategies have.
var (
	baseFaults = []string{fSIGKILL, fSIGTERM, fSIGSTOP, fBlackH, fReset, fKillConn, fRestart}
	allFaults  = append(append(slices.Clone(baseFaults), trapFaults...), fNodeKill, fNodeStop)
)

// faultsFor returns the faults that can hit contender on srv. For etcd:
// all but the reset and KILL CONNECTION, which are MySQL's, and raft-leader
// only with three nodes. Else, the server faults that can hit srv: the
// restart if srv is private (a server given by -dsn is not ours to
// restart), the node faults if there is a cluster, the clock faults if its
// clock can be stepped and they are for contender (steppedClockHits).
func faultsFor(contender string, srv *mysqltest.Server, cluster *galeratest.Cluster, faults []string) []string {
	return slices.DeleteFunc(slices.Clone(faults), func(f string) bool {
		if isEtcd(contender) {
			return f == fReset || f == fKillConn || f == fRaftLeader && contender != etcd3 || isClock(f)
		}
		return f == fRaftLeader || f == fRestart && (!srv.Private() || cluster != nil) || (f == fNodeKill || f == fNodeStop) && cluster == nil ||
			isClock(f) && !(srv.Steppable() && steppedClockHits(contender))
	})
}

// trapsFor drops the traps that cannot hit contender: all of them but for
// this library's strategies (the failpoints are in it), and the lock's but
// for GetLock on sessions of their own (not shards, which share them).
func trapsFor(contender string, shards bool, faults []string) []string {
	return slices.DeleteFunc(faults, func(f string) bool {
		point, _, trap := trapOf(f)
		return trap && (!isLibrary(contender) || point == failpoint.Locked && (library(contender) != libGetLock || shards))
	})
}

// isolating reports whether any of faults must reach the leader's
// connections alone (a blackhole, a reset, KILL CONNECTION of its user), so
// that every candidate needs its own fault proxy and database user.
func isolating(faults []string) bool {
	return slices.ContainsFunc(faults, func(f string) bool { return f == fBlackH || f == fReset || f == fKillConn })
}

// trial is the outcome of one injected fault.
type trial struct {
	Contender string  `json:"contender"`
	Fault     string  `json:"fault"`
	At        int64   `json:"at,omitempty"`          // when it struck, Unix ns; 0 if nobody led
	FailoverS float64 `json:"failover_s"`            // to the next acting leader; -1: none within the limit
	KnewS     float64 `json:"old_knew_s"`            // until the old leader's term ended; -1: never seen
	NoLeader  bool    `json:"no_leader_before"`      // nobody led within the limit before the fault
	Missed    bool    `json:"trap_missed,omitempty"` // a trap that no candidate reached within the limit
	// Outranked: the next leader was not the candidate of the highest
	// priority among those that campaigned at the fault (ranked contenders).
	Outranked bool `json:"outranked,omitempty"`
	// A clock fault's step of the server's clock (seconds ahead of real
	// time; behind if negative; a strobe's, every other period), how long
	// the clock was off real time, and the terms that ended meanwhile or
	// within the settle after (clockSettle), which should be none.
	StepS   float64   `json:"clock_step_s,omitempty"`
	HeldS   float64   `json:"clock_held_s,omitempty"`
	Deposed []termEnd `json:"deposed,omitempty"`
}

// inject applies fault, one of the arena's, to the current leader, waits
// for the next acting leader, heals, and returns the trial.
func (a *arena) inject(ctx context.Context, fault string, limit time.Duration) (trial, error) {
	tr := trial{Contender: a.contender, Fault: fault, FailoverS: -1, KnewS: -1}
	if !slices.Contains(a.faults, fault) {
		// It may need the proxies and users the arena did not make.
		return tr, fmt.Errorf("%s: fault %s is not one of the arena's (%s)", a.contender, fault, join(a.faults))
	}
	old, ok := a.leader(limit)
	if !ok {
		// A contender that left a zombie leader, or none, after the last
		// fault: there is nobody to fault; say so and go on.
		tr.NoLeader = true
		return tr, nil
	}
	// What is pending now came before this fault and says nothing about
	// it (the leader check has seen it all); dropping it keeps pending
	// from growing over a long chaos run.
	a.pending = nil
	if point, action, ok := trapOf(fault); ok {
		return a.spring(ctx, tr, point, action, old, limit)
	}
	if isClock(fault) {
		return a.stepClock(ctx, tr, fault, old, limit)
	}
	p := a.proc(old.ID)
	if fault == fRaftLeader {
		if err := a.etcd.moveLeader(ctx, p.node); err != nil {
			return tr, err
		}
	}
	if fault == fSIGKILL || isRanked(a.contender) {
		a.campaigning(ctx, limit)
	}
	t0 := time.Now()
	tr.At = t0.UnixNano()
	if err := a.strike(ctx, fault, p); err != nil {
		return tr, err
	}
	newTerm := func(e event) bool { return e.Ev == "start" && e.Term != old.Term && e.At > t0.UnixNano() }
	// A leader that still writes L + S after the fault kept its term (a
	// LeaseRow leader renews on a new connection after a reset): nobody
	// takes over now, and waiting out the limit would only slow the run.
	kept := func(e event) bool {
		return e.Ev == "write" && e.OK && e.Term == old.Term && e.At > t0.Add(a.tm.Lease+a.tm.Margin).UnixNano()
	}
	e, ok := a.next(func(e event) bool { return newTerm(e) || kept(e) }, limit)
	if ok && newTerm(e) {
		tr.FailoverS = time.Unix(0, e.At).Sub(t0).Seconds()
		tr.Outranked = isRanked(a.contender) && a.proc(e.ID).index < a.highestBut(old.ID)
	}
	// Heal, then give the old leader time to learn that it lost.
	if err := a.heal(ctx, fault, p); err != nil {
		return tr, err
	}
	if learns(fault) && !(ok && kept(e)) {
		if e, ok := a.next(func(e event) bool { return e.Ev == "end" && e.Term == old.Term }, min(limit, 3*a.tm.Interval+5*time.Second)); ok {
			tr.KnewS = time.Unix(0, e.At).Sub(t0).Seconds()
		}
	}
	return tr, nil
}

// learns reports whether the leader hit by fault lives to learn that its
// term ended, so that the trial waits for its end: not if it was killed,
// nor if the fault hit a candidate that had no term yet, nor if it was
// only the server's clock, which must end no term.
func learns(fault string) bool {
	point, action, trap := trapOf(fault)
	return fault != fSIGKILL && !isClock(fault) && (!trap || point == pointFenced && action == "stop")
}

// strike applies fault to the leader p; a restart hits every candidate:
// the server, or every etcd node, is SIGKILLed and started again.
func (a *arena) strike(ctx context.Context, fault string, p *proc) error {
	switch fault {
	case fSIGKILL:
		p.kill()
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
		if a.etcd != nil {
			return a.etcd.restart(ctx)
		}
		if err := a.srv.Kill(); err != nil {
			return err
		}
		return a.srv.Boot(ctx)
	case fNodeKill:
		return a.cluster.Kill(p.node + 1)
	case fNodeStop:
		return a.cluster.Pause(p.node + 1)
	case fRaftLeader:
		// inject made it the leader's node.
		a.etcd.kill(p.node)
	}
	return nil
}

// killConnections ends every session of user on every server the
// candidates connect to, as an operator's KILL CONNECTION would.
func (a *arena) killConnections(ctx context.Context, user string) error {
	for _, admin := range a.nodeAdmins {
		ids, err := sessions(ctx, admin, user)
		if err != nil {
			return err
		}
		for _, id := range ids {
			_, err := admin.ExecContext(ctx, fmt.Sprintf("KILL CONNECTION %d", id))
			var me *mysql.MySQLError
			// A session that ended since it was listed is no failure.
			if err != nil && !(errors.As(err, &me) && me.Number == erNoSuchThread) {
				return fmt.Errorf("killing session %d of %s: %w", id, user, err)
			}
		}
	}
	return nil
}

// erNoSuchThread is the server's error for KILL of an unknown session.
const erNoSuchThread = 1094

// sessions lists the ids of user's sessions on the server of admin.
func sessions(ctx context.Context, admin *sql.DB, user string) ([]int64, error) {
	rows, err := admin.QueryContext(ctx, "SELECT id FROM information_schema.PROCESSLIST WHERE user = ?", user)
	if err != nil {
		return nil, fmt.Errorf("listing the sessions of %s: %w", user, err)
	}
	defer rows.Close()
	var ids []int64
	for rows.Next() {
		var id int64
		if err := rows.Scan(&id); err != nil {
			return nil, fmt.Errorf("listing the sessions of %s: %w", user, err)
		}
		ids = append(ids, id)
	}
	return ids, rows.Err()
}

// heal undoes fault on p: a killed candidate or etcd node is started again,
// a stopped one continued, a blackhole lifted. The other faults heal by
// themselves.
func (a *arena) heal(ctx context.Context, fault string, p *proc) error {
	switch fault {
	case fSIGKILL, fSIGTERM:
		p.wait()
		return a.spawn(ctx, p.id)
	case fSIGSTOP:
		p.cmd.Process.Signal(syscall.SIGCONT)
	case fBlackH:
		p.proxy.Restore()
	case fNodeKill:
		return a.cluster.Restart(ctx, p.node+1)
	case fNodeStop:
		if err := a.cluster.Resume(p.node + 1); err != nil {
			return err
		}
		ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
		defer cancel()
		return a.cluster.WaitHealthy(ctx)
	case fRaftLeader:
		if err := a.etcd.start(p.node); err != nil {
			return err
		}
		return a.etcd.waitHealthy(ctx)
	}
	return nil
}

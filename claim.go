package election

// The term start's statements, for one election: the read of the record
// a new term follows, the claim of it with the epoch's bump, the end of a
// claim whose term did not start, and the history the term writes once it
// has begun. start.go holds what decides between them; batch.go the same
// statements for many elections at once. See docs/protocol.md, "Campaign".

import (
	"context"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/go-sql-driver/mysql"
)

// termStart is a candidate's start of a term in one election: lock is the
// election's lock name, session the candidate's (GetLock: its connection
// id; LeaseRow: a random id), which the record names while it leads, and
// lease the lease row that renews the term (a shared session's), or 0.
type termStart struct {
	st      *store
	lock    string
	session uint64
	lease   uint64
}

// predecessor is the last term as a new one finds it: the record, read
// with the server's clock, which the next token must reach (see claim).
type predecessor struct {
	rec          Record
	exists       bool          // the election has a record
	delayUntilUS sql.NullInt64 // the end of a lock-delay owed, carried over from an earlier term (delay_until), µs
	handing      bool          // a hand-over to another live candidate is pending
	top          sql.NullInt64 // the highest priority a candidate joined with (top_priority); NULL: not known
	outranked    bool          // a candidate of a higher priority than the reader's waits (store.outranked)
}

// errRaced: the record changed between the read and the claim of a term
// start; the start is tried again.
var errRaced = errors.New("election: the record changed while the term started")

// now is the server's clock at the read.
func (p predecessor) now() time.Time { return time.UnixMicro(p.rec.nowUS).UTC() }

// next is the token a term that follows p claims: above p's, and at least
// the server's clock at the read (see claim).
func (p predecessor) next() uint64 { return max(p.rec.Token+1, uint64(max(p.rec.nowUS, 0))) }

// read reads the last term from the record, and the server's clock,
// which the next token must reach (see claim); one row even if the
// election has none yet. The lock is named by value, not by the record's
// column, which is NULL then: TiDB refuses IS_USED_LOCK(NULL) with error
// 3057 (TestFirstTermOfANewElection, on TiDB), and so does MySQL 5.7+ by
// its source (sql/item_func.cc: a NULL or empty user lock name is
// ER_USER_LOCK_WRONG_NAME; read, not tested here); MariaDB returns NULL.
func (s termStart) read(ctx context.Context, q querier) (predecessor, error) {
	var p predecessor
	sent := time.Now()
	err := q.QueryRowContext(ctx, text("SELECT "+predecessorColumns(s.st.tbl, "?", binLiteral(s.st.cfg.Identity))+", r.lock_name IS NOT NULL "+
		"FROM (SELECT 1) d LEFT JOIN ("+s.st.tbl.recordWithLease()+") ON r.lock_name = ?", s.lock, s.lock)).
		Scan(append(p.fields(), &p.exists)...)
	if err != nil {
		return p, during("reading the record", schemaError(s.st.tbl, err))
	}
	s.st.vouch(&p.rec, reading{p.rec.nowUS, sent, time.Now()})
	err = s.st.rank(ctx, q, s.lock, &p)
	return p, err
}

// predecessorColumns reads a predecessor from the record as r in t: owner
// names its lock, me the reader's identity (SQL expressions).
func predecessorColumns(t tables, owner, me string) string {
	return recordColumns(owner) + ", " + utcMicros("r.delay_until") + ", COALESCE(" + handingOver(t, "r", me) + ", FALSE), r.top_priority"
}

// fields returns the scan targets for predecessorColumns.
func (p *predecessor) fields() []any {
	return append(p.rec.fields(), &p.delayUntilUS, &p.handing, &p.top)
}

// mayBeOutranked reports whether a candidate of a higher priority than this one
// may wait in the election p is the last term of, by the record's hint:
// no candidate has joined it with a higher priority than top_priority;
// NULL (a record written by an earlier version, or none) tells nothing.
func (s *store) mayBeOutranked(p predecessor) bool {
	return !p.top.Valid || p.top.Int64 > int64(s.cfg.Priority)
}

// rank reads, through q, whether a candidate of a higher priority than this
// one waits in the election of lock, after the term p read (p.outranked),
// where the hint says one may (mayBeOutranked). Among candidates of one
// priority it costs nothing: any statement that so much as names the
// candidate table costs the server more than the claim itself (measured:
// docs/benchmarks.md, "Priority at every election").
func (s *store) rank(ctx context.Context, q querier, lock string, p *predecessor) error {
	if !s.mayBeOutranked(*p) {
		return nil
	}
	var holder any
	if p.exists {
		holder = p.rec.Identity
	}
	err := q.QueryRowContext(ctx, text("SELECT "+s.outranked("?", "?", "?"), lock, int(s.cfg.Priority), holder)).Scan(&p.outranked)
	if err != nil {
		return during("reading the candidates", schemaError(s.tbl, err))
	}
	return nil
}

// outranked is true, in the election lock names, while a candidate of a
// priority above priority waits in it (lock, priority and holder are SQL):
// one a hand-over could name (Config.target), other than holder, the last
// term's, which gave its term up or lost it. A new term yields to it for a
// while (store.outrankedFor).
func (s *store) outranked(lock, priority, holder string) string {
	return "EXISTS (SELECT 1 FROM `" + s.tbl.candidate + "` c WHERE c.lock_name = " + lock + " AND c.priority > " + priority +
		" AND NOT (c.identity <=> " + holder + ") AND " + s.cfg.target("c") + ")"
}

// handingOver is true, on the record as r, while a hand-over to another
// live candidate than me (an identity, as SQL) is pending.
func handingOver(t tables, r, me string) string {
	return r + ".handover_to IS NOT NULL AND " + r + ".handover_to <> " + me + " AND " + r + ".handover_until > UTC_TIMESTAMP(6) AND EXISTS (" +
		"SELECT 1 FROM `" + t.candidate + "` c WHERE c.lock_name = " + r + ".lock_name AND c.identity = " + r + ".handover_to AND " + alive("c") + ")"
}

// holding is the condition, on the record as r, that session (SQL) holds
// the election's lock as a GetLock candidate's claim and bump are made: a
// candidate on a shared session starts its term through the pool
// (sharedCandidate.start), and the session may have ended since its poll
// took the lock, and another candidate taken it. On a pinned session, which
// sends them itself, it always holds. A lease holds no lock: "".
func (s termStart) holding(r, session string) string {
	if _, strategy := s.st.settled(); strategy != GetLock {
		return ""
	}
	return " AND IS_USED_LOCK(" + r + ".lock_name) = " + session
}

// claim writes the new term's record (requests cleared, the lock-delay's
// end set), only if the record is still as read (a compare-and-set on its
// epoch, state, renewed_at and demote_at: decide's answer holds on a row
// unchanged since the read) and no hand-over became pending; otherwise it
// returns errRaced. In the same
// statement it bumps the epoch row (see bumpEpoch) and returns the token.
// Without an epoch row (the first term, or a record written before the
// epoch row was), it claims, then bumps in a statement of its own.
//
// The token is a hybrid logical clock: above the last one, and at least
// the server's clock in microseconds at the read. On one server, or a
// cluster that loses no commit, the first rule alone makes it grow. The
// second is for a replica promoted after its primary died: it may have
// lost the primary's last terms, whose tokens it would hand out again; but
// those were below the primary's clock when they were issued, so a
// failover that takes longer than the two servers' clocks differ leaves
// them all below the replica's clock (docs/protocol.md, "Replicas and a
// failover of the database").
func (s termStart) claim(ctx context.Context, q querier, p predecessor, delay time.Duration) (uint64, error) {
	claimed := p.next()
	v := s.values(p, claimed, delay)
	if !p.exists {
		// top_priority counts the candidates' rows, which every joiner
		// writes before it raises the hint (presence.joinOn).
		_, err := q.ExecContext(ctx, "INSERT INTO `"+s.st.tbl.record+"` "+
			"(lock_name, name, strategy, state, epoch, holder, host, pid, conn_id, lease_us, value, value_epoch, lease_id, top_priority, since, renewed_at) "+
			"VALUES ("+strings.Join([]string{v.lock, v.name, v.strategy, literal(stateLeading), v.epoch, v.identity, v.host, v.pid, v.session, v.leaseUS, v.value, v.epoch, v.leaseID,
			"(SELECT MAX(c.priority) FROM `" + s.st.tbl.candidate + "` c WHERE c.lock_name = " + v.lock + ")"}, ", ")+
			", UTC_TIMESTAMP(6), UTC_TIMESTAMP(6))")
		if me := new(mysql.MySQLError); errors.As(err, &me) && me.Number == 1062 { // duplicate key
			return 0, errRaced
		}
		if err != nil {
			return 0, during("writing the record", schemaError(s.st.tbl, err))
		}
		return s.bump(ctx, q, claimed)
	}
	where := s.unchanged(v)
	if token, ok, err := s.claimBumped(ctx, q, v, claimed, where); ok || err != nil {
		return token, err
	}
	// Lost a race, or there is no epoch row: the claim alone tells which.
	res, err := q.ExecContext(ctx, s.set(v, "")+where)
	if err != nil {
		return 0, during("writing the record", schemaError(s.st.tbl, err))
	}
	if n, err := res.RowsAffected(); err != nil || n != 1 {
		return 0, errRaced
	}
	return s.bump(ctx, q, claimed)
}

// claimBumped makes the claim v at claimed where the record matches where
// (SQL), with the epoch's bump in the same statement, and returns the
// token; ok is false if it changed nothing: a race lost, or no epoch row.
func (s termStart) claimBumped(ctx context.Context, q querier, v claimValues, claimed uint64, where string) (token uint64, ok bool, err error) {
	res, err := q.ExecContext(ctx, s.set(v, "JOIN `"+s.st.tbl.epoch+"` e ON e.lock_name = r.lock_name")+
		", e.epoch = LAST_INSERT_ID("+bumped("e.epoch", v.epoch)+")"+where)
	if err != nil {
		return 0, false, during("starting the term", schemaError(s.st.tbl, err))
	}
	if n, err := res.RowsAffected(); err != nil || n != 2 {
		return 0, false, nil
	}
	id, err := res.LastInsertId()
	if err == nil && uint64(id) < claimed {
		// The bump's value never comes back lower; a server or proxy
		// that drops it from the OK packet must not make a token of 0.
		err = fmt.Errorf("the server returned %d as the new epoch, below %d", id, claimed)
	}
	if err != nil {
		return 0, false, fmt.Errorf("election: starting the term: %w", err)
	}
	token, err = s.follow(ctx, q, claimed, uint64(id))
	return token, true, err
}

// claimContinued makes claimOnLook's claim after p at claimed, with the bump,
// in one statement, only if p's term continued as p shows it (continued),
// and returns the token; ok is false if it changed nothing.
func (s termStart) claimContinued(ctx context.Context, q querier, p predecessor, claimed uint64) (token uint64, ok bool, err error) {
	v := s.values(p, claimed, 0)
	// The look may be older than a candidate of a higher priority that
	// joined since, whose join raised the hint.
	where := s.continued(v) + " AND r.top_priority <= " + literal(int(s.st.cfg.Priority))
	return s.claimBumped(ctx, q, v, claimed, where)
}

// continued is claimOnLook's condition on the record as r: see there.
func (s termStart) continued(v claimValues) string {
	return " WHERE r.lock_name = " + v.lock + " AND r.epoch = " + v.token + " AND CAST(r.strategy AS BINARY) = CAST(" + literal(GetLock.String()) + " AS BINARY) AND (" +
		"CAST(r.state AS BINARY) = CAST(" + literal(stateLeading) + " AS BINARY) AND NOT (r.demote_epoch <=> r.epoch) AND " + ageMicros("r.renewed_at") + " <= r.lease_us" +
		" OR CAST(r.state AS BINARY) IN (" + literals(gracefulEnds) + ") AND EXISTS (SELECT 1 FROM `" + s.st.tbl.term + "` t WHERE t.lock_name = r.lock_name AND t.epoch = r.epoch AND t.ended_at IS NOT NULL))" +
		" AND (r.delay_until IS NULL OR r.delay_until <= UTC_TIMESTAMP(6)) AND r.handover_to IS NULL" + s.holding("r", v.session)
}

// claimValues is what a claim writes and what it compares the record
// with, as SQL: literals for one term start (values), the columns of a
// derived table for a batch of them (claimBatched).
type claimValues struct {
	lock, name, strategy, epoch, identity, host, pid, session, leaseUS, since, delayUntil, value, leaseID string // written
	token, state, renewedUS, demoteUS                                                                     string // as read; demoteUS -1 for none
}

// claimColumn is one of a claim's values and its name in a batch's
// derived table.
type claimColumn struct {
	name  string
	value *string
}

func (v *claimValues) columns() []claimColumn {
	return []claimColumn{{"lock_name", &v.lock}, {"name", &v.name}, {"strategy", &v.strategy}, {"epoch", &v.epoch}, {"identity", &v.identity},
		{"host", &v.host}, {"pid", &v.pid}, {"session", &v.session}, {"lease_us", &v.leaseUS}, {"since", &v.since}, {"delay_until", &v.delayUntil},
		{"value", &v.value}, {"lease_id", &v.leaseID}, {"token", &v.token}, {"state", &v.state}, {"renewed_us", &v.renewedUS}, {"demote_us", &v.demoteUS}}
}

// values is the claim of s after p at epoch claimed, with the lock-delay
// delay, as literals: the names, identity and lock with their columns'
// collations, which a batch's derived table needs.
//
// The term starts (since) when the claim is made, on the database clock,
// but never before anything the last term stamped (its start, its last
// renewal, its end), so that the history stays in order however that
// clock was stepped between the two. The lock-delay owed ends delay after
// that start (delay_until), which a reader translates to its own clock
// through the start (predecessor.delayLeft).
func (s termStart) values(p predecessor, claimed uint64, delay time.Duration) claimValues {
	host, _ := os.Hostname()
	_, strategy := s.st.settled()
	startUS := utcMicros("UTC_TIMESTAMP(6)")
	if p.exists {
		startUS = "GREATEST(" + startUS + ", " + literal(p.rec.Since.UnixMicro()) + ", " + literal(p.rec.Renewed.UnixMicro())
		if !p.rec.Ended.IsZero() {
			startUS += ", " + literal(p.rec.Ended.UnixMicro())
		}
		startUS += ")"
	}
	since, delayUntil, demoteUS := datetime(startUS), "NULL", int64(-1)
	if delay > 0 {
		delayUntil = datetime(startUS + " + " + literal(delay.Microseconds()))
	}
	if p.rec.demoteAt.Valid {
		demoteUS = p.rec.demoteAt.Int64
	}
	leaseID := "NULL"
	if s.lease != 0 {
		leaseID = literal(s.lease)
	}
	return claimValues{lock: lockLiteral(s.lock), leaseID: leaseID, name: binLiteral(s.st.name), strategy: literal(strategy.String()), epoch: literal(claimed),
		identity: binLiteral(s.st.cfg.Identity), host: literal(host), pid: literal(os.Getpid()), session: literal(s.session),
		leaseUS: literal((s.st.cfg.Lease + s.st.cfg.Margin).Microseconds()), since: since, delayUntil: delayUntil, value: binLiteral(s.st.proclaimed()),
		token: literal(p.rec.Token), state: literal(p.rec.State), renewedUS: literal(p.rec.renewedUS.Int64), demoteUS: literal(demoteUS)}
}

// bumped is the epoch column col bumped for a claim at claimed (SQL): by
// one, and to at least claimed.
func bumped(col, claimed string) string { return "GREATEST(" + col + " + 1, " + claimed + ")" }

// set is the claim's UPDATE of the record as r, joined to join. A bump
// added to it must depend on no column it assigns: a multi-table UPDATE
// may make its assignments in any order.
func (s termStart) set(v claimValues, join string) string {
	return "UPDATE `" + s.st.tbl.record + "` r " + join + " SET r.name = " + v.name + ", r.strategy = " + v.strategy + ", r.epoch = " + v.epoch +
		", r.state = " + literal(stateLeading) + ", r.holder = " + v.identity + ", r.host = " + v.host + ", r.pid = " + v.pid +
		", r.conn_id = " + v.session + ", r.lease_us = " + v.leaseUS + ", r.since = " + v.since + ", r.renewed_at = UTC_TIMESTAMP(6), " +
		"r.ended_at = NULL, r.demote_epoch = NULL, r.demote_at = NULL, r.handover_to = NULL, r.handover_until = NULL, r.delay_until = " + v.delayUntil + ", r.value = " + v.value + ", r.value_epoch = " + v.epoch +
		", r.lease_id = " + v.leaseID
}

// unchanged is the claim's condition: the record as read, the term it
// names and every column its holder or an operator writes (a renewal, an
// end, a request to step down), no hand-over pending since, and, under
// GetLock, the lock still the claimant's session's. The state is compared
// as bytes, which needs no collation shared with the value's.
func (s termStart) unchanged(v claimValues) string {
	return " WHERE r.lock_name = " + v.lock + " AND r.epoch = " + v.token + " AND CAST(r.state AS BINARY) = CAST(" + v.state + " AS BINARY) AND " +
		utcMicros("r.renewed_at") + " = " + v.renewedUS + " AND COALESCE(" + utcMicros("r.demote_at") + ", -1) = " + v.demoteUS +
		" AND NOT (" + handingOver(s.st.tbl, "r", v.identity) + ")" + s.holding("r", v.session)
}

// bump bumps the epoch after a claim made in a statement of its own; one
// that fails gives the claim up.
func (s termStart) bump(ctx context.Context, q querier, claimed uint64) (uint64, error) {
	token, err := s.bumpEpoch(ctx, q, claimed)
	if err != nil {
		s.endClaim(ctx, q, claimed)
	}
	return token, err
}

// bumpEpoch raises the election's epoch to at least claimed (the epoch the
// record was claimed with) and by one, and returns it: the new term's
// token. It bumps only while the record still holds this claim, in the same
// statement: a claimant that was superseded while paused between claim and
// bump must not push the epoch past the live term's token. LAST_INSERT_ID
// hands the new epoch back in the OK packet, with no second round trip; a
// first insert reports 0: claimed. Should the epoch have been ahead of the
// record, the record follows it.
func (s termStart) bumpEpoch(ctx context.Context, q querier, claimed uint64) (uint64, error) {
	res, err := q.ExecContext(ctx, text("INSERT INTO `"+s.st.tbl.epoch+"` (lock_name, epoch) "+
		"SELECT r.lock_name, r.epoch FROM `"+s.st.tbl.record+"` r WHERE r.lock_name = ? AND r.epoch = ? AND r.conn_id = ?"+s.holding("r", literal(s.session))+" "+
		"ON DUPLICATE KEY UPDATE epoch = LAST_INSERT_ID("+bumped("`"+s.st.tbl.epoch+"`.epoch", "?")+")", s.lock, claimed, s.session, claimed))
	if err != nil {
		return 0, during("bumping the epoch", schemaError(s.st.tbl, err))
	}
	n, err := res.RowsAffected()
	if err != nil {
		return 0, fmt.Errorf("election: bumping the epoch: %w", err)
	}
	id, err := res.LastInsertId()
	if err != nil {
		return 0, fmt.Errorf("election: bumping the epoch: %w", err)
	}
	token := uint64(id)
	switch n {
	case 0:
		return 0, errRaced // the claim is gone
	case 1:
		token = claimed // a first insert
	}
	return s.follow(ctx, q, claimed, token)
}

// follow moves the record of a claim at claimed to token, the epoch the
// bump gave, should the epoch have been ahead of the record.
func (s termStart) follow(ctx context.Context, q querier, claimed, token uint64) (uint64, error) {
	if token == claimed {
		return token, nil
	}
	res, err := q.ExecContext(ctx, text("UPDATE `"+s.st.tbl.record+"` SET epoch = ? WHERE lock_name = ? AND epoch = ? AND conn_id = ?", token, s.lock, claimed, s.session))
	if err != nil {
		return 0, during("writing the record", schemaError(s.st.tbl, err))
	}
	if n, err := res.RowsAffected(); err != nil || n != 1 {
		return 0, errRaced
	}
	return token, nil
}

// endClaim records a claim whose term did not start (its bump failed) as
// lost, so that the next candidate need not wait for it to go stale;
// nothing was handed out under it. Best effort: the session may be gone.
func (s termStart) endClaim(ctx context.Context, q querier, claimed uint64) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.st.cfg.Interval)
	defer cancel()
	s.st.endRecord(ctx, q, s.lock, claimed, ending{why: stateLost, at: time.Now()}, s.session)
}

// writeHistory records the term token in the history, after it has begun:
// the row of its predecessor p if that one died before writing it, the end
// of every earlier term that did not record its own, and its own row,
// unless a later term has written it already from its own read of the
// record. An end not recorded is "lost" (its leader may still tell the
// real reason later, see payOwed), at the moment p could act no longer as
// the read showed it: the end of its lease, or the read if that came first
// (its session ended, so it crashed or will learn of it at its next
// keepalive); older terms ended when p began. It reads the record without
// a lock (a plain read), so it takes no lock a keepalive could wait for.
// Every statement is idempotent, so a late writer changes nothing that is
// already there. It is bounded by an interval, so that the term's first
// keepalive is not late. The term's row starts when its claim set the
// record (since), before the leader's code ran, however late the row is
// written; if a later term has the record by then, when the claim had
// returned (started), measured back from the write.
func (s termStart) writeHistory(ctx context.Context, q querier, token uint64, p predecessor, started time.Time) error {
	ctx, cancel := context.WithTimeout(ctx, s.st.cfg.Interval)
	defer cancel()
	prune := s.st.pruneDue()
	return onConn(ctx, q, func(q querier) error {
		err := s.history(ctx, q, token, p, started, prune)
		if conflict(err) { // a late writer's statement met ours: once more
			err = s.history(ctx, q, token, p, started, prune)
		}
		return err
	})
}

// history makes writeHistory's statements; prune trims the history to
// HistoryLimit terms.
func (s termStart) history(ctx context.Context, q querier, token uint64, p predecessor, started time.Time, prune bool) error {
	// The term started when its claim set the record's since, on the
	// database clock: read it, without a lock, while the record still
	// names this term. A measure from the claim's return instead would be
	// late by however long this statement waited to run, and could follow
	// the leader's first write (TestHistoryStartIsTheClaim, under load).
	// A record that names an earlier term, or none, is not the one the
	// claim wrote: the pool reaches another server than the term's (a
	// failover of the database, which the term learns of at its next
	// keepalive), whose history this term must not close.
	var (
		since  sql.NullInt64
		epoch  sql.Null[uint64]
		server string
	)
	// On a multi-primary cluster the session may reach a member that has
	// not applied the claim yet: it is read again until it has, within the
	// history's bound.
	for cluster, _ := s.st.settled(); ; {
		if err := q.QueryRowContext(ctx, text("SELECT "+utcMicros("since")+", epoch, "+serverName+" FROM `"+s.st.tbl.record+"` WHERE lock_name = ?", s.lock)).
			Scan(&since, &epoch, &server); err != nil && !errors.Is(err, sql.ErrNoRows) {
			return during("writing the history", schemaError(s.st.tbl, err))
		}
		if epoch.Valid && epoch.V >= token {
			break
		}
		if !cluster.certifies() || ctx.Err() != nil {
			return fmt.Errorf("election: the history of term %d was not written: the server the pool reaches, %s, has not granted that term "+
				"(its record names term %d, 0: none): was the database failed over?", token, server, epoch.V)
		}
		select {
		case <-ctx.Done():
		case <-time.After(10 * time.Millisecond):
		}
	}
	startUS, startArg := "?", since.Int64
	if epoch.V > token {
		// A later term has the record by now: the claim's return, measured
		// back from now, and never before anything the last term stamped,
		// as the claim's since is not (values).
		startUS, startArg = utcMicros(timeAgo), agoMicros(started)
		if p.exists {
			startUS = "GREATEST(" + startUS + ", " + literal(max(p.rec.Since.UnixMicro(), p.rec.Renewed.UnixMicro(), p.rec.Ended.UnixMicro())) + ")"
		}
	}
	if p.exists {
		// Ended as the record said, if it had recorded its end there; and
		// in any case no earlier than it was last seen alive, and no later
		// than this term began, whatever the database clock did meanwhile.
		var reason any
		if p.rec.State != stateLeading {
			reason = p.rec.State
		}
		ended := datetime("LEAST(GREATEST(?, ?), " + startUS + ")")
		endedArgs := []any{p.rec.lastActed(p.now()).UnixMicro(), max(p.rec.Since.UnixMicro(), p.rec.Renewed.UnixMicro()), startArg}
		if _, err := q.ExecContext(ctx, text("INSERT IGNORE INTO `"+s.st.tbl.term+"` (lock_name, epoch, holder, host, pid, started_at, ended_at, reason) "+
			"VALUES (?, ?, ?, ?, ?, "+atMicros+", IF(? IS NULL, NULL, "+ended+"), ?)",
			slices.Concat([]any{s.lock, p.rec.Token, p.rec.Identity, p.rec.Host, p.rec.PID, p.rec.Since.UnixMicro(), reason}, endedArgs, []any{reason})...)); err != nil {
			return during("writing the history", schemaError(s.st.tbl, err))
		}
		if _, err := q.ExecContext(ctx, text("UPDATE `"+s.st.tbl.term+"` SET ended_at = IF(epoch = ?, "+ended+", "+atMicros+"), "+
			"reason = IF(epoch = ?, COALESCE(?, ?), ?) WHERE lock_name = ? AND epoch < ? AND ended_at IS NULL",
			slices.Concat([]any{p.rec.Token}, endedArgs, []any{p.rec.Since.UnixMicro(), p.rec.Token, reason, stateLost, stateLost, s.lock, token})...)); err != nil {
			return during("closing the last term", schemaError(s.st.tbl, err))
		}
	}
	// Not before the last term's end as its row has it: the last leader
	// may have written its own since this term's claim (a resignation
	// releases first), on a clock stepped back meanwhile.
	host, _ := os.Hostname()
	if _, err := q.ExecContext(ctx, text("INSERT IGNORE INTO `"+s.st.tbl.term+"` (lock_name, epoch, holder, host, pid, server, started_at) "+
		"SELECT ?, ?, ?, ?, ?, "+serverName+", "+datetime("GREATEST("+startUS+", COALESCE(MAX("+utcMicros("t.ended_at")+"), "+startUS+"))")+
		" FROM `"+s.st.tbl.term+"` t WHERE t.lock_name = ? AND t.epoch = ?",
		s.lock, token, s.st.cfg.Identity, host, os.Getpid(), startArg, startArg, s.lock, p.rec.Token)); err != nil {
		return during("writing the history", schemaError(s.st.tbl, err))
	}
	if prune {
		// The derived table is materialised (it has a LIMIT), so MySQL lets
		// the DELETE read the table it deletes from.
		if _, err := q.ExecContext(ctx, text("DELETE FROM `"+s.st.tbl.term+"` WHERE lock_name = ? AND epoch < (SELECT epoch FROM ("+
			"SELECT epoch FROM `"+s.st.tbl.term+"` WHERE lock_name = ? ORDER BY epoch DESC LIMIT 1 OFFSET ?) k)", s.lock, s.lock, s.st.cfg.HistoryLimit-1)); err != nil {
			return during("pruning the history", schemaError(s.st.tbl, err))
		}
	}
	return nil
}

// lockLiteral and binLiteral are a lock name, and an identity or an
// election's name, with the character sets and collations of their columns
// in the tables: a derived table's column is compared to a table's as an
// implicit collation, where a literal is coercible, and two implicit
// collations that differ are an error.
func lockLiteral(lock string) string { return collated(lock, "ascii", "ascii_bin") }

func binLiteral(s string) string { return collated(s, "utf8mb4", "utf8mb4_bin") }

func collated(s, charset, collation string) string {
	if plain(s) {
		return "_" + charset + "'" + s + "' COLLATE " + collation
	}
	return "_" + charset + " X'" + hex.EncodeToString([]byte(s)) + "' COLLATE " + collation
}

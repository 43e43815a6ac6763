package election

// The term start: a read of the record, then the claim of it together with
// the epoch bump, two statements after the candidate has won; and the
// history, which the term writes once it has begun. See docs/protocol.md,
// "Campaign".

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/go-sql-driver/mysql"
)

// termStart is a candidate's start of a term in one election: lock is the
// election's lock name, session the candidate's (GetLock: its connection
// id; LeaseRow: a random id), which the record names while it leads.
type termStart struct {
	st      *store
	lock    string
	session uint64
}

// predecessor is the last term as a new one finds it: the record, read
// with the server's clock, which the next token must reach (see claim).
type predecessor struct {
	rec         Record
	exists      bool          // the election has a record
	nowUS       uint64        // the server's clock at the read, µs since the Unix epoch
	delayLeftUS sql.NullInt64 // the lock-delay still owed, carried over from an earlier term (delay_until)
	handing     bool          // a hand-over to another live candidate is pending
}

// errRaced: the record changed between the read and the claim of a term
// start; the start is tried again.
var errRaced = errors.New("election: the record changed while the term started")

// open starts the term through q in two statements: a read of the record
// (read), from which decide tells whether the term may start and after
// what lock-delay; then the claim of the record, a compare-and-set on that
// read, which bumps the epoch in the same statement: its new value is the
// token. (The first term of an election,
// which has no rows yet, claims and bumps in two statements.) The history
// is written afterwards (writeHistory), off the path to the caller. A claim
// that loses a race is tried again once.
func (s termStart) open(ctx context.Context, q querier) (token uint64, delay time.Duration, p predecessor, err error) {
	for try := 0; ; try++ {
		if p, err = s.read(ctx, q); err != nil {
			return 0, 0, p, err
		}
		if delay, err = s.decide(p); err != nil {
			return 0, 0, p, err
		}
		token, err = s.claim(ctx, q, p, delay)
		if conflict(err) { // the claim's transaction lost to another's
			err = errRaced
		}
		if errors.Is(err, errRaced) && try == 0 {
			continue
		}
		if errors.Is(err, errRaced) {
			err = ErrHeld
		}
		if err != nil {
			return 0, 0, p, err
		}
		return token, delay, p, nil
	}
}

// unclaim gives up a claim whose term did not start (its bump failed), so
// that the next candidate need not wait for it to go stale; nothing was
// handed out under it. Best effort: the session may be gone.
func (s termStart) unclaim(ctx context.Context, q querier, claimed uint64) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.st.cfg.Interval)
	defer cancel()
	s.st.endRecord(ctx, q, s.lock, claimed, ending{stateLost, time.Now()}, text(" AND conn_id = ?", s.session))
}

// read reads the last term from the record, and the server's clock,
// which the next token must reach (see claim); one row even if the
// election has none yet. The lock is named by value, not by the record's
// column, which is NULL then: TiDB refuses IS_USED_LOCK(NULL) with error
// 3057 (TestFirstTermOfANewElection, on TiDB), and so does MySQL 5.7+ by
// its source (sql/item_func.cc: a NULL or empty user lock name is
// ER_USER_LOCK_WRONG_NAME; read, not tested here); MariaDB returns NULL.
func (s termStart) read(ctx context.Context, q querier) (predecessor, error) {
	var p predecessor
	err := q.QueryRowContext(ctx, text("SELECT "+utcMicros("UTC_TIMESTAMP(6)")+", r.lock_name IS NOT NULL, "+recordColumns("?")+", "+
		"TIMESTAMPDIFF(MICROSECOND, UTC_TIMESTAMP(6), r.delay_until), COALESCE("+s.handingOver("r")+", FALSE) "+
		"FROM (SELECT 1) d LEFT JOIN `"+s.st.tbl.record+"` r ON r.lock_name = ?", s.lock, s.lock)).
		Scan(append(append([]any{&p.nowUS, &p.exists}, p.rec.fields()...), &p.delayLeftUS, &p.handing)...)
	if err != nil {
		return p, during("reading the record", schemaError(s.st.tbl, err))
	}
	return p, nil
}

// holding is the condition, on the record as r, that a GetLock candidate's
// session holds the election's lock as its claim and bump are made: a
// candidate on a shared session starts its term through the pool
// (sharedCandidate.start), and the session may have ended since its poll
// took the lock, and another candidate taken it. On a pinned session, which
// sends them itself, it always holds. A lease holds no lock: "".
func (s termStart) holding(r string) string {
	if _, strategy := s.st.settled(); strategy != GetLock {
		return ""
	}
	return text(" AND IS_USED_LOCK("+r+".lock_name) = ?", s.session)
}

// now is the server's clock at the read.
func (p predecessor) now() time.Time { return time.UnixMicro(int64(p.nowUS)).UTC() }

// handingOver is true, on the record as r, while a hand-over to another
// live candidate than this one is pending.
func (s termStart) handingOver(r string) string {
	return text(r+".handover_to IS NOT NULL AND "+r+".handover_to <> ? AND "+r+".handover_until > UTC_TIMESTAMP(6) AND EXISTS ("+
		"SELECT 1 FROM `"+s.st.tbl.candidate+"` c WHERE c.lock_name = "+r+".lock_name AND c.identity = "+r+".handover_to "+
		"AND "+alive("c")+")", s.st.cfg.Identity)
}

// decide decides, by the record's rule, whether a new term may follow p,
// and after what
// lock-delay:
//   - it refuses (ErrStrategy) while a term of the other strategy still acts;
//   - under LeaseRow, it returns ErrHeld unless the last term has ended, gone
//     stale (no renewal for its lease plus margin, database clock), or
//     ignored a demotion for as long;
//   - it returns errYield while a hand-over to another live candidate is
//     pending;
//   - when the last term was asked to step down (or was killed as stuck)
//     and did not end gracefully, the new term must not act before that
//     leader's lease has certainly expired: the lock-delay. A lock-delay
//     still running is owed too, whoever owed it first: the term that owed
//     it may have ended before it was over (it crashed, or its Campaign's
//     context ended), and ended gracefully, and so owes nothing itself.
func (s termStart) decide(p predecessor) (time.Duration, error) {
	_, strategy := s.st.settled()
	switch acting := p.rec.Leading(); {
	case acting && p.rec.Strategy != strategy.String():
		return 0, fmt.Errorf("%w: election %q is led under strategy %s; every candidate must use the same (Config.Strategy)", ErrStrategy, s.st.name, p.rec.Strategy)
	case acting && strategy == LeaseRow:
		return 0, ErrHeld
	case p.handing:
		return 0, errYield
	}
	return max(time.Duration(p.delayLeftUS.Int64)*time.Microsecond, p.rec.lockDelay()), nil
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
	host, _ := os.Hostname()
	_, strategy := s.st.settled()
	claimed := max(p.rec.Token+1, p.nowUS)
	values := []any{s.st.name, strategy.String(), claimed, s.st.cfg.Identity, host, os.Getpid(), s.session, (s.st.cfg.Lease + s.st.cfg.Margin).Microseconds()}
	if !p.exists {
		_, err := q.ExecContext(ctx, text("INSERT INTO `"+s.st.tbl.record+"` "+
			"(lock_name, name, strategy, state, epoch, holder, host, pid, conn_id, lease_us, since, renewed_at) "+
			"VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, UTC_TIMESTAMP(6), UTC_TIMESTAMP(6))", append([]any{s.lock, values[0], values[1], stateLeading}, values[2:]...)...))
		if me := new(mysql.MySQLError); errors.As(err, &me) && me.Number == 1062 { // duplicate key
			return 0, errRaced
		}
		if err != nil {
			return 0, during("writing the record", schemaError(s.st.tbl, err))
		}
		return s.bump(ctx, q, claimed)
	}
	delayUntil := "NULL"
	if delay > 0 {
		delayUntil = text(atMicros, int64(p.nowUS)+delay.Microseconds()) // from the read, as delay was
	}
	// The bump's value depends on no column this statement assigns: a
	// multi-table UPDATE may make its assignments in any order.
	set := func(join string) string {
		return text("UPDATE `"+s.st.tbl.record+"` r "+join+" SET r.name = ?, r.strategy = ?, r.epoch = ?, r.state = "+literal(stateLeading)+", "+
			"r.holder = ?, r.host = ?, r.pid = ?, r.conn_id = ?, r.lease_us = ?, r.since = UTC_TIMESTAMP(6), r.renewed_at = UTC_TIMESTAMP(6), "+
			"r.ended_at = NULL, r.demote_epoch = NULL, r.demote_at = NULL, r.handover_to = NULL, r.handover_until = NULL, r.delay_until = "+delayUntil, values...)
	}
	// The record as read: the term it names, and every column its holder
	// or an operator writes (a renewal, an end, a request to step down).
	var demoteAt any
	if p.rec.demoteAt.Valid {
		demoteAt = p.rec.demoteAt.Int64
	}
	where := text(" WHERE r.lock_name = ? AND r.epoch = ? AND r.state = ? AND "+utcMicros("r.renewed_at")+" = ? AND "+utcMicros("r.demote_at")+" <=> ? AND NOT (",
		s.lock, p.rec.Token, p.rec.State, p.rec.Renewed.UnixMicro(), demoteAt) + s.handingOver("r") + ")" + s.holding("r")
	res, err := q.ExecContext(ctx, set("JOIN `"+s.st.tbl.epoch+"` e ON e.lock_name = r.lock_name")+
		text(", e.epoch = LAST_INSERT_ID(GREATEST(e.epoch + 1, ?))", claimed)+where)
	if err != nil {
		return 0, during("starting the term", schemaError(s.st.tbl, err))
	}
	if n, err := res.RowsAffected(); err == nil && n == 2 {
		id, err := res.LastInsertId()
		if err == nil && uint64(id) < claimed {
			// The bump's value never comes back lower; a server or proxy
			// that drops it from the OK packet must not make a token of 0.
			err = fmt.Errorf("the server returned %d as the new epoch, below %d", id, claimed)
		}
		if err != nil {
			return 0, fmt.Errorf("election: starting the term: %w", err)
		}
		return s.follow(ctx, q, claimed, uint64(id))
	}
	// Lost a race, or there is no epoch row: the claim alone tells which.
	res, err = q.ExecContext(ctx, set("")+where)
	if err != nil {
		return 0, during("writing the record", schemaError(s.st.tbl, err))
	}
	if n, err := res.RowsAffected(); err != nil || n != 1 {
		return 0, errRaced
	}
	return s.bump(ctx, q, claimed)
}

// bump bumps the epoch after a claim made in a statement of its own; one
// that fails gives the claim up.
func (s termStart) bump(ctx context.Context, q querier, claimed uint64) (uint64, error) {
	token, err := s.bumpEpoch(ctx, q, claimed)
	if err != nil {
		s.unclaim(ctx, q, claimed)
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
		"SELECT r.lock_name, r.epoch FROM `"+s.st.tbl.record+"` r WHERE r.lock_name = ? AND r.epoch = ? AND r.conn_id = ?"+s.holding("r")+" "+
		"ON DUPLICATE KEY UPDATE epoch = LAST_INSERT_ID(GREATEST(`"+s.st.tbl.epoch+"`.epoch + 1, ?))", s.lock, claimed, s.session, claimed))
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
	if p.exists {
		// Ended as the record said, if it had recorded its end there.
		var reason any
		if p.rec.State != stateLeading {
			reason = p.rec.State
		}
		ended := p.rec.lastActed(p.now()).UnixMicro()
		if _, err := q.ExecContext(ctx, text("INSERT IGNORE INTO `"+s.st.tbl.term+"` (lock_name, epoch, holder, host, pid, started_at, ended_at, reason) "+
			"VALUES (?, ?, ?, ?, ?, "+atMicros+", IF(? IS NULL, NULL, "+atMicros+"), ?)",
			s.lock, p.rec.Token, p.rec.Identity, p.rec.Host, p.rec.PID, p.rec.Since.UnixMicro(), reason, ended, reason)); err != nil {
			return during("writing the history", schemaError(s.st.tbl, err))
		}
		if _, err := q.ExecContext(ctx, text("UPDATE `"+s.st.tbl.term+"` SET ended_at = IF(epoch = ?, "+atMicros+", "+atMicros+"), "+
			"reason = IF(epoch = ?, COALESCE(?, ?), ?) WHERE lock_name = ? AND epoch < ? AND ended_at IS NULL",
			p.rec.Token, ended, p.rec.Since.UnixMicro(), p.rec.Token, reason, stateLost, stateLost, s.lock, token)); err != nil {
			return during("closing the last term", schemaError(s.st.tbl, err))
		}
	}
	// The term started when its claim set the record's since, on the
	// database clock: read it, without a lock, while the record still
	// names this term. A measure from the claim's return instead would be
	// late by however long this statement waited to run, and could follow
	// the leader's first write (TestHistoryStartIsTheClaim, under load).
	var since sql.NullInt64
	if err := q.QueryRowContext(ctx, text("SELECT "+utcMicros("since")+" FROM `"+s.st.tbl.record+"` WHERE lock_name = ? AND epoch = ?", s.lock, token)).Scan(&since); err != nil && !errors.Is(err, sql.ErrNoRows) {
		return during("writing the history", schemaError(s.st.tbl, err))
	}
	start := text(timeAgo, agoMicros(started)) // a later term has the record by now
	if since.Valid {
		start = text(atMicros, since.Int64)
	}
	host, _ := os.Hostname()
	if _, err := q.ExecContext(ctx, text("INSERT IGNORE INTO `"+s.st.tbl.term+"` (lock_name, epoch, holder, host, pid, server, started_at) "+
		"VALUES (?, ?, ?, ?, ?, "+serverName+", ", s.lock, token, s.st.cfg.Identity, host, os.Getpid())+start+")"); err != nil {
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

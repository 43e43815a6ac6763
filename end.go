package election

// The end of a term as the record and the history keep it: one vocabulary
// of reasons for the leader's logs, its metrics, History and Watch; the
// time the leader stopped acting, not the time the row was written; and
// the leader's own account, written late if the server was out of reach,
// in place of the "lost" its successor wrote meanwhile. See
// docs/protocol.md, "The end of a term".

import (
	"context"
	"database/sql"
	"time"
)

// States of the record, and reasons in the term history.
const (
	stateLeading      = "leading"
	stateResigned     = "resigned"      // Resign, or the campaign's context ended
	stateDemoted      = "demoted"       // stepped down when asked (Demote)
	stateHandedOver   = "handed-over"   // stepped down for a named successor (Handover)
	stateUnhealthy    = "unhealthy"     // stepped down when its health check failed (Config.Health)
	stateHangKilled   = "hang-killed"   // stuck inside a query; its session was killed
	stateDemoteKilled = "demote-killed" // did not step down when asked; its session was killed
	stateLeaseExpired = "lease-expired" // no keepalive confirmed within the lease
	stateSessionLost  = "session-lost"  // the pinned session failed
	stateLockLost     = "lock-lost"     // the session lives but the lock or record moved on
	stateLost         = "lost"          // ended without saying why (crash, outside kill)
)

// gracefulEnds are the ends a leader chose or was asked for and made
// itself, its code stopped before it released the election: they owe the
// next term no lock-delay (Record.lockDelay).
var gracefulEnds = []string{stateResigned, stateDemoted, stateHandedOver, stateUnhealthy}

// ending is how a term ended: why, and when it stopped acting, on the local
// monotonic clock. The row gets that moment on the database clock, however
// late it is written.
type ending struct {
	why string
	at  time.Time
	// serverUS is at on the database clock (Unix microseconds), once a
	// statement has taken it there; 0 until then.
	serverUS int64
	// lasted is how long the term lasted by its leader's own clock, from
	// its start to at; 0 where the writer is not its leader (a kill).
	lasted time.Duration
}

// moment is the SQL for at on the database clock, as microseconds since
// the Unix epoch, and its argument. Translated by timeAgo, at comes out
// late by the time the statement waited to run; taken by an earlier
// statement, it does not.
func (e ending) moment() (string, int64) {
	if e.serverUS != 0 {
		return "?", e.serverUS
	}
	return utcMicros(timeAgo), agoMicros(e.at)
}

// lastedUS is lasted for the history's lasted_us: NULL when unknown.
func (e ending) lastedUS() any {
	if e.lasted <= 0 {
		return nil
	}
	return e.lasted.Microseconds()
}

// timeAgo is the SQL for a moment on the database clock, given how many
// microseconds ago it was (agoMicros), measured just before the statement
// is sent: a local moment, written late, keeps its time. The statement
// must go on a session already in hand (see onConn), or a pool's dial
// would come between the measure and the send.
const timeAgo = "UTC_TIMESTAMP(6) - INTERVAL ? MICROSECOND"

func agoMicros(at time.Time) int64 { return max(time.Since(at), 0).Microseconds() }

// onConn runs f on one session of q: q itself if it is one, or one taken
// from the pool q for the call.
func onConn(ctx context.Context, q querier, f func(q querier) error) error {
	db, ok := q.(*sql.DB)
	if !ok {
		return f(q)
	}
	conn, err := db.Conn(ctx)
	if err != nil {
		return during("opening a session", refusal(err))
	}
	err = f(conn)
	release(conn, err)
	return err
}

// endTerm records how term token ended, in one statement: in the record,
// if it still describes that term as leading, and in the history, unless
// the leader already wrote its own reason there: a "lost" written by the
// successor, which could not know better, gives way, and so does any
// reason to a kill's. The history's end keeps its order whatever the
// database clock did: never before the term's start, never after the next
// term's start (an end written late, after a step of that clock back). The
// leader's own measure of the term goes with it (lasted_us). (The
// assignments depend on nothing they assign: a multi-table UPDATE may make
// them in any order. The next start is read through a derived table, which
// its aggregate keeps from being merged: MySQL refuses an UPDATE that
// reads its own table otherwise, error 1093.)
//
// The next term's start reads the row this one's end writes, and may meet
// it in a deadlock: the end is tried once more then.
func (s *store) endTerm(ctx context.Context, q querier, lock string, token uint64, end ending) error {
	return onConn(ctx, q, func(q querier) error {
		err := s.endTermOn(ctx, q, lock, token, end)
		if conflict(err) {
			err = s.endTermOn(ctx, q, lock, token, end)
		}
		if conflict(err) { // the record, which the next term reads, must still say it
			err = s.endRecord(ctx, q, lock, token, end, "")
		}
		return err
	})
}

func (s *store) endTermOn(ctx context.Context, q querier, lock string, token uint64, end ending) error {
	at, us := end.moment()
	_, err := q.ExecContext(ctx, text("UPDATE (SELECT 1) AS x "+
		"LEFT JOIN `"+s.tbl.record+"` r ON r.lock_name = ? AND r.epoch = ? AND r.state = ? "+
		"LEFT JOIN `"+s.tbl.term+"` t ON t.lock_name = ? AND t.epoch = ? AND (t.reason IS NULL OR t.reason = ? OR ? IN (?, ?)) "+
		"LEFT JOIN (SELECT MIN(started_at) AS started_at FROM `"+s.tbl.term+"` WHERE lock_name = ? AND epoch > ?) n ON 1 "+
		"SET r.state = ?, r.ended_at = "+datetime("GREATEST("+utcMicros("r.since")+", "+at+")")+", "+
		"t.ended_at = "+datetime("GREATEST("+utcMicros("t.started_at")+", LEAST("+at+", COALESCE("+utcMicros("n.started_at")+", "+at+")))")+
		", t.reason = ?, t.lasted_us = COALESCE(?, t.lasted_us)",
		lock, token, stateLeading, lock, token, stateLost, end.why, stateHangKilled, stateDemoteKilled, lock, token, end.why, us, us, us, end.why, end.lastedUS()))
	if denied(err) || serverError(err, 1146, 1205) {
		// Denied, missing or locked on the history: the record, which the
		// next term reads, must still say how this one ended.
		err = s.endRecord(ctx, q, lock, token, end, "")
	}
	return err
}

// endRecord records in the record, if it still describes term token as
// leading (and matches cond, SQL on its columns), how the term ended: not
// before it started, whatever the database clock did.
func (s *store) endRecord(ctx context.Context, q querier, lock string, token uint64, end ending, cond string) error {
	at, us := end.moment()
	_, err := q.ExecContext(ctx, text("UPDATE `"+s.tbl.record+"` SET state = ?, ended_at = "+datetime("GREATEST("+utcMicros("since")+", "+at+")")+" "+
		"WHERE lock_name = ? AND epoch = ? AND state = ?", end.why, us, lock, token, stateLeading)+cond)
	return err
}

// owedEnd is the end of a term that could not be recorded when it ended.
type owedEnd struct {
	token uint64
	end   ending
}

// maxOwed bounds the ends a candidate keeps for later: a process has one
// term at a time, and each campaign first pays what it owes.
const maxOwed = 8

// owe keeps the end of term token, which could not be written (the server
// was out of reach), to be written by payOwed.
func (s *store) owe(token uint64, end ending) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.owed) == maxOwed {
		s.owed = s.owed[1:]
	}
	s.owed = append(s.owed, owedEnd{token, end})
}

// payOwed writes the ends that could not be written when they happened,
// with their own reasons and times, through the pool, bounded by an
// interval; what still fails is kept for the next call. Campaigns call it
// once the server is reached (prepare).
func (s *store) payOwed(ctx context.Context, lock string) {
	s.mu.Lock()
	owed := s.owed
	s.owed = nil
	s.mu.Unlock()
	if len(owed) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, s.cfg.Interval)
	defer cancel()
	for i, o := range owed {
		if err := s.endTerm(ctx, s.db, lock, o.token, o.end); err != nil {
			for _, o := range owed[i:] {
				s.owe(o.token, o.end)
			}
			return
		}
	}
}

// settle fills in the end of history row t, which has none yet, from what
// the record and the next row (if any) show, exactly as the next term will
// write it: so that History and Watch tell the same story before and after
// that write. A term followed by another ended, "lost", when the next
// began; a term the record shows ended gets the record's reason and time;
// a term whose holder has gone silent for longer than its lease plus
// margin, and holds no lock a deputy will kill it for, ended, "lost", at
// that moment, since it can no longer act. A term that may still act stays
// open.
func settle(t TermRecord, next *TermRecord, rec Record) TermRecord {
	switch {
	case !t.Ended.IsZero():
	case next != nil:
		t.Reason, t.Ended = stateLost, next.Started
	case rec.Token != t.Token:
	case rec.State != stateLeading:
		t.Reason, t.Ended = rec.State, rec.Ended
	case rec.stale() && rec.overdue() == "":
		t.Reason, t.Ended = stateLost, rec.Renewed.Add(rec.Expiry)
	}
	return t
}

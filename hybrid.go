package election

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/go-sql-driver/mysql"
)

// States of the record, and reasons in the term history.
const (
	stateLeading      = "leading"
	stateResigned     = "resigned"      // Resign, or the campaign's context ended
	stateDemoted      = "demoted"       // stepped down when asked (Demote)
	stateHandedOver   = "handed-over"   // stepped down for a named successor (Handover)
	stateHangKilled   = "hang-killed"   // stuck inside a query; its session was killed
	stateDemoteKilled = "demote-killed" // did not step down when asked; its session was killed
	stateLeaseExpired = "lease-expired" // no keepalive confirmed within the lease
	stateSessionLost  = "session-lost"  // the pinned session failed
	stateLockLost     = "lock-lost"     // the session lives but the lock or record moved on
	stateLost         = "lost"          // ended without saying why (crash, outside kill)
)

// Record is the keepalive row of an election as anyone with SELECT on the
// tables can read it, together with who holds the lock now. Times come from
// the database clock.
type Record struct {
	Name     string // the election's name
	State    string // "leading", or why the last term ended (see History)
	Token    uint64 // the epoch of the term the record describes
	Identity string // the holder's identity
	Host     string // the holder's host name
	PID      int    // the holder's process id
	ConnID   uint64 // the holder's pinned session
	Since    time.Time
	Renewed  time.Time
	Ended    time.Time // zero while leading
	// RenewedAgo is the age of the last renewal when the record was read.
	RenewedAgo time.Duration
	// Expiry is Lease+Margin of the holder: a renewal older than this means
	// the holder no longer acts, whatever the lock says.
	Expiry time.Duration
	// LockConnID is the session that holds the lock now, 0 if none.
	LockConnID uint64
	// DemotedAgo is how long ago a demotion of this term was requested; 0
	// if none was.
	DemotedAgo time.Duration
	// HandoverTo is the candidate a pending hand-over prefers.
	HandoverTo string
}

// Leading reports whether the record describes a live leader: a term in
// state leading whose session holds the lock and whose last renewal is
// younger than its lease plus margin.
func (r Record) Leading() bool {
	return r.State == stateLeading && r.LockConnID != 0 && r.LockConnID == r.ConnID && r.RenewedAgo <= r.Expiry
}

// overdue says why the recorded holder's session must be killed, or "":
// it holds the lock (cross-checked with IS_USED_LOCK) yet has not renewed
// for longer than its lease plus margin, so it is stuck inside a query (an
// idle one would have been dropped by wait_timeout); or it was asked to
// step down longer than that ago and has not.
func (r Record) overdue() string {
	if r.State != stateLeading || r.LockConnID == 0 || r.LockConnID != r.ConnID {
		return ""
	}
	switch {
	case r.RenewedAgo > r.Expiry:
		return stateHangKilled
	case r.DemotedAgo > r.Expiry:
		return stateDemoteKilled
	}
	return ""
}

// querier is what both the pool and a pinned session offer.
type querier interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// Leader reads who leads the election. It needs only SELECT on the tables
// and works for any Elector, campaigning or not. When nobody leads it
// returns ErrNoLeader, with the record of the last term if there was one.
func (e *Elector) Leader(ctx context.Context) (Record, error) {
	lock, err := e.lockNameFor(ctx)
	if err != nil {
		return Record{}, err
	}
	r, err := readRecord(ctx, e.db, e.tbl, lock)
	if err != nil {
		return r, err
	}
	if !r.Leading() {
		return r, ErrNoLeader
	}
	return r, nil
}

// lockNameFor learns the lock name without creating tables, so that readers
// need no privilege beyond SELECT.
func (e *Elector) lockNameFor(ctx context.Context) (string, error) {
	e.mu.Lock()
	ready, lock := e.ready, e.lockName
	e.mu.Unlock()
	if ready {
		return lock, nil
	}
	var database sql.NullString
	if err := e.db.QueryRowContext(ctx, "SELECT DATABASE()").Scan(&database); err != nil {
		return "", fmt.Errorf("election: reaching the server: %w", err)
	}
	if !database.Valid {
		return "", fmt.Errorf("%w: the DSN names no database; add one, as in user:pass@tcp(host:3306)/dbname", ErrInvalidConfig)
	}
	return lockName(database.String, e.cfg.TablePrefix, e.name), nil
}

// utcMicros reads a DATETIME(6) column written in UTC as microseconds since
// the Unix epoch, so that no DSN setting (parseTime, loc) changes it.
func utcMicros(col string) string {
	return "TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', " + col + ")"
}

// ageMicros is how long ago col was, on the database clock.
func ageMicros(col string) string {
	return "TIMESTAMPDIFF(MICROSECOND, " + col + ", UTC_TIMESTAMP(6))"
}

func fromMicros(us sql.NullInt64) time.Time {
	if !us.Valid {
		return time.Time{}
	}
	return time.UnixMicro(us.Int64).UTC()
}

func micros(us sql.NullInt64) time.Duration { return time.Duration(us.Int64) * time.Microsecond }

func readRecord(ctx context.Context, q querier, t tables, lock string) (Record, error) {
	rs, err := readRecords(ctx, q, t, "WHERE lock_name = ?", lock)
	if err != nil {
		return Record{}, err
	}
	if len(rs) == 0 {
		return Record{}, ErrNoLeader
	}
	return rs[0], nil
}

func readRecords(ctx context.Context, q querier, t tables, where string, args ...any) ([]Record, error) {
	rows, err := q.QueryContext(ctx, "SELECT name, state, epoch, holder, host, pid, conn_id, "+
		utcMicros("since")+", "+utcMicros("renewed_at")+", "+utcMicros("ended_at")+", "+
		ageMicros("renewed_at")+", lease_us, IS_USED_LOCK(lock_name), "+
		"IF(demote_epoch <=> epoch, "+ageMicros("demote_at")+", NULL), handover_to "+
		"FROM `"+t.record+"` "+where+" ORDER BY name", args...)
	if err != nil {
		return nil, fmt.Errorf("election: reading the record: %w", schemaError(t, err))
	}
	defer rows.Close()
	var rs []Record
	for rows.Next() {
		var (
			r                                   Record
			since, renewed, ended, ago, demoted sql.NullInt64
			leased, owner                       sql.NullInt64
			handTo                              sql.NullString
		)
		if err := rows.Scan(&r.Name, &r.State, &r.Token, &r.Identity, &r.Host, &r.PID, &r.ConnID,
			&since, &renewed, &ended, &ago, &leased, &owner, &demoted, &handTo); err != nil {
			return nil, fmt.Errorf("election: reading the record: %w", err)
		}
		r.Since, r.Renewed, r.Ended = fromMicros(since), fromMicros(renewed), fromMicros(ended)
		r.RenewedAgo, r.Expiry, r.DemotedAgo = micros(ago), micros(leased), micros(demoted)
		r.LockConnID, r.HandoverTo = uint64(owner.Int64), handTo.String
		rs = append(rs, r)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("election: reading the record: %w", err)
	}
	return rs, nil
}

// endTerm records why a term ended, in the record (if it still describes
// that term as leading) and in the history. A "lost" guess made by the next
// term gives way to the real reason.
func endTerm(ctx context.Context, q querier, t tables, lock string, token uint64, why string) error {
	if _, err := q.ExecContext(ctx, "UPDATE `"+t.record+"` SET state = ?, ended_at = UTC_TIMESTAMP(6) "+
		"WHERE lock_name = ? AND epoch = ? AND state = ?", why, lock, token, stateLeading); err != nil {
		return err
	}
	_, err := q.ExecContext(ctx, "UPDATE `"+t.term+"` SET ended_at = COALESCE(ended_at, UTC_TIMESTAMP(6)), reason = ? "+
		"WHERE lock_name = ? AND epoch = ? AND (reason IS NULL OR reason = ? OR ? IN (?, ?))",
		why, lock, token, stateLost, why, stateHangKilled, stateDemoteKilled)
	return err
}

// kill ends the session of a holder that overdue found stuck or
// disobedient. rec must come from a read that cross-checked the lock owner
// with IS_USED_LOCK; no other session id is ever killed.
func (e *Elector) kill(ctx context.Context, q querier, rec Record, why string) error {
	lock, err := e.lockNameFor(ctx)
	if err != nil {
		return err
	}
	if _, err := q.ExecContext(ctx, "KILL CONNECTION ?", rec.ConnID); err != nil {
		var me *mysql.MySQLError
		switch {
		case errors.As(err, &me) && me.Number == 1094: // unknown thread: already gone
		case errors.As(err, &me) && (me.Number == 1095 || me.Number == 1227):
			e.stats.killsDenied.Add(1)
			return fmt.Errorf("%w: KILL CONNECTION %d (%s, token %d, %s): %w; grant the electors' user CONNECTION ADMIN "+
				"(MySQL 8, MariaDB 10.5+) or SUPER, or run every candidate as the same user",
				ErrKillDenied, rec.ConnID, rec.Identity, rec.Token, why, err)
		default:
			return fmt.Errorf("election: KILL CONNECTION %d: %w", rec.ConnID, err)
		}
	}
	e.stats.kills.Add(1)
	e.log.Warn("killed the session of a leader", "reason", why, "holder", rec.Identity, "token", rec.Token, "conn_id", rec.ConnID)
	return endTerm(ctx, q, e.tbl, lock, rec.Token, why)
}

// Demote forces a re-election: it asks the current leader to step down,
// which it does at its next keepalive (its term's context is cancelled and,
// under Run, its function returns before the lock is released). If the
// leader has not stepped down within its lease plus margin, Demote kills its
// session; the next term then waits until that leader's lease has certainly
// expired before it starts. Demote returns once the term has ended,
// reporting whether a kill was needed. Without a leader it returns
// ErrNoLeader.
func (e *Elector) Demote(ctx context.Context) (killed bool, err error) {
	return e.demote(ctx, "")
}

// Handover asks the current leader to step down for the live candidate
// named identity: other candidates that win the lock while the hand-over is
// pending give it back. It refuses with ErrNotCandidate, changing nothing,
// unless identity is a live candidate. It returns as Demote does; the
// target then leads as soon as it wins the lock.
func (e *Elector) Handover(ctx context.Context, identity string) (killed bool, err error) {
	lock, err := e.lockNameFor(ctx)
	if err != nil {
		return false, err
	}
	var alive bool
	err = e.db.QueryRowContext(ctx, "SELECT EXISTS (SELECT 1 FROM `"+e.tbl.candidate+"` WHERE lock_name = ? AND identity = ? AND "+
		ageMicros("seen_at")+" <= expiry_us)", lock, identity).Scan(&alive)
	if err != nil {
		return false, fmt.Errorf("election: reading the candidates: %w", schemaError(e.tbl, err))
	}
	if !alive {
		return false, fmt.Errorf("%w: no candidate %q of election %q has sent a heartbeat lately; list them with Candidates (electctl candidates)", ErrNotCandidate, identity, e.name)
	}
	return e.demote(ctx, identity)
}

func (e *Elector) demote(ctx context.Context, to string) (bool, error) {
	lock, err := e.lockNameFor(ctx)
	if err != nil {
		return false, err
	}
	rec, err := readRecord(ctx, e.db, e.tbl, lock)
	if err != nil {
		return false, err
	}
	if !rec.Leading() {
		return false, ErrNoLeader
	}
	if to != "" && rec.Identity == to {
		return false, nil // already leads
	}
	var handTo any
	if to != "" {
		handTo = to
	}
	// The hand-over preference outlives the demotion long enough for the
	// target to win the lock, and no longer: a target that died meanwhile
	// must not block the election.
	res, err := e.db.ExecContext(ctx, "UPDATE `"+e.tbl.record+"` SET demote_epoch = epoch, demote_at = UTC_TIMESTAMP(6), "+
		"handover_to = ?, handover_until = UTC_TIMESTAMP(6) + INTERVAL 3 * lease_us MICROSECOND "+
		"WHERE lock_name = ? AND epoch = ? AND state = ?", handTo, lock, rec.Token, stateLeading)
	if err != nil {
		return false, fmt.Errorf("election: requesting the demotion: %w", schemaError(e.tbl, err))
	}
	if n, _ := res.RowsAffected(); n != 1 {
		return false, ErrNoLeader // the term ended meanwhile
	}
	e.stats.demotions.Add(1)
	poll := time.NewTicker(min(e.cfg.Interval, 50*time.Millisecond))
	defer poll.Stop()
	for {
		select {
		case <-ctx.Done():
			return false, ctx.Err()
		case <-poll.C:
		}
		cur, err := readRecord(ctx, e.db, e.tbl, lock)
		if err != nil {
			return false, err
		}
		if cur.Token != rec.Token || cur.State != stateLeading || cur.LockConnID != cur.ConnID {
			return false, nil // the term has ended
		}
		if why := cur.overdue(); why != "" {
			return true, e.kill(ctx, e.db, cur, why)
		}
	}
}

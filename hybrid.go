package election

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
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

// errHandedOver marks a demotion that names a successor.
var errHandedOver = errors.New("handing over")

// errYield: the election was won while a hand-over to another live
// candidate is pending; the term is not started.
var errYield = errors.New("election: yielding to the hand-over target")

// demotion is the error that ends a term whose record asks it to step down.
func demotion(handTo sql.NullString) error {
	if handTo.Valid {
		return fmt.Errorf("%w: %w to %q", ErrDemoted, errHandedOver, handTo.String)
	}
	return ErrDemoted
}

// Record is the keepalive row of an election as anyone with SELECT on the
// tables can read it, together with who holds the lock now. Times come from
// the database clock.
type Record struct {
	Name     string // the election's name
	Strategy string // "get_lock" or "lease"
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
// state leading whose last renewal is younger than its lease plus margin
// and, under GetLock, whose session holds the lock.
func (r Record) Leading() bool {
	return r.State == stateLeading && r.holds() && r.RenewedAgo <= r.Expiry
}

// holds reports whether the recorded holder still holds what the strategy
// holds the election with: the lock for GetLock, the row itself for LeaseRow.
func (r Record) holds() bool {
	return r.Strategy == LeaseRow.String() || r.LockConnID != 0 && r.LockConnID == r.ConnID
}

// overdue says why the recorded holder's session must be killed, or "":
// it holds the lock (cross-checked with IS_USED_LOCK) yet has not renewed
// for longer than its lease plus margin, so it is stuck inside a query (an
// idle one would have been dropped by wait_timeout); or it was asked to
// step down longer than that ago and has not. A lease holds no session.
func (r Record) overdue() string {
	if r.State != stateLeading || r.Strategy != GetLock.String() || !r.holds() {
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
	rows, err := q.QueryContext(ctx, "SELECT name, strategy, state, epoch, holder, host, pid, conn_id, "+
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
		if err := rows.Scan(&r.Name, &r.Strategy, &r.State, &r.Token, &r.Identity, &r.Host, &r.PID, &r.ConnID,
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
			err = fmt.Errorf("%w: KILL CONNECTION %d (%s, token %d, %s): %w; grant the electors' user CONNECTION ADMIN "+
				"(MySQL 8, MariaDB 10.5+) or SUPER, or run every candidate as the same user",
				ErrKillDenied, rec.ConnID, rec.Identity, rec.Token, why, err)
			e.observeKill(why, err)
			return err
		default:
			return fmt.Errorf("election: KILL CONNECTION %d: %w", rec.ConnID, err)
		}
	}
	e.stats.kills.Add(1)
	e.observeKill(why, nil)
	e.log.Warn("killed the session of a leader", "reason", why, "holder", rec.Identity, "token", rec.Token, "conn_id", rec.ConnID)
	return endTerm(ctx, q, e.tbl, lock, rec.Token, why)
}

func (e *Elector) observeKill(why string, err error) {
	if f := e.cfg.Observer.Killed; f != nil {
		f(e.name, why, err)
	}
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
		if cur.Token != rec.Token || cur.State != stateLeading || !cur.holds() {
			return false, nil // the term has ended
		}
		if why := cur.overdue(); why != "" {
			return true, e.kill(ctx, e.db, cur, why)
		}
	}
}

// heartbeatPeriod is how often a candidate refreshes its row.
func (c Config) heartbeatPeriod() time.Duration { return max(c.CheckInterval, c.Lease/2) }

// join writes this candidate's first heartbeat, refuses to join an election
// that live candidates of another strategy run, and deletes the rows of
// candidates dead for ten of their expiry periods.
func (e *Elector) join(ctx context.Context, q querier, lock string, seen *time.Time) error {
	var other sql.NullString
	err := q.QueryRowContext(ctx, "SELECT MIN(identity) FROM `"+e.tbl.candidate+"` WHERE lock_name = ? AND strategy <> ? AND "+
		ageMicros("seen_at")+" <= expiry_us", lock, e.cfg.Strategy.String()).Scan(&other)
	if err != nil {
		return fmt.Errorf("election: reading the candidates: %w", schemaError(e.tbl, err))
	}
	if other.Valid {
		return fmt.Errorf("%w: candidate %q of election %q uses another strategy than %v; every candidate must use the same (Config.Strategy)", ErrStrategy, other.String, e.name, e.cfg.Strategy)
	}
	if err := e.heartbeat(ctx, q, lock, seen); err != nil {
		return err
	}
	if _, err := q.ExecContext(ctx, "DELETE FROM `"+e.tbl.candidate+"` WHERE lock_name = ? AND "+
		ageMicros("seen_at")+" > 10 * expiry_us", lock); err != nil {
		return fmt.Errorf("election: cleaning up candidates: %w", schemaError(e.tbl, err))
	}
	return nil
}

// heartbeat writes this candidate's row, keeping its first sighting unless
// the process changed.
func (e *Elector) heartbeat(ctx context.Context, q querier, lock string, seen *time.Time) error {
	host, _ := os.Hostname()
	expiry := 2*e.cfg.heartbeatPeriod() + e.cfg.Margin
	_, err := q.ExecContext(ctx, "INSERT INTO `"+e.tbl.candidate+"` "+
		"(lock_name, identity, strategy, host, pid, since, seen_at, expiry_us) VALUES (?, ?, ?, ?, ?, UTC_TIMESTAMP(6), UTC_TIMESTAMP(6), ?) "+
		"ON DUPLICATE KEY UPDATE since = IF(pid <=> VALUES(pid) AND host <=> VALUES(host), since, VALUES(since)), "+
		"strategy = VALUES(strategy), host = VALUES(host), pid = VALUES(pid), seen_at = VALUES(seen_at), expiry_us = VALUES(expiry_us)",
		lock, e.cfg.Identity, e.cfg.Strategy.String(), host, os.Getpid(), expiry.Microseconds())
	if err != nil {
		return fmt.Errorf("election: candidate heartbeat: %w", schemaError(e.tbl, err))
	}
	*seen = time.Now()
	return nil
}

func (e *Elector) heartbeatIfDue(ctx context.Context, q querier, lock string, seen *time.Time) error {
	if time.Since(*seen) < e.cfg.heartbeatPeriod() {
		return nil
	}
	return e.heartbeat(ctx, q, lock, seen)
}

// openTerm starts a term in tx, for the candidate whose session (GetLock:
// its connection id; LeaseRow: a random id) is given. It reads the record
// FOR UPDATE and
//   - refuses (ErrStrategy) while a term of the other strategy still acts;
//   - under LeaseRow, returns ErrHeld unless the last term has ended, gone
//     stale (no renewal for its lease plus margin, database clock), or
//     ignored a demotion for as long;
//   - returns errYield while a hand-over to another live candidate is
//     pending;
//   - computes the lock-delay: when the last term was asked to step down (or
//     was killed as stuck) and did not end gracefully, the new term must not
//     act before that leader's lease has certainly expired;
//
// then bumps the epoch, writes the record, closes the last term's history
// row if nobody did, and opens this term's.
func (e *Elector) openTerm(ctx context.Context, tx *sql.Tx, lock string, session uint64) (token uint64, delay time.Duration, err error) {
	t := e.tbl
	var (
		prevStrategy, prevState         sql.NullString
		prevSession, owner, leaseLeftUS sql.NullInt64
		stale, forced, overdue, yield   sql.NullBool
	)
	err = tx.QueryRowContext(ctx, "SELECT strategy, state, conn_id, IS_USED_LOCK(lock_name), "+
		ageMicros("renewed_at")+" > lease_us, demote_epoch <=> epoch, "+
		"demote_epoch <=> epoch AND "+ageMicros("demote_at")+" > lease_us, "+
		"TIMESTAMPDIFF(MICROSECOND, UTC_TIMESTAMP(6), renewed_at + INTERVAL lease_us MICROSECOND), "+
		"handover_to IS NOT NULL AND handover_to <> ? AND handover_until > UTC_TIMESTAMP(6) AND EXISTS ("+
		"SELECT 1 FROM `"+t.candidate+"` c WHERE c.lock_name = r.lock_name AND c.identity = r.handover_to "+
		"AND "+ageMicros("c.seen_at")+" <= c.expiry_us) "+
		"FROM `"+t.record+"` r WHERE lock_name = ? FOR UPDATE", e.cfg.Identity, lock).
		Scan(&prevStrategy, &prevState, &prevSession, &owner, &stale, &forced, &overdue, &leaseLeftUS, &yield)
	if err != nil && !errors.Is(err, sql.ErrNoRows) {
		return 0, 0, fmt.Errorf("election: reading the record: %w", schemaError(t, err))
	}
	// Does the last term still act, by its own strategy's rules?
	acting := prevState.String == stateLeading && !stale.Bool &&
		(prevStrategy.String == LeaseRow.String() || owner.Valid && owner.Int64 == prevSession.Int64)
	switch {
	case acting && prevStrategy.String != e.cfg.Strategy.String():
		return 0, 0, fmt.Errorf("%w: election %q is led under strategy %s; every candidate must use the same (Config.Strategy)", ErrStrategy, e.name, prevStrategy.String)
	case acting && e.cfg.Strategy == LeaseRow && !overdue.Bool:
		return 0, 0, ErrHeld
	case yield.Bool:
		return 0, 0, errYield
	}
	var graceful, killed bool
	switch prevState.String {
	case stateResigned, stateDemoted, stateHandedOver:
		graceful = true
	case stateHangKilled, stateDemoteKilled:
		killed = true
	}
	if (killed || forced.Bool) && !graceful && leaseLeftUS.Int64 > 0 {
		delay = time.Duration(leaseLeftUS.Int64) * time.Microsecond
	}
	// LAST_INSERT_ID(expr) hands the new epoch back in the OK packet: no
	// second round trip to read it. A first insert reports 0: epoch 1.
	res, err := tx.ExecContext(ctx, "INSERT INTO `"+t.epoch+"` (lock_name, epoch) VALUES (?, 1) "+
		"ON DUPLICATE KEY UPDATE epoch = LAST_INSERT_ID(epoch + 1)", lock)
	if err != nil {
		return 0, 0, fmt.Errorf("election: bumping the epoch: %w", schemaError(t, err))
	}
	epoch, err := res.LastInsertId()
	if err != nil {
		return 0, 0, fmt.Errorf("election: bumping the epoch: %w", err)
	}
	token = max(uint64(epoch), 1)
	host, _ := os.Hostname()
	if _, err := tx.ExecContext(ctx, "INSERT INTO `"+t.record+"` "+
		"(lock_name, name, strategy, state, epoch, holder, host, pid, conn_id, lease_us, since, renewed_at, ended_at, "+
		"demote_epoch, demote_at, handover_to, handover_until) "+
		"VALUES (?, ?, ?, 'leading', ?, ?, ?, ?, ?, ?, UTC_TIMESTAMP(6), UTC_TIMESTAMP(6), NULL, NULL, NULL, NULL, NULL) "+
		"ON DUPLICATE KEY UPDATE name = VALUES(name), strategy = VALUES(strategy), state = VALUES(state), epoch = VALUES(epoch), "+
		"holder = VALUES(holder), host = VALUES(host), pid = VALUES(pid), conn_id = VALUES(conn_id), "+
		"lease_us = VALUES(lease_us), since = VALUES(since), renewed_at = VALUES(renewed_at), ended_at = NULL, "+
		"demote_epoch = NULL, demote_at = NULL, handover_to = NULL, handover_until = NULL",
		lock, e.name, e.cfg.Strategy.String(), token, e.cfg.Identity, host, os.Getpid(), session,
		(e.cfg.Lease + e.cfg.Margin).Microseconds()); err != nil {
		return 0, 0, fmt.Errorf("election: writing the record: %w", schemaError(t, err))
	}
	// Terms that ended without saying why (a crash, a kill from outside) are
	// closed as lost; their leader may still tell the real reason later.
	if _, err := tx.ExecContext(ctx, "UPDATE `"+t.term+"` SET ended_at = UTC_TIMESTAMP(6), reason = ? "+
		"WHERE lock_name = ? AND ended_at IS NULL", stateLost, lock); err != nil {
		return 0, 0, fmt.Errorf("election: closing the last term: %w", schemaError(t, err))
	}
	if _, err := tx.ExecContext(ctx, "INSERT INTO `"+t.term+"` (lock_name, epoch, holder, host, pid, started_at) "+
		"VALUES (?, ?, ?, ?, ?, UTC_TIMESTAMP(6))", lock, token, e.cfg.Identity, host, os.Getpid()); err != nil {
		return 0, 0, fmt.Errorf("election: writing the history: %w", schemaError(t, err))
	}
	if limit := uint64(e.cfg.HistoryLimit); token%historyPruneEvery == 0 && token > limit {
		if _, err := tx.ExecContext(ctx, "DELETE FROM `"+t.term+"` WHERE lock_name = ? AND epoch <= ?", lock, token-limit); err != nil {
			return 0, 0, fmt.Errorf("election: pruning the history: %w", schemaError(t, err))
		}
	}
	return token, delay, nil
}

// historyPruneEvery spaces out the deletes that bound the history.
const historyPruneEvery = 16

package election

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"os"
	"time"
)

// pinned is one candidate's own server session. Lock, keepalive and
// ownership statements run only here: through the pool, database/sql would
// retry a dropped session's statement on a fresh session that holds nothing.
type pinned struct {
	e      *Elector
	conn   *sql.Conn
	id     uint64 // CONNECTION_ID()
	lock   string
	token  uint64
	leased time.Duration // Lease+Margin, written to the record for readers
	seen   time.Time     // last candidate heartbeat
}

// errHandedOver marks a demotion that names a successor.
var errHandedOver = errors.New("handing over")

// errYield: the lock was won while a hand-over to another live candidate is
// pending; the term is not started.
var errYield = errors.New("election: yielding to the hand-over target")

// acquire pins a session, waits in GET_LOCK and starts a term on it.
func (e *Elector) acquire(waitCtx, termCtx context.Context) (*Term, error) {
	lock, err := e.prepare(waitCtx)
	if err != nil {
		return nil, err
	}
	s, err := e.pin(waitCtx, lock)
	if err != nil {
		return nil, err
	}
	for {
		got, err := s.getLock(waitCtx)
		if err == nil && !got {
			if err = s.contend(waitCtx); err == nil {
				continue
			}
		}
		if err != nil {
			s.close()
			return nil, err
		}
		sent := time.Now()
		delay, err := s.startTerm(waitCtx)
		if errors.Is(err, errYield) {
			if err = s.yield(waitCtx); err == nil {
				continue
			}
		}
		if err != nil {
			s.close()
			return nil, err
		}
		t := newTerm(e, s, s.token, sent, termCtx)
		return t, t.waitLockDelay(waitCtx, delay)
	}
}

// pin takes a session from the pool for good and sets it up. Every
// candidate's session, not only the leader's, gets the short wait_timeout:
// a waiter cut off from the server is still granted the lock when its turn
// comes, and only wait_timeout frees it. Lock waits are bounded at 2W, so
// that a session stuck behind a row or metadata lock frees itself even
// where hang detection may not kill it.
func (e *Elector) pin(ctx context.Context, lock string) (*pinned, error) {
	conn, err := e.db.Conn(ctx)
	if err != nil {
		return nil, fmt.Errorf("election: opening a session: %w", err)
	}
	s := &pinned{e: e, conn: conn, lock: lock, leased: e.cfg.Lease + e.cfg.Margin}
	w := e.cfg.waitTimeout()
	setup := fmt.Sprintf("SET SESSION wait_timeout = %d, innodb_lock_wait_timeout = %d, lock_wait_timeout = %d", w, 2*w, 2*w)
	if _, err := conn.ExecContext(ctx, setup); err != nil {
		s.close()
		return nil, fmt.Errorf("election: setting up the session: %w", err)
	}
	if err := conn.QueryRowContext(ctx, "SELECT CONNECTION_ID()").Scan(&s.id); err != nil {
		s.close()
		return nil, fmt.Errorf("election: setting up the session: %w", err)
	}
	if err := s.heartbeat(ctx); err != nil {
		s.close()
		return nil, err
	}
	// Rows of candidates dead for ten of their expiry periods go.
	if _, err := conn.ExecContext(ctx, "DELETE FROM `"+e.tbl.candidate+"` WHERE lock_name = ? AND "+
		"TIMESTAMPDIFF(MICROSECOND, seen_at, UTC_TIMESTAMP(6)) > 10 * expiry_us", lock); err != nil {
		s.close()
		return nil, fmt.Errorf("election: cleaning up candidates: %w", schemaError(e.tbl, err))
	}
	return s, nil
}

// heartbeatPeriod is how often a candidate refreshes its row.
func (c Config) heartbeatPeriod() time.Duration { return max(c.CheckInterval, c.Lease/2) }

// heartbeat writes this candidate's row, keeping its first sighting unless
// the process changed.
func (s *pinned) heartbeat(ctx context.Context) error {
	host, _ := os.Hostname()
	expiry := 2*s.e.cfg.heartbeatPeriod() + s.e.cfg.Margin
	_, err := s.conn.ExecContext(ctx, "INSERT INTO `"+s.e.tbl.candidate+"` "+
		"(lock_name, identity, host, pid, since, seen_at, expiry_us) VALUES (?, ?, ?, ?, UTC_TIMESTAMP(6), UTC_TIMESTAMP(6), ?) "+
		"ON DUPLICATE KEY UPDATE since = IF(pid <=> VALUES(pid) AND host <=> VALUES(host), since, VALUES(since)), "+
		"host = VALUES(host), pid = VALUES(pid), seen_at = VALUES(seen_at), expiry_us = VALUES(expiry_us)",
		s.lock, s.e.cfg.Identity, host, os.Getpid(), expiry.Microseconds())
	if err != nil {
		return fmt.Errorf("election: candidate heartbeat: %w", schemaError(s.e.tbl, err))
	}
	s.seen = time.Now()
	return nil
}

func (s *pinned) heartbeatIfDue(ctx context.Context) error {
	if time.Since(s.seen) < s.e.cfg.heartbeatPeriod() {
		return nil
	}
	return s.heartbeat(ctx)
}

// getLock waits up to CheckInterval for the lock. GET_LOCK returns 1 when
// acquired, 0 on timeout, NULL on error (a killed query).
func (s *pinned) getLock(ctx context.Context) (bool, error) {
	var got sql.NullInt64
	err := s.conn.QueryRowContext(ctx, "SELECT GET_LOCK(?, ?)", s.lock, s.e.cfg.CheckInterval.Seconds()).Scan(&got)
	switch {
	case err != nil:
		if ctx.Err() != nil {
			return false, ctx.Err()
		}
		return false, fmt.Errorf("%w: waiting for the lock: %w", ErrSessionLost, err)
	case !got.Valid:
		return false, fmt.Errorf("%w: GET_LOCK returned NULL (was the session killed?)", ErrSessionLost)
	}
	return got.Int64 == 1, nil
}

// contend runs between two GET_LOCK waits: it keeps this candidate's row
// fresh and kills a holder that is stuck, or that ignored a demotion.
func (s *pinned) contend(ctx context.Context) error {
	if err := s.heartbeatIfDue(ctx); err != nil {
		return err
	}
	rec, err := readRecord(ctx, s.conn, s.e.tbl, s.lock)
	if errors.Is(err, ErrNoLeader) {
		return nil
	}
	if err != nil {
		return err
	}
	why := rec.overdue()
	if why == "" {
		return nil
	}
	err = s.e.kill(ctx, s.conn, rec, why)
	if errors.Is(err, ErrKillDenied) {
		// Never take over without the kill: keep waiting, and say why.
		s.e.log.Error("cannot end a stuck leader's session", "err", err, "holder", rec.Identity, "conn_id", rec.ConnID)
		return nil
	}
	return err
}

// startTerm, in one transaction, honours a pending hand-over, bumps the
// epoch, writes the record and opens the term's history row. It returns how
// long the term must wait before it acts (the lock-delay after a leader that
// was asked to step down did not).
func (s *pinned) startTerm(ctx context.Context) (time.Duration, error) {
	tx, err := s.conn.BeginTx(ctx, nil)
	if err != nil {
		return 0, fmt.Errorf("%w: starting a term: %w", ErrSessionLost, err)
	}
	defer tx.Rollback()
	t := s.e.tbl
	var (
		prevState                 sql.NullString
		forced, yield             sql.NullBool
		leaseLeftUS               sql.NullInt64
		graceful, killedOrDemoted bool
	)
	err = tx.QueryRowContext(ctx, "SELECT state, demote_epoch <=> epoch, "+
		"TIMESTAMPDIFF(MICROSECOND, UTC_TIMESTAMP(6), renewed_at + INTERVAL lease_us MICROSECOND), "+
		"handover_to IS NOT NULL AND handover_to <> ? AND handover_until > UTC_TIMESTAMP(6) AND EXISTS ("+
		"SELECT 1 FROM `"+t.candidate+"` c WHERE c.lock_name = r.lock_name AND c.identity = r.handover_to "+
		"AND TIMESTAMPDIFF(MICROSECOND, c.seen_at, UTC_TIMESTAMP(6)) <= c.expiry_us) "+
		"FROM `"+t.record+"` r WHERE lock_name = ? FOR UPDATE", s.e.cfg.Identity, s.lock).
		Scan(&prevState, &forced, &leaseLeftUS, &yield)
	if err != nil && !errors.Is(err, sql.ErrNoRows) {
		return 0, fmt.Errorf("election: reading the record: %w", schemaError(t, err))
	}
	if yield.Bool {
		return 0, errYield
	}
	switch prevState.String {
	case stateResigned, stateDemoted, stateHandedOver:
		graceful = true
	case stateHangKilled, stateDemoteKilled:
		killedOrDemoted = true
	}
	var delay time.Duration
	if (killedOrDemoted || forced.Bool) && !graceful && leaseLeftUS.Int64 > 0 {
		delay = time.Duration(leaseLeftUS.Int64) * time.Microsecond
	}
	// LAST_INSERT_ID(expr) hands the new epoch back in the OK packet: no
	// second round trip to read it. A first insert reports 0: epoch 1.
	res, err := tx.ExecContext(ctx, "INSERT INTO `"+t.epoch+"` (lock_name, epoch) VALUES (?, 1) "+
		"ON DUPLICATE KEY UPDATE epoch = LAST_INSERT_ID(epoch + 1)", s.lock)
	if err != nil {
		return 0, fmt.Errorf("election: bumping the epoch: %w", schemaError(t, err))
	}
	epoch, err := res.LastInsertId()
	if err != nil {
		return 0, fmt.Errorf("election: bumping the epoch: %w", err)
	}
	s.token = max(uint64(epoch), 1)
	host, _ := os.Hostname()
	if _, err := tx.ExecContext(ctx, "INSERT INTO `"+t.record+"` "+
		"(lock_name, name, state, epoch, holder, host, pid, conn_id, lease_us, since, renewed_at, ended_at, "+
		"demote_epoch, demote_at, handover_to, handover_until) "+
		"VALUES (?, ?, 'leading', ?, ?, ?, ?, ?, ?, UTC_TIMESTAMP(6), UTC_TIMESTAMP(6), NULL, NULL, NULL, NULL, NULL) "+
		"ON DUPLICATE KEY UPDATE name = VALUES(name), state = VALUES(state), epoch = VALUES(epoch), "+
		"holder = VALUES(holder), host = VALUES(host), pid = VALUES(pid), conn_id = VALUES(conn_id), "+
		"lease_us = VALUES(lease_us), since = VALUES(since), renewed_at = VALUES(renewed_at), ended_at = NULL, "+
		"demote_epoch = NULL, demote_at = NULL, handover_to = NULL, handover_until = NULL",
		s.lock, s.e.name, s.token, s.e.cfg.Identity, host, os.Getpid(), s.id, s.leased.Microseconds()); err != nil {
		return 0, fmt.Errorf("election: writing the record: %w", schemaError(t, err))
	}
	// Terms that ended without saying why (a crash, a kill from outside) are
	// closed as lost; their leader may still tell the real reason later.
	if _, err := tx.ExecContext(ctx, "UPDATE `"+t.term+"` SET ended_at = UTC_TIMESTAMP(6), reason = ? "+
		"WHERE lock_name = ? AND ended_at IS NULL", stateLost, s.lock); err != nil {
		return 0, fmt.Errorf("election: closing the last term: %w", schemaError(t, err))
	}
	if _, err := tx.ExecContext(ctx, "INSERT INTO `"+t.term+"` (lock_name, epoch, holder, host, pid, started_at) "+
		"VALUES (?, ?, ?, ?, ?, UTC_TIMESTAMP(6))", s.lock, s.token, s.e.cfg.Identity, host, os.Getpid()); err != nil {
		return 0, fmt.Errorf("election: writing the history: %w", schemaError(t, err))
	}
	if s.token%historyPruneEvery == 0 && s.token > uint64(s.e.cfg.HistoryLimit) {
		if _, err := tx.ExecContext(ctx, "DELETE FROM `"+t.term+"` WHERE lock_name = ? AND epoch <= ?",
			s.lock, s.token-uint64(s.e.cfg.HistoryLimit)); err != nil {
			return 0, fmt.Errorf("election: pruning the history: %w", schemaError(t, err))
		}
	}
	if err := tx.Commit(); err != nil {
		return 0, fmt.Errorf("%w: committing the term: %w", ErrSessionLost, err)
	}
	return delay, nil
}

// historyPruneEvery spaces out the deletes that bound the history.
const historyPruneEvery = 16

// yield gives the lock back without starting a term, and waits one check
// interval so that the hand-over target, not this candidate, wins it next.
func (s *pinned) yield(ctx context.Context) error {
	if _, err := s.conn.ExecContext(ctx, "DO RELEASE_LOCK(?)", s.lock); err != nil {
		return fmt.Errorf("%w: yielding: %w", ErrSessionLost, err)
	}
	s.e.log.Info("yielded the lock to a pending hand-over")
	select {
	case <-time.After(s.e.cfg.CheckInterval):
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// renew stamps the record and confirms that this session still holds the
// lock and has not been asked to step down, all on the pinned session.
func (s *pinned) renew(ctx context.Context) error {
	res, err := s.conn.ExecContext(ctx, "UPDATE `"+s.e.tbl.record+"` SET renewed_at = UTC_TIMESTAMP(6) "+
		"WHERE lock_name = ? AND epoch = ? AND conn_id = ?", s.lock, s.token, s.id)
	if err != nil {
		return fmt.Errorf("%w: keepalive: %w", ErrSessionLost, err)
	}
	if n, err := res.RowsAffected(); err != nil || n != 1 {
		return fmt.Errorf("%w: the record names another term", ErrLockLost)
	}
	var (
		owner   sql.NullInt64
		demoted bool
		handTo  sql.NullString
	)
	if err := s.conn.QueryRowContext(ctx, "SELECT IS_USED_LOCK(lock_name), demote_epoch <=> epoch, handover_to "+
		"FROM `"+s.e.tbl.record+"` WHERE lock_name = ?", s.lock).Scan(&owner, &demoted, &handTo); err != nil {
		return fmt.Errorf("%w: keepalive: %w", ErrSessionLost, err)
	}
	if !owner.Valid || uint64(owner.Int64) != s.id {
		return fmt.Errorf("%w: IS_USED_LOCK is %v, this session is %d", ErrLockLost, owner.Int64, s.id)
	}
	if demoted {
		if handTo.Valid {
			return fmt.Errorf("%w: %w to %q", ErrDemoted, errHandedOver, handTo.String)
		}
		return ErrDemoted
	}
	return s.heartbeatIfDue(ctx)
}

// release records why the term ended, then frees the lock for the next
// candidate; the session is dropped afterwards all the same.
func (s *pinned) release(ctx context.Context, why string) error {
	if err := endTerm(ctx, s.conn, s.e.tbl, s.lock, s.token, why); err != nil {
		return err
	}
	var released sql.NullInt64
	if err := s.conn.QueryRowContext(ctx, "SELECT RELEASE_LOCK(?)", s.lock).Scan(&released); err != nil {
		return err
	}
	if released.Int64 != 1 {
		return errors.New("RELEASE_LOCK: this session did not hold the lock")
	}
	return nil
}

// lost records, through the pool, why a term ended that the session could
// not end: the session may be gone, the pool is not.
func (s *pinned) lost(ctx context.Context, why string) error {
	return endTerm(ctx, s.e.db, s.e.tbl, s.lock, s.token, why)
}

// close drops the session for sure. Conn.Close would return it to the pool
// still holding the lock (GET_LOCK is re-entrant there) and with the short
// wait_timeout; returning driver.ErrBadConn from Raw makes database/sql
// close the underlying connection instead.
func (s *pinned) close() {
	s.conn.Raw(func(any) error { return driver.ErrBadConn })
	s.conn.Close()
}

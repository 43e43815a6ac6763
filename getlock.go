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
}

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
		if err != nil {
			s.close()
			return nil, err
		}
		if got {
			break
		}
	}
	sent := time.Now()
	if err := s.startTerm(waitCtx); err != nil {
		s.close()
		return nil, err
	}
	return newTerm(e, s, s.token, sent, termCtx), nil
}

// pin takes a session from the pool for good and sets it up. Every
// candidate's session, not only the leader's, gets the short wait_timeout:
// a waiter cut off from the server is still granted the lock when its turn
// comes, and only wait_timeout frees it.
func (e *Elector) pin(ctx context.Context, lock string) (*pinned, error) {
	conn, err := e.db.Conn(ctx)
	if err != nil {
		return nil, fmt.Errorf("election: opening a session: %w", err)
	}
	s := &pinned{e: e, conn: conn, lock: lock, leased: e.cfg.Lease + e.cfg.Margin}
	w := e.cfg.waitTimeout()
	if _, err := conn.ExecContext(ctx, fmt.Sprintf("SET SESSION wait_timeout = %d, innodb_lock_wait_timeout = %d", w, w)); err != nil {
		s.close()
		return nil, fmt.Errorf("election: setting up the session: %w", err)
	}
	if err := conn.QueryRowContext(ctx, "SELECT CONNECTION_ID()").Scan(&s.id); err != nil {
		s.close()
		return nil, fmt.Errorf("election: setting up the session: %w", err)
	}
	return s, nil
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

// startTerm bumps the epoch and writes the record in one transaction: the
// term exists only once both are committed.
func (s *pinned) startTerm(ctx context.Context) error {
	tx, err := s.conn.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("%w: starting a term: %w", ErrSessionLost, err)
	}
	defer tx.Rollback()
	t := s.e.tbl
	// LAST_INSERT_ID(expr) hands the new epoch back in the OK packet: no
	// second round trip to read it. A first insert reports 0: epoch 1.
	res, err := tx.ExecContext(ctx, "INSERT INTO `"+t.epoch+"` (lock_name, epoch) VALUES (?, 1) "+
		"ON DUPLICATE KEY UPDATE epoch = LAST_INSERT_ID(epoch + 1)", s.lock)
	if err != nil {
		return fmt.Errorf("election: bumping the epoch: %w", schemaError(t, err))
	}
	epoch, err := res.LastInsertId()
	if err != nil {
		return fmt.Errorf("election: bumping the epoch: %w", err)
	}
	s.token = max(uint64(epoch), 1)
	host, _ := os.Hostname()
	if _, err := tx.ExecContext(ctx, "INSERT INTO `"+t.record+"` "+
		"(lock_name, name, state, epoch, holder, host, pid, conn_id, lease_us, since, renewed_at, ended_at) "+
		"VALUES (?, ?, 'leading', ?, ?, ?, ?, ?, ?, UTC_TIMESTAMP(6), UTC_TIMESTAMP(6), NULL) "+
		"ON DUPLICATE KEY UPDATE name = VALUES(name), state = VALUES(state), epoch = VALUES(epoch), "+
		"holder = VALUES(holder), host = VALUES(host), pid = VALUES(pid), conn_id = VALUES(conn_id), "+
		"lease_us = VALUES(lease_us), since = VALUES(since), renewed_at = VALUES(renewed_at), ended_at = NULL",
		s.lock, s.e.name, s.token, s.e.cfg.Identity, host, os.Getpid(), s.id, s.leased.Microseconds()); err != nil {
		return fmt.Errorf("election: writing the record: %w", schemaError(t, err))
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("%w: committing the term: %w", ErrSessionLost, err)
	}
	return nil
}

// renew stamps the record and confirms that this session still holds the
// lock, both on the pinned session.
func (s *pinned) renew(ctx context.Context) error {
	res, err := s.conn.ExecContext(ctx, "UPDATE `"+s.e.tbl.record+"` SET renewed_at = UTC_TIMESTAMP(6) "+
		"WHERE lock_name = ? AND epoch = ? AND conn_id = ?", s.lock, s.token, s.id)
	if err != nil {
		return fmt.Errorf("%w: keepalive: %w", ErrSessionLost, err)
	}
	if n, err := res.RowsAffected(); err != nil || n != 1 {
		return fmt.Errorf("%w: the record names another term", ErrLockLost)
	}
	var owner sql.NullInt64
	if err := s.conn.QueryRowContext(ctx, "SELECT IS_USED_LOCK(?)", s.lock).Scan(&owner); err != nil {
		return fmt.Errorf("%w: keepalive: %w", ErrSessionLost, err)
	}
	if !owner.Valid || uint64(owner.Int64) != s.id {
		return fmt.Errorf("%w: IS_USED_LOCK is %v, this session is %d", ErrLockLost, owner, s.id)
	}
	return nil
}

// release marks the record resigned and frees the lock; the session is
// dropped afterwards all the same.
func (s *pinned) release(ctx context.Context) error {
	_, err := s.conn.ExecContext(ctx, "UPDATE `"+s.e.tbl.record+"` SET state = 'resigned', ended_at = UTC_TIMESTAMP(6) "+
		"WHERE lock_name = ? AND epoch = ? AND conn_id = ?", s.lock, s.token, s.id)
	if err != nil {
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

// close drops the session for sure. Conn.Close would return it to the pool
// still holding the lock (GET_LOCK is re-entrant there) and with the short
// wait_timeout; returning driver.ErrBadConn from Raw makes database/sql
// close the underlying connection instead.
func (s *pinned) close() {
	s.conn.Raw(func(any) error { return driver.ErrBadConn })
	s.conn.Close()
}

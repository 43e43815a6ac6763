package election

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"
)

// Record is the keepalive row of an election as anyone with SELECT on the
// tables can read it, together with who holds the lock now. Times come from
// the database clock.
type Record struct {
	Name     string // the election's name
	State    string // "leading" or "resigned"
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
}

// Leading reports whether the record describes a live leader: a term in
// state leading whose session holds the lock and whose last renewal is
// younger than its lease plus margin.
func (r Record) Leading() bool {
	return r.State == "leading" && r.LockConnID != 0 && r.LockConnID == r.ConnID && r.RenewedAgo <= r.Expiry
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

func fromMicros(us sql.NullInt64) time.Time {
	if !us.Valid {
		return time.Time{}
	}
	return time.UnixMicro(us.Int64).UTC()
}

func readRecord(ctx context.Context, db *sql.DB, t tables, lock string) (Record, error) {
	var (
		r                     Record
		since, renewed, ended sql.NullInt64
		agoUS, leased         int64
		owner                 sql.NullInt64
	)
	err := db.QueryRowContext(ctx, "SELECT name, state, epoch, holder, host, pid, conn_id, "+
		utcMicros("since")+", "+utcMicros("renewed_at")+", "+utcMicros("ended_at")+", "+
		"TIMESTAMPDIFF(MICROSECOND, renewed_at, UTC_TIMESTAMP(6)), lease_us, IS_USED_LOCK(lock_name) "+
		"FROM `"+t.record+"` WHERE lock_name = ?", lock).
		Scan(&r.Name, &r.State, &r.Token, &r.Identity, &r.Host, &r.PID, &r.ConnID, &since, &renewed, &ended,
			&agoUS, &leased, &owner)
	if errors.Is(err, sql.ErrNoRows) {
		return r, ErrNoLeader
	}
	if err != nil {
		return r, fmt.Errorf("election: reading the record: %w", schemaError(t, err))
	}
	r.Since, r.Renewed, r.Ended = fromMicros(since), fromMicros(renewed), fromMicros(ended)
	r.RenewedAgo = time.Duration(agoUS) * time.Microsecond
	r.Expiry = time.Duration(leased) * time.Microsecond
	r.LockConnID = uint64(owner.Int64)
	return r, nil
}

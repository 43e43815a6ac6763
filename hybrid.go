package election

// The keepalive row beside the lock: the record of who leads, the term
// history and the candidates' heartbeat rows, which both strategies write
// and operators read. The term-opening transaction (openTerm) lives here
// because it is where the record, the epoch and the history change together.

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
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

// historyPruneEvery spaces out the deletes that bound the history.
const historyPruneEvery = 16

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

// querier is what both the pool and a pinned session offer.
type querier interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// store is one election's rows in one database, as candidates, operators
// and fenced transactions reach them.
type store struct {
	db   *sql.DB
	name string // the election's name
	cfg  Config // the prefix and the limits the rows are written with

	tbl tables

	mu    sync.Mutex
	lock  string // the lock name, once learnt
	ready bool   // a candidate has checked the tables and the server
}

func newStore(db *sql.DB, name string, cfg Config) *store {
	return &store{db: db, name: name, cfg: cfg, tbl: tablesFor(cfg.TablePrefix)}
}

// lockName returns the election's lock name, the key of all its rows. It
// needs no privilege beyond connecting: readers create no tables.
func (s *store) lockName(ctx context.Context) (string, error) {
	s.mu.Lock()
	lock := s.lock
	s.mu.Unlock()
	if lock != "" {
		return lock, nil
	}
	var database sql.NullString
	if err := s.db.QueryRowContext(ctx, "SELECT DATABASE()").Scan(&database); err != nil {
		return "", fmt.Errorf("election: reaching the server: %w", err)
	}
	if !database.Valid {
		return "", fmt.Errorf("%w: the DSN names no database; add one, as in user:pass@tcp(host:3306)/dbname", ErrInvalidConfig)
	}
	lock = lockName(database.String, s.cfg.TablePrefix, s.name)
	s.mu.Lock()
	s.lock = lock
	s.mu.Unlock()
	return lock, nil
}

// prepare creates or checks the tables and reads the server's platform,
// once, before a candidate's first campaign; it returns the lock name.
func (s *store) prepare(ctx context.Context, log *slog.Logger) (string, error) {
	lock, err := s.lockName(ctx)
	s.mu.Lock()
	ready := s.ready
	s.mu.Unlock()
	if err != nil || ready {
		return lock, err
	}
	check := checkSchema
	if !s.cfg.SkipCreateTables {
		check = createSchema
	}
	if err := check(ctx, s.db, s.tbl); err != nil {
		return "", err
	}
	p, err := detectPlatform(ctx, s.db)
	if err != nil {
		return "", err
	}
	warnings, err := p.check(s.cfg.Strategy)
	if err != nil {
		return "", err
	}
	for _, w := range warnings {
		log.Warn(w)
	}
	s.mu.Lock()
	s.ready = true
	s.mu.Unlock()
	return lock, nil
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

// kill ends, through q, the session of a holder that Record.overdue found
// stuck or disobedient, and records why. rec must come from a read that
// cross-checked the lock owner with IS_USED_LOCK (its callers,
// pinned.contend and Operator.demote, read it so); no other session id is
// ever killed. counted, if not nil, learns the outcome first: nil for a
// kill, or the refusal. A refused kill returns ErrKillDenied with the grant
// to give.
func (s *store) kill(ctx context.Context, q querier, lock string, rec Record, why string, log *slog.Logger, counted func(error)) error {
	if _, err := q.ExecContext(ctx, text("KILL CONNECTION ?", rec.ConnID)); err != nil {
		var me *mysql.MySQLError
		switch {
		case errors.As(err, &me) && me.Number == 1094:
			// Unknown thread: the session ended on its own between the read
			// and the kill. Nothing was killed; its end is its own to record.
			return nil
		case errors.As(err, &me) && (me.Number == 1095 || me.Number == 1227):
			err = fmt.Errorf("%w: KILL CONNECTION %d (%s, token %d, %s): %w; grant the electors' user CONNECTION ADMIN "+
				"(MySQL 8, MariaDB 10.5+) or SUPER, or run every candidate as the same user",
				ErrKillDenied, rec.ConnID, rec.Identity, rec.Token, why, err)
			if counted != nil {
				counted(err)
			}
			s.cfg.Observer.killed(s.name, why, err)
			return err
		default:
			return fmt.Errorf("election: KILL CONNECTION %d: %w", rec.ConnID, err)
		}
	}
	if counted != nil {
		counted(nil)
	}
	s.cfg.Observer.killed(s.name, why, nil)
	log.Warn("killed the session of a leader", "reason", why, "holder", rec.Identity, "token", rec.Token, "conn_id", rec.ConnID)
	return s.endTerm(ctx, q, lock, rec.Token, why)
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

// record reads the election's record through q; ErrNoLeader if it has none.
func (s *store) record(ctx context.Context, q querier, lock string) (Record, error) {
	rs, err := readRecords(ctx, q, s.tbl, "WHERE lock_name = ?", lock)
	if err != nil {
		return Record{}, err
	}
	if len(rs) == 0 {
		return Record{}, ErrNoLeader
	}
	return rs[0], nil
}

func readRecords(ctx context.Context, q querier, t tables, where string, args ...any) ([]Record, error) {
	rows, err := q.QueryContext(ctx, text("SELECT name, strategy, state, epoch, holder, host, pid, conn_id, "+
		utcMicros("since")+", "+utcMicros("renewed_at")+", "+utcMicros("ended_at")+", "+
		ageMicros("renewed_at")+", lease_us, IS_USED_LOCK(lock_name), "+
		"IF(demote_epoch <=> epoch, "+ageMicros("demote_at")+", NULL), handover_to "+
		"FROM `"+t.record+"` "+where+" ORDER BY name", args...))
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

// renew is the leader's keepalive: one statement that stamps the record
// of term token, if it still names holder (a session or a lease id) with no
// demotion pending and the strategy's own condition holds (cond, on the
// record as r), and refreshes the leader's candidate row with it. It
// reports whether the record matched. The candidate row is for listing and
// hand-over checks only: should the statement fail on it (a grant revoked
// on that table), the record alone is stamped, and the term goes on.
func (s *store) renew(ctx context.Context, q querier, lock string, token, holder uint64, cond string) (bool, error) {
	where := text(" WHERE r.lock_name = ? AND r.epoch = ? AND r.conn_id = ? AND NOT (r.demote_epoch <=> r.epoch) AND ", lock, token, holder) + cond
	res, err := q.ExecContext(ctx, text("UPDATE `"+s.tbl.record+"` r LEFT JOIN `"+s.tbl.candidate+"` c "+
		"ON c.lock_name = r.lock_name AND c.identity = ? SET r.renewed_at = UTC_TIMESTAMP(6), c.seen_at = UTC_TIMESTAMP(6)", s.cfg.Identity)+where)
	if me := new(mysql.MySQLError); errors.As(err, &me) && (me.Number == 1142 || me.Number == 1146) { // denied, no table
		res, err = q.ExecContext(ctx, "UPDATE `"+s.tbl.record+"` r SET r.renewed_at = UTC_TIMESTAMP(6)"+where)
	}
	if err != nil {
		return false, err
	}
	n, err := res.RowsAffected()
	return err == nil && n >= 1, nil
}

// epoch reads the newest token the election has issued; 0 if none.
func (s *store) epoch(ctx context.Context, lock string) (uint64, error) {
	var epoch uint64
	err := s.db.QueryRowContext(ctx, text("SELECT epoch FROM `"+s.tbl.epoch+"` WHERE lock_name = ?", lock)).Scan(&epoch)
	if err != nil && !errors.Is(err, sql.ErrNoRows) {
		return 0, fmt.Errorf("election: reading the epoch: %w", schemaError(s.tbl, err))
	}
	return epoch, nil
}

// endTerm records why a term ended, in the record (if it still describes
// that term as leading) and in the history. A "lost" guess made by the next
// term gives way to the real reason.
func (s *store) endTerm(ctx context.Context, q querier, lock string, token uint64, why string) error {
	if _, err := q.ExecContext(ctx, text("UPDATE `"+s.tbl.record+"` SET state = ?, ended_at = UTC_TIMESTAMP(6) "+
		"WHERE lock_name = ? AND epoch = ? AND state = ?", why, lock, token, stateLeading)); err != nil {
		return err
	}
	_, err := q.ExecContext(ctx, text("UPDATE `"+s.tbl.term+"` SET ended_at = COALESCE(ended_at, UTC_TIMESTAMP(6)), reason = ? "+
		"WHERE lock_name = ? AND epoch = ? AND (reason IS NULL OR reason = ? OR ? IN (?, ?))",
		why, lock, token, stateLost, why, stateHangKilled, stateDemoteKilled))
	return err
}

// predecessor is the last term as a new one finds it.
type predecessor struct {
	exists                          bool
	epoch                           uint64
	holder, host                    string
	pid                             int
	sinceUS                         int64
	strategy, state                 sql.NullString
	session, owner, leaseLeftUS     sql.NullInt64
	stale, forced, overdue, handing sql.NullBool
}

// errRaced: the record changed between the read and the claim of a term
// start; the start is tried again.
var errRaced = errors.New("election: the record changed while the term started")

// openTerm starts a term through q, for the candidate whose session
// (GetLock: its connection id; LeaseRow: a random id) is given, in three
// statements: a read of the record, which decides (succeed) whether the
// term may start and after what lock-delay; the claim of the record, a
// compare-and-set on that read; and the epoch bump, whose new value is the
// token. The history is written afterwards (writeHistory), off the path to
// the caller. A claim that loses a race is tried again once.
func (s *store) openTerm(ctx context.Context, q querier, lock string, session uint64) (token uint64, delay time.Duration, p predecessor, err error) {
	for try := 0; ; try++ {
		if p, err = s.predecessor(ctx, q, lock); err != nil {
			return 0, 0, p, err
		}
		if delay, err = s.succeed(p); err != nil {
			return 0, 0, p, err
		}
		err = s.claim(ctx, q, lock, session, p)
		if errors.Is(err, errRaced) && try == 0 {
			continue
		}
		if errors.Is(err, errRaced) {
			err = ErrHeld
		}
		if err != nil {
			return 0, 0, p, err
		}
		if token, err = s.bumpEpoch(ctx, q, lock, session, p.epoch+1); err != nil {
			s.unclaim(ctx, q, lock, session, p.epoch+1)
			if errors.Is(err, errRaced) {
				err = ErrHeld
			}
			return 0, 0, p, err
		}
		return token, delay, p, nil
	}
}

// unclaim gives up a claim whose term did not start (its bump failed), so
// that the next candidate need not wait for it to go stale; nothing was
// handed out under it. Best effort: the session may be gone.
func (s *store) unclaim(ctx context.Context, q querier, lock string, session, claimed uint64) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.cfg.Interval)
	defer cancel()
	q.ExecContext(ctx, text("UPDATE `"+s.tbl.record+"` SET state = ?, ended_at = UTC_TIMESTAMP(6) "+
		"WHERE lock_name = ? AND epoch = ? AND conn_id = ? AND state = ?", stateLost, lock, claimed, session, stateLeading))
}

// predecessor reads the last term from the record.
func (s *store) predecessor(ctx context.Context, q querier, lock string) (predecessor, error) {
	var p predecessor
	err := q.QueryRowContext(ctx, text("SELECT epoch, holder, host, pid, "+utcMicros("since")+", strategy, state, conn_id, IS_USED_LOCK(lock_name), "+
		ageMicros("renewed_at")+" > lease_us, demote_epoch <=> epoch, "+
		"demote_epoch <=> epoch AND "+ageMicros("demote_at")+" > lease_us, "+
		"TIMESTAMPDIFF(MICROSECOND, UTC_TIMESTAMP(6), renewed_at + INTERVAL lease_us MICROSECOND), "+
		s.handingOver("r")+" FROM `"+s.tbl.record+"` r WHERE lock_name = ?", lock)).
		Scan(&p.epoch, &p.holder, &p.host, &p.pid, &p.sinceUS, &p.strategy, &p.state, &p.session, &p.owner,
			&p.stale, &p.forced, &p.overdue, &p.leaseLeftUS, &p.handing)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return p, nil
	case err != nil:
		return p, fmt.Errorf("election: reading the record: %w", schemaError(s.tbl, err))
	}
	p.exists = true
	return p, nil
}

// handingOver is true, on the record as r, while a hand-over to another
// live candidate than this one is pending.
func (s *store) handingOver(r string) string {
	return text(r+".handover_to IS NOT NULL AND "+r+".handover_to <> ? AND "+r+".handover_until > UTC_TIMESTAMP(6) AND EXISTS ("+
		"SELECT 1 FROM `"+s.tbl.candidate+"` c WHERE c.lock_name = "+r+".lock_name AND c.identity = "+r+".handover_to "+
		"AND "+ageMicros("c.seen_at")+" <= c.expiry_us)", s.cfg.Identity)
}

// succeed decides whether a new term may follow p, and after what
// lock-delay:
//   - it refuses (ErrStrategy) while a term of the other strategy still acts;
//   - under LeaseRow, it returns ErrHeld unless the last term has ended, gone
//     stale (no renewal for its lease plus margin, database clock), or
//     ignored a demotion for as long;
//   - it returns errYield while a hand-over to another live candidate is
//     pending;
//   - when the last term was asked to step down (or was killed as stuck)
//     and did not end gracefully, the new term must not act before that
//     leader's lease has certainly expired: the lock-delay.
func (s *store) succeed(p predecessor) (time.Duration, error) {
	// Does the last term still act, by its own strategy's rules?
	acting := p.state.String == stateLeading && !p.stale.Bool &&
		(p.strategy.String == LeaseRow.String() || p.owner.Valid && p.owner.Int64 == p.session.Int64)
	switch {
	case acting && p.strategy.String != s.cfg.Strategy.String():
		return 0, fmt.Errorf("%w: election %q is led under strategy %s; every candidate must use the same (Config.Strategy)", ErrStrategy, s.name, p.strategy.String)
	case acting && s.cfg.Strategy == LeaseRow && !p.overdue.Bool:
		return 0, ErrHeld
	case p.handing.Bool:
		return 0, errYield
	}
	var graceful, killed bool
	switch p.state.String {
	case stateResigned, stateDemoted, stateHandedOver:
		graceful = true
	case stateHangKilled, stateDemoteKilled:
		killed = true
	}
	if (killed || p.forced.Bool) && !graceful && p.leaseLeftUS.Int64 > 0 {
		return time.Duration(p.leaseLeftUS.Int64) * time.Microsecond, nil
	}
	return 0, nil
}

// claim writes the new term's record (epoch p.epoch+1, requests cleared),
// only if the record is still as read: same epoch, the last term does not
// act (a lease renewed since the read, a GetLock holder alive) and no
// hand-over became pending. Otherwise it returns errRaced.
func (s *store) claim(ctx context.Context, q querier, lock string, session uint64, p predecessor) error {
	host, _ := os.Hostname()
	values := []any{s.name, s.cfg.Strategy.String(), p.epoch + 1, s.cfg.Identity, host, os.Getpid(), session, (s.cfg.Lease + s.cfg.Margin).Microseconds()}
	var err error
	var res sql.Result
	if !p.exists {
		res, err = q.ExecContext(ctx, text("INSERT INTO `"+s.tbl.record+"` "+
			"(lock_name, name, strategy, state, epoch, holder, host, pid, conn_id, lease_us, since, renewed_at) "+
			"VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, UTC_TIMESTAMP(6), UTC_TIMESTAMP(6))", append([]any{lock, values[0], values[1], stateLeading}, values[2:]...)...))
		if me := new(mysql.MySQLError); errors.As(err, &me) && me.Number == 1062 { // duplicate key
			return errRaced
		}
	} else {
		res, err = q.ExecContext(ctx, text("UPDATE `"+s.tbl.record+"` r SET name = ?, strategy = ?, epoch = ?, state = "+literal(stateLeading)+", "+
			"holder = ?, host = ?, pid = ?, conn_id = ?, lease_us = ?, since = UTC_TIMESTAMP(6), renewed_at = UTC_TIMESTAMP(6), "+
			"ended_at = NULL, demote_epoch = NULL, demote_at = NULL, handover_to = NULL, handover_until = NULL "+
			"WHERE lock_name = ? AND epoch = ? AND NOT (state = ? AND "+ageMicros("renewed_at")+" <= lease_us AND ("+
			"strategy = ? AND NOT (demote_epoch <=> epoch AND "+ageMicros("demote_at")+" > lease_us) OR "+
			"strategy = ? AND IS_USED_LOCK(lock_name) <=> conn_id AND conn_id <> ?)) AND NOT (",
			append(values, lock, p.epoch, stateLeading, LeaseRow.String(), GetLock.String(), session)...)+s.handingOver("r")+")")
	}
	if err != nil {
		return fmt.Errorf("election: writing the record: %w", schemaError(s.tbl, err))
	}
	if n, err := res.RowsAffected(); err != nil || n != 1 {
		return errRaced
	}
	return nil
}

// bumpEpoch raises the election's epoch to at least claimed (the epoch the
// record was claimed with) and by one, and returns it: the new term's
// token. It bumps only while the record still holds this claim, in the same
// statement: a claimant that was superseded while paused between claim and
// bump must not push the epoch past the live term's token. LAST_INSERT_ID
// hands the new epoch back in the OK packet, with no second round trip; a
// first insert reports 0: claimed. Should the epoch have been ahead of the
// record, the record follows it.
func (s *store) bumpEpoch(ctx context.Context, q querier, lock string, session, claimed uint64) (uint64, error) {
	res, err := q.ExecContext(ctx, text("INSERT INTO `"+s.tbl.epoch+"` (lock_name, epoch) "+
		"SELECT r.lock_name, r.epoch FROM `"+s.tbl.record+"` r WHERE r.lock_name = ? AND r.epoch = ? AND r.conn_id = ? "+
		"ON DUPLICATE KEY UPDATE epoch = LAST_INSERT_ID(GREATEST(`"+s.tbl.epoch+"`.epoch + 1, VALUES(epoch)))", lock, claimed, session))
	if err != nil {
		return 0, fmt.Errorf("election: bumping the epoch: %w", schemaError(s.tbl, err))
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
	if token != claimed {
		res, err := q.ExecContext(ctx, text("UPDATE `"+s.tbl.record+"` SET epoch = ? WHERE lock_name = ? AND epoch = ? AND conn_id = ?", token, lock, claimed, session))
		if err != nil {
			return 0, fmt.Errorf("election: writing the record: %w", schemaError(s.tbl, err))
		}
		if n, err := res.RowsAffected(); err != nil || n != 1 {
			return 0, errRaced
		}
	}
	return token, nil
}

// writeHistory records the term token in the history, after it has begun:
// the row of its predecessor p if that one died before writing it, the end
// of every earlier term that did not record its own (as lost; their
// leaders may still tell the real reason later), and its own row, unless a
// later term has written it already from its own read of the record. It
// reads no record row, so it takes no lock a keepalive could wait for.
// Every statement is idempotent, so a late writer changes nothing that is
// already there.
func (s *store) writeHistory(ctx context.Context, q querier, lock string, token uint64, p predecessor) error {
	if p.exists {
		// Ended as the record said, if it had recorded its end there.
		var reason any
		if p.state.String != stateLeading {
			reason = p.state.String
		}
		if _, err := q.ExecContext(ctx, text("INSERT IGNORE INTO `"+s.tbl.term+"` (lock_name, epoch, holder, host, pid, started_at, ended_at, reason) "+
			"VALUES (?, ?, ?, ?, ?, TIMESTAMPADD(MICROSECOND, ?, '1970-01-01 00:00:00'), IF(? IS NULL, NULL, UTC_TIMESTAMP(6)), ?)",
			lock, p.epoch, p.holder, p.host, p.pid, p.sinceUS, reason, reason)); err != nil {
			return fmt.Errorf("election: writing the history: %w", schemaError(s.tbl, err))
		}
	}
	if _, err := q.ExecContext(ctx, text("UPDATE `"+s.tbl.term+"` SET ended_at = UTC_TIMESTAMP(6), reason = ? "+
		"WHERE lock_name = ? AND epoch < ? AND ended_at IS NULL", stateLost, lock, token)); err != nil {
		return fmt.Errorf("election: closing the last term: %w", schemaError(s.tbl, err))
	}
	host, _ := os.Hostname()
	if _, err := q.ExecContext(ctx, text("INSERT IGNORE INTO `"+s.tbl.term+"` (lock_name, epoch, holder, host, pid, started_at) "+
		"VALUES (?, ?, ?, ?, ?, UTC_TIMESTAMP(6))", lock, token, s.cfg.Identity, host, os.Getpid())); err != nil {
		return fmt.Errorf("election: writing the history: %w", schemaError(s.tbl, err))
	}
	if limit := uint64(s.cfg.HistoryLimit); token%historyPruneEvery == 0 && token > limit {
		if _, err := q.ExecContext(ctx, text("DELETE FROM `"+s.tbl.term+"` WHERE lock_name = ? AND epoch <= ?", lock, token-limit)); err != nil {
			return fmt.Errorf("election: pruning the history: %w", schemaError(s.tbl, err))
		}
	}
	return nil
}

// TermRecord is one term of an election's history.
type TermRecord struct {
	Token    uint64
	Identity string
	Host     string
	PID      int
	Started  time.Time // database clock
	Ended    time.Time // zero while the term lasts (or its end is not known yet)
	// Reason says why the term ended: resigned, demoted, handed-over,
	// hang-killed, demote-killed, lease-expired, session-lost, lock-lost, or
	// lost when the leader vanished without saying why (a crash, a kill from
	// outside the election).
	Reason string
}

// terms reads history rows of the election that match cond.
func (s *store) terms(ctx context.Context, lock, cond string, args ...any) ([]TermRecord, error) {
	rows, err := s.db.QueryContext(ctx, text("SELECT epoch, holder, host, pid, "+utcMicros("started_at")+", "+utcMicros("ended_at")+
		", reason FROM `"+s.tbl.term+"` WHERE lock_name = ? AND "+cond, append([]any{lock}, args...)...))
	if err != nil {
		return nil, fmt.Errorf("election: reading the history: %w", schemaError(s.tbl, err))
	}
	defer rows.Close()
	var ts []TermRecord
	for rows.Next() {
		var (
			t              TermRecord
			started, ended sql.NullInt64
			reason         sql.NullString
		)
		if err := rows.Scan(&t.Token, &t.Identity, &t.Host, &t.PID, &started, &ended, &reason); err != nil {
			return nil, fmt.Errorf("election: reading the history: %w", err)
		}
		t.Started, t.Ended, t.Reason = fromMicros(started), fromMicros(ended), reason.String
		ts = append(ts, t)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("election: reading the history: %w", err)
	}
	return ts, nil
}

// Candidate is one participant of an election, from its heartbeat row.
type Candidate struct {
	Identity string
	Host     string
	PID      int
	Since    time.Time     // first heartbeat of this process, database clock
	SeenAgo  time.Duration // age of its last heartbeat
	Alive    bool          // its last heartbeat is within its own expiry
	Leader   bool          // it leads now
}

// candidates reads the election's heartbeat rows; leader marks the one
// that leads.
func (s *store) candidates(ctx context.Context, lock string, leader Record) ([]Candidate, error) {
	rows, err := s.db.QueryContext(ctx, text("SELECT identity, host, pid, "+utcMicros("since")+", "+ageMicros("seen_at")+
		", "+ageMicros("seen_at")+" <= expiry_us FROM `"+s.tbl.candidate+"` WHERE lock_name = ? ORDER BY identity", lock))
	if err != nil {
		return nil, fmt.Errorf("election: reading the candidates: %w", schemaError(s.tbl, err))
	}
	defer rows.Close()
	var cs []Candidate
	for rows.Next() {
		var (
			c          Candidate
			since, ago sql.NullInt64
		)
		if err := rows.Scan(&c.Identity, &c.Host, &c.PID, &since, &ago, &c.Alive); err != nil {
			return nil, fmt.Errorf("election: reading the candidates: %w", err)
		}
		c.Since, c.SeenAgo = fromMicros(since), micros(ago)
		c.Leader = leader.Leading() && leader.Identity == c.Identity
		cs = append(cs, c)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("election: reading the candidates: %w", err)
	}
	return cs, nil
}

// isCandidate reports whether identity has sent a heartbeat within its
// expiry.
func (s *store) isCandidate(ctx context.Context, lock, identity string) (bool, error) {
	var alive bool
	err := s.db.QueryRowContext(ctx, text("SELECT EXISTS (SELECT 1 FROM `"+s.tbl.candidate+"` WHERE lock_name = ? AND identity = ? AND "+
		ageMicros("seen_at")+" <= expiry_us)", lock, identity)).Scan(&alive)
	if err != nil {
		return false, fmt.Errorf("election: reading the candidates: %w", schemaError(s.tbl, err))
	}
	return alive, nil
}

// presence is this candidate's heartbeat row, which lists it among the
// candidates and makes it a valid hand-over target.
type presence struct {
	st   *store
	lock string
	seen time.Time // when the row was last written
}

// join writes this candidate's first heartbeat, refuses to join an election
// that live candidates of another strategy run, and deletes the rows of
// candidates dead for ten of their expiry periods.
func (p *presence) join(ctx context.Context, q querier) error {
	st := p.st
	var other sql.NullString
	err := q.QueryRowContext(ctx, text("SELECT MIN(identity) FROM `"+st.tbl.candidate+"` WHERE lock_name = ? AND strategy <> ? AND "+
		ageMicros("seen_at")+" <= expiry_us", p.lock, st.cfg.Strategy.String())).Scan(&other)
	if err != nil {
		return fmt.Errorf("election: reading the candidates: %w", schemaError(st.tbl, err))
	}
	if other.Valid {
		return fmt.Errorf("%w: candidate %q of election %q uses another strategy than %v; every candidate must use the same (Config.Strategy)", ErrStrategy, other.String, st.name, st.cfg.Strategy)
	}
	if err := p.beat(ctx, q); err != nil {
		return err
	}
	if _, err := q.ExecContext(ctx, text("DELETE FROM `"+st.tbl.candidate+"` WHERE lock_name = ? AND "+
		ageMicros("seen_at")+" > 10 * expiry_us", p.lock)); err != nil {
		return fmt.Errorf("election: cleaning up candidates: %w", schemaError(st.tbl, err))
	}
	return nil
}

// beat writes this candidate's row, keeping its first sighting unless the
// process changed.
func (p *presence) beat(ctx context.Context, q querier) error {
	st := p.st
	host, _ := os.Hostname()
	expiry := 2*st.cfg.heartbeatPeriod() + st.cfg.Margin
	_, err := q.ExecContext(ctx, text("INSERT INTO `"+st.tbl.candidate+"` "+
		"(lock_name, identity, strategy, host, pid, since, seen_at, expiry_us) VALUES (?, ?, ?, ?, ?, UTC_TIMESTAMP(6), UTC_TIMESTAMP(6), ?) "+
		"ON DUPLICATE KEY UPDATE since = IF(pid <=> VALUES(pid) AND host <=> VALUES(host), since, VALUES(since)), "+
		"strategy = VALUES(strategy), host = VALUES(host), pid = VALUES(pid), seen_at = VALUES(seen_at), expiry_us = VALUES(expiry_us)",
		p.lock, st.cfg.Identity, st.cfg.Strategy.String(), host, os.Getpid(), expiry.Microseconds()))
	if err != nil {
		return fmt.Errorf("election: candidate heartbeat: %w", schemaError(st.tbl, err))
	}
	p.seen = time.Now()
	return nil
}

// beatIfDue refreshes this candidate's row once per heartbeat period.
func (p *presence) beatIfDue(ctx context.Context, q querier) error {
	if time.Since(p.seen) < p.st.cfg.heartbeatPeriod() {
		return nil
	}
	return p.beat(ctx, q)
}

// leave deletes this candidate's heartbeat row, so that it is not offered
// as a hand-over target once it has stopped campaigning.
func (s *store) leave(ctx context.Context) error {
	lock, err := s.lockName(ctx)
	if err == nil {
		_, err = s.db.ExecContext(ctx, text("DELETE FROM `"+s.tbl.candidate+"` WHERE lock_name = ? AND identity = ?", lock, s.cfg.Identity))
	}
	return err
}

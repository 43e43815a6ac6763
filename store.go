package election

// The store: every statement the library sends about one election's rows
// (its record, epoch, candidates and history) and its locks, as named
// operations. The term start's statements are in claim.go, those that
// serve many elections at once in batch.go, the DDL in schema.go, and
// what differs per server in platform.go; nothing else builds SQL.

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/go-sql-driver/mysql"
)

// historyPruneEvery spaces out the deletes that bound the history: a
// candidate prunes at its first term and every 16th after.
const historyPruneEvery = 16

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

	tbl   tables
	first *firstUse // what candidates on db with these tables learn once
	shard bool      // a shard's (Shards): it never takes one of the pool's own sessions

	mu       sync.Mutex
	lock     string       // the lock name, once learnt
	ready    bool         // a candidate has checked the tables and the server
	platform platform     // the server, once ready
	strategy Strategy     // the candidate's, once ready: Config.Strategy, or the one the server supports
	owed     []owedEnd    // ends of terms not recorded yet (see payOwed)
	starts   int          // terms started through this store, for pruneDue
	value    string       // what its terms proclaim: Config.Value, or the last Term.Proclaim
	healthy  sql.NullBool // Run's health (Config.Health), for the candidate row; NULL without a check
	seen     sightings    // the record's stamps as this candidate (or Operator) has seen them (vouch)

	proclaiming sync.Mutex // one Term.Proclaim at a time, so that value and the record agree
}

func newStore(db *sql.DB, name string, cfg Config) *store {
	tbl := tablesFor(cfg.TablePrefix)
	return &store{db: db, name: name, cfg: cfg, tbl: tbl, first: firstUseOf(db, tbl), value: cfg.Value}
}

// proclaimed returns the value this candidate's terms proclaim.
func (s *store) proclaimed() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.value
}

// pruneDue counts a term started and says whether its history write
// should prune the history.
func (s *store) pruneDue() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.starts++
	return s.starts%historyPruneEvery == 1
}

// kill ends, through q, the session of a holder that Record.overdue found
// stuck or disobedient, and records why. rec must come from a read that
// cross-checked the lock owner with IS_USED_LOCK (its callers,
// pinned.contend and Operator.demote, read it so); no other session id is
// ever killed. The Observer learns the outcome (Killed), which the
// Elector's Stats count. A refused kill returns ErrKillDenied with the
// grant to give.
func (s *store) kill(ctx context.Context, q querier, lock string, rec Record, why string, log *slog.Logger) error {
	if _, err := q.ExecContext(ctx, text("KILL CONNECTION ?", rec.ConnID)); err != nil {
		var me *mysql.MySQLError
		switch {
		case errors.As(err, &me) && me.Number == 1094:
			// Unknown thread: the session ended on its own between the read
			// and the kill. Nothing was killed; its end is its own to record.
			return nil
		case errors.As(err, &me) && (me.Number == 1095 || me.Number == 1227):
			err = fmt.Errorf("%w: KILL CONNECTION %d (%s, token %d, %s): %w; grant the electors' user CONNECTION_ADMIN "+
				"(MySQL 8), CONNECTION ADMIN (MariaDB 10.5+) or SUPER, or run every candidate as the same user "+
				"(the only fix on Amazon RDS and Aurora, which end other users' sessions through CALL mysql.rds_kill alone)",
				ErrKillDenied, rec.ConnID, rec.Identity, rec.Token, why, err)
			s.cfg.Observer.killed(s.name, why, err)
			return err
		default:
			return fmt.Errorf("election: KILL CONNECTION %d: %w", rec.ConnID, err)
		}
	}
	s.cfg.Observer.killed(s.name, why, nil)
	log.Warn("killed the session of a leader", "reason", why, "holder", rec.Identity, "token", rec.Token, "conn_id", rec.ConnID)
	return s.endTerm(ctx, q, lock, rec.Token, ending{why: why, at: time.Now()})
}

// scanned, scannedTime and scannedAge scan a column that may be NULL
// into dst, as its zero value then: a column as it is, microseconds since
// the Unix epoch (utcMicros) as a time, and microseconds as a duration,
// never negative.
func scanned[T any](dst *T) sql.Scanner {
	return scanFunc(func(v any) error {
		var n sql.Null[T]
		err := n.Scan(v)
		*dst = n.V
		return err
	})
}

func scannedTime(dst *time.Time) sql.Scanner {
	return scanFunc(func(v any) error {
		var us sql.NullInt64
		err := us.Scan(v)
		*dst = fromMicros(us)
		return err
	})
}

// scannedRenewal is scannedAge for the renewal, which keeps the sign of a
// stamp well ahead of the clock (see Record.RenewedAgo). An age is taken
// at the statement's start, the row read after it: a renewal committed in
// between is a few µs in the future, which is 0.
func scannedRenewal(dst *time.Duration) sql.Scanner {
	return scanFunc(func(v any) error {
		var us sql.NullInt64
		err := us.Scan(v)
		if *dst = micros(us); *dst > -time.Millisecond {
			*dst = max(*dst, 0)
		}
		return err
	})
}

func scannedAge(dst *time.Duration) sql.Scanner {
	return scanFunc(func(v any) error {
		var us sql.NullInt64
		err := us.Scan(v)
		*dst = max(micros(us), 0)
		return err
	})
}

type scanFunc func(v any) error

func (f scanFunc) Scan(v any) error { return f(v) }

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

// watched reads the record, as record does, for a reader that decides by
// it: with the ages this store's watch vouches for (vouch).
func (s *store) watched(ctx context.Context, q querier, lock string) (Record, error) {
	sent := time.Now()
	r, err := s.record(ctx, q, lock)
	if err == nil {
		s.vouch(&r, reading{r.nowUS, sent, time.Now()})
	}
	return r, err
}

// leader reads who leads the election: its record, and ErrNoLeader beside
// it when no term may act.
func (s *store) leader(ctx context.Context) (Record, error) {
	lock, err := s.resolveLock(ctx)
	if err != nil {
		return Record{}, err
	}
	r, err := s.record(ctx, s.db, lock)
	if err == nil && !r.Leading() {
		err = ErrNoLeader
	}
	return r, err
}

func readRecords(ctx context.Context, q querier, t tables, where string, args ...any) ([]Record, error) {
	return collect(ctx, q, t, "record", text("SELECT "+recordColumns("r.lock_name")+" FROM `"+t.record+"` r "+where+" ORDER BY r.name", args...),
		func(rows *sql.Rows) (Record, error) {
			var r Record
			err := rows.Scan(r.fields()...)
			return r, err
		})
}

// recordColumns selects, from the record as r, what Record holds, with
// owner naming the election's lock for IS_USED_LOCK. A missing row (a LEFT
// JOIN's) reads as NULLs, which Record.fields takes as zeros. The value is
// the term's only if its claim wrote it: the claim of a version before
// values leaves the last one.
func recordColumns(owner string) string {
	return "r.name, r.strategy, r.state, r.epoch, r.holder, r.host, r.pid, r.conn_id, " +
		utcMicros("r.since") + ", " + utcMicros("r.renewed_at") + ", " + utcMicros("r.ended_at") + ", " +
		ageMicros("r.renewed_at") + ", r.lease_us, IS_USED_LOCK(" + owner + "), " +
		"r.demote_epoch = r.epoch, IF(r.demote_epoch = r.epoch, " + ageMicros("r.demote_at") + ", NULL), " + utcMicros("r.demote_at") + ", r.handover_to, " +
		"IF(r.value_epoch <=> r.epoch, r.value, NULL), " + utcMicros("UTC_TIMESTAMP(6)")
}

// fields returns the scan targets for recordColumns' columns, which fill
// r once the row has been scanned.
func (r *Record) fields() []any {
	return []any{scanned(&r.Name), scanned(&r.Strategy), scanned(&r.State), scanned(&r.Token), scanned(&r.Identity), scanned(&r.Host),
		scanned(&r.PID), scanned(&r.ConnID),
		scannedTime(&r.Since), scannedTime(&r.Renewed), scannedTime(&r.Ended),
		scannedRenewal(&r.RenewedAgo), scannedAge(&r.Expiry), scanned(&r.LockConnID),
		scanned(&r.demoted), scannedAge(&r.DemotedAgo), &r.demoteAt, scanned(&r.HandoverTo), scanned(&r.Value), &r.nowUS}
}

// collect runs query through q and scans each of its rows with scan; what
// names the rows in errors.
func collect[T any](ctx context.Context, q querier, t tables, what, query string, scan func(*sql.Rows) (T, error)) ([]T, error) {
	rows, err := q.QueryContext(ctx, query)
	if err != nil {
		return nil, during("reading the "+what, schemaError(t, err))
	}
	defer rows.Close()
	var out []T
	for rows.Next() {
		v, err := scan(rows)
		if err != nil {
			return nil, fmt.Errorf("election: reading the %s: %w", what, err)
		}
		out = append(out, v)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("election: reading the %s: %w", what, err)
	}
	return out, nil
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
	if denied(err) || serverError(err, 1146) { // denied, no table
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
		return 0, during("reading the epoch", schemaError(s.tbl, err))
	}
	return epoch, nil
}

// terms reads history rows of the election that match cond.
func (s *store) terms(ctx context.Context, lock, cond string, args ...any) ([]TermRecord, error) {
	return collect(ctx, s.db, s.tbl, "history", text("SELECT epoch, holder, host, pid, COALESCE(server, ''), "+utcMicros("started_at")+", "+utcMicros("ended_at")+
		", reason, lasted_us FROM `"+s.tbl.term+"` WHERE lock_name = ? AND "+cond, append([]any{lock}, args...)...), func(rows *sql.Rows) (TermRecord, error) {
		var (
			t                      TermRecord
			started, ended, lasted sql.NullInt64
			reason                 sql.NullString
		)
		err := rows.Scan(&t.Token, &t.Identity, &t.Host, &t.PID, &t.Server, &started, &ended, &reason, &lasted)
		t.Started, t.Ended, t.Reason, t.Lasted = fromMicros(started), fromMicros(ended), reason.String, micros(lasted)
		return t, err
	})
}

// candidates reads the election's candidate rows; leader marks the one
// that leads.
func (s *store) candidates(ctx context.Context, lock string, leader Record) ([]Candidate, error) {
	return collect(ctx, s.db, s.tbl, "candidates", text("SELECT identity, host, pid, "+utcMicros("since")+", "+
		"IF(c.strategy = "+literal(GetLock.String())+" AND "+alive("c")+", 0, "+ageMicros("c.seen_at")+"), "+alive("c")+
		", c.value, c.priority, c.version, c.healthy FROM `"+s.tbl.candidate+"` c WHERE lock_name = ? ORDER BY identity", lock), func(rows *sql.Rows) (Candidate, error) {
		var (
			c          Candidate
			since, ago sql.NullInt64
			healthy    sql.NullBool
		)
		err := rows.Scan(&c.Identity, &c.Host, &c.PID, &since, &ago, &c.Alive, scanned(&c.Value), &c.Priority, scanned(&c.Version), &healthy)
		c.Since, c.SeenAgo = fromMicros(since), micros(ago)
		if healthy.Valid {
			c.Health = map[bool]string{true: "healthy", false: "unhealthy"}[healthy.Bool]
		}
		c.Leader = leader.Leading() && leader.Identity == c.Identity
		return c, err
	})
}

// isCandidate reports whether identity campaigns now.
func (s *store) isCandidate(ctx context.Context, lock, identity string) (bool, error) {
	var live bool
	err := s.db.QueryRowContext(ctx, text("SELECT EXISTS (SELECT 1 FROM `"+s.tbl.candidate+"` c WHERE c.lock_name = ? AND c.identity = ? AND "+
		alive("c")+")", lock, identity)).Scan(&live)
	if err != nil {
		return false, during("reading the candidates", schemaError(s.tbl, err))
	}
	return live, nil
}

func candidateLockSQL(c string) string {
	return "CONCAT(" + literal(candidateLockHead) + ", LEFT(SHA2(CONCAT(" + c + ".lock_name, '/', " + c + ".identity), 256), 40))"
}

// present is true, on the candidate row c, while that candidate's process
// takes part: under GetLock while a session holds its candidate lock;
// under LeaseRow while its last heartbeat is younger than its expiry.
func present(c string) string {
	return "IF(" + c + ".strategy = " + literal(GetLock.String()) + ", IS_USED_LOCK(" + candidateLockSQL(c) + ") IS NOT NULL, " +
		ageMicros(c+".seen_at") + " <= " + c + ".expiry_us)"
}

// alive is true, on the candidate row c, while that candidate campaigns:
// present, and not withdrawn as unhealthy (Config.Health). Only a live
// candidate is listed as alive, is a hand-over target, and is yielded to.
func alive(c string) string {
	return "(NOT (" + c + ".healthy <=> FALSE) AND " + present(c) + ")"
}

// target is true, on the candidate row c, for a candidate a hand-over may
// name (Shards' spread, Config.PreferAfter): alive, and under LeaseRow seen
// within a heartbeat period and the read round that stamps it (a live
// candidate's row is that old at most): one that died counts as alive
// until its row expires (2L + S), after its leases (L + S).
func (c Config) target(row string) string {
	fresh := c.heartbeatPeriod() + c.CheckInterval + c.Interval
	return "(" + alive(row) + " AND (" + row + ".strategy = " + literal(GetLock.String()) + " OR " + ageMicros(row+".seen_at") + " <= " +
		literal(fresh.Microseconds()) + "))"
}

// presence is this candidate's row, which lists it among the candidates
// and makes it a valid hand-over target while it is alive (see alive).
type presence struct {
	st   *store
	lock string
	seen time.Time // when the row was last written
}

// join writes this candidate's row, as a campaign that begins now,
// refuses to join an election that live candidates of another strategy
// run, and deletes the rows of candidates dead for ten of their expiry
// periods. A GetLock candidate's session holds
// its candidate lock before it joins.
func (p *presence) join(ctx context.Context, q querier) error {
	return onConn(ctx, q, func(q querier) error { return p.joinOn(ctx, q) })
}

func (p *presence) joinOn(ctx context.Context, q querier) error {
	st := p.st
	_, strategy := st.settled()
	var other sql.NullString
	err := q.QueryRowContext(ctx, text("SELECT MIN(identity) FROM `"+st.tbl.candidate+"` c WHERE c.lock_name = ? AND c.strategy <> ? AND "+
		present("c"), p.lock, strategy.String())).Scan(&other)
	if err != nil {
		return during("reading the candidates", schemaError(st.tbl, err))
	}
	if other.Valid {
		return fmt.Errorf("%w: candidate %q of election %q uses another strategy than %v; every candidate must use the same (Config.Strategy)", ErrStrategy, other.String, st.name, strategy)
	}
	if err := p.write(ctx, q, true); err != nil {
		return err
	}
	if _, err := q.ExecContext(ctx, text("DELETE c FROM `"+st.tbl.candidate+"` c WHERE c.lock_name = ? AND NOT "+present("c")+" AND "+
		ageMicros("c.seen_at")+" > 10 * c.expiry_us", p.lock)); err != nil {
		return during("cleaning up candidates", schemaError(st.tbl, err))
	}
	return nil
}

// beat writes this candidate's row, as write does for a campaign under way.
func (p *presence) beat(ctx context.Context, q querier) error {
	return onConn(ctx, q, func(q querier) error { return p.write(ctx, q, false) })
}

// write writes this candidate's row, keeping its first sighting unless the
// process changed, and the start of its campaign unless begun (join).
func (p *presence) write(ctx context.Context, q querier, begun bool) error {
	st := p.st
	_, strategy := st.settled()
	host, _ := os.Hostname()
	expiry := (2*st.cfg.heartbeatPeriod() + st.cfg.Margin).Microseconds()
	st.mu.Lock()
	value, healthy := st.value, st.healthy
	st.mu.Unlock()
	var v any = healthy.Bool
	if !healthy.Valid {
		v = nil
	}
	// No VALUES() in the update: MySQL deprecates it (8.0.20, warning
	// 1287), MariaDB has no row alias to replace it; the values are sent
	// twice. since is assigned first, so it compares the old pid and host.
	_, err := q.ExecContext(ctx, text("INSERT INTO `"+st.tbl.candidate+"` "+
		"(lock_name, identity, strategy, host, pid, since, seen_at, expiry_us, value, priority, version, healthy, waiting_since) "+
		"VALUES (?, ?, ?, ?, ?, UTC_TIMESTAMP(6), UTC_TIMESTAMP(6), ?, ?, ?, ?, ?, UTC_TIMESTAMP(6)) "+
		"ON DUPLICATE KEY UPDATE since = IF(pid <=> ? AND host <=> ?, since, UTC_TIMESTAMP(6)), "+
		"waiting_since = IF(? OR waiting_since IS NULL, UTC_TIMESTAMP(6), waiting_since), "+
		"strategy = ?, host = ?, pid = ?, seen_at = UTC_TIMESTAMP(6), expiry_us = ?, value = ?, priority = ?, version = ?, healthy = ?",
		p.lock, st.cfg.Identity, strategy.String(), host, os.Getpid(), expiry, value, int(st.cfg.Priority), st.cfg.Version, v,
		os.Getpid(), host, begun, strategy.String(), host, os.Getpid(), expiry, value, int(st.cfg.Priority), st.cfg.Version, v))
	if err != nil {
		return during("candidate heartbeat", schemaError(st.tbl, err))
	}
	p.seen = time.Now()
	return nil
}

// beatIfDue refreshes a LeaseRow candidate's row once per heartbeat period.
func (p *presence) beatIfDue(ctx context.Context, q querier) error {
	if time.Since(p.seen) < p.st.cfg.heartbeatPeriod() {
		return nil
	}
	return p.beat(ctx, q)
}

// leave deletes this candidate's row, so that it is not offered
// as a hand-over target once it has stopped campaigning.
func (s *store) leave(ctx context.Context) error {
	s.mu.Lock()
	ready := s.ready
	s.mu.Unlock()
	if !ready {
		// The tables were never found usable (a wrong prefix, a missing
		// grant): no row was written, and a failed DELETE would only hide
		// the error that Run returns behind one about this cleanup.
		return nil
	}
	lock, err := s.resolveLock(ctx)
	if err == nil {
		_, err = write(ctx, s.db, text("DELETE FROM `"+s.tbl.candidate+"` WHERE lock_name = ? AND identity = ?", lock, s.cfg.Identity))
	}
	return err
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

// recordsOf reads the records of the elections whose locks are locks.
func recordsOf(ctx context.Context, q querier, t tables, locks []string) ([]Record, error) {
	return readRecords(ctx, q, t, "WHERE r.lock_name IN ("+literals(locks)+")")
}

// waitLock takes lock on session q, waiting up to wait.
func waitLock(ctx context.Context, q querier, lock string, wait float64) (got sql.NullInt64, err error) {
	err = q.QueryRowContext(ctx, text("SELECT GET_LOCK(?, ?)", lock, wait)).Scan(&got)
	return got, err
}

// releaseLocks frees locks, held by session q.
func releaseLocks(ctx context.Context, q querier, locks ...string) error {
	args := make([]any, len(locks))
	for i, l := range locks {
		args[i] = l
	}
	_, err := q.ExecContext(ctx, text("DO "+strings.Repeat("RELEASE_LOCK(?), ", len(locks)-1)+"RELEASE_LOCK(?)", args...))
	return err
}

// identityInUse is the error of a candidate whose candidate lock another
// session holds, naming the statement that shows which.
func identityInUse(lock, identity, election string) error {
	return fmt.Errorf("%w: another session (IS_USED_LOCK(%s)) campaigns as %q in election %q; give every candidate its own Config.Identity",
		ErrIdentityInUse, literal(candidateLock(lock, identity)), identity, election)
}

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
	"math"
	"os"
	"runtime"
	"strings"
	"sync"
	"time"
	"weak"

	"github.com/go-sql-driver/mysql"
)

// historyPruneEvery spaces out the deletes that bound the history: a
// candidate prunes at its first term and every 16th after.
const historyPruneEvery = 16

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
	yielding outranking   // since when its term starts yield to a candidate of higher priority (outrankedFor)

	proclaiming sync.Mutex // one Term.Proclaim at a time, so that value and the record agree
}

func newStore(db *sql.DB, name string, cfg Config) *store {
	tbl := tablesFor(cfg.TablePrefix)
	return &store{db: db, name: name, cfg: cfg, tbl: tbl, first: firstUseOf(db, tbl), value: cfg.Value}
}

// outranking is when a candidate's term starts after the term of token
// first yielded to a waiting candidate of higher priority.
type outranking struct {
	token uint64
	since time.Time
}

// outrankedFor reports whether a term start after the term of token still
// yields to a waiting candidate of higher priority (Config.Priority): for
// targetHold after the first start that did, on this candidate's monotonic
// clock. Not longer: one that waits but does not take the election (cut
// off, stopped) then holds it up no more.
func (s *store) outrankedFor(token uint64) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.yielding.since.IsZero() || s.yielding.token != token {
		s.yielding = outranking{token, time.Now()}
	}
	return time.Since(s.yielding.since) < s.cfg.targetHold()
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

// firstUse is what the candidates on one pool with one table prefix learn
// once.
type firstUse struct {
	turn     chan struct{} // held by the candidate that learns
	database string        // DATABASE(), once read
	server   *platform     // once read
	ready    bool          // the tables were made sure of
	clock    serverClock   // the server's clock as the pool's reads have seen it
}

type firstUseKey struct {
	db  weak.Pointer[sql.DB] // not kept alive by this
	tbl tables
}

var firstUses = struct {
	sync.Mutex
	m map[firstUseKey]*firstUse
}{m: map[firstUseKey]*firstUse{}}

// firstUseOf returns what candidates on db with tables tbl learn once; it
// is forgotten with db.
func firstUseOf(db *sql.DB, tbl tables) *firstUse {
	k := firstUseKey{weak.Make(db), tbl}
	firstUses.Lock()
	defer firstUses.Unlock()
	f := firstUses.m[k]
	if f == nil {
		f = &firstUse{turn: make(chan struct{}, 1)}
		firstUses.m[k] = f
		runtime.AddCleanup(db, func(k firstUseKey) {
			firstUses.Lock()
			delete(firstUses.m, k)
			firstUses.Unlock()
		}, k)
	}
	return f
}

// learn runs f while no other candidate of the pool learns.
func (f *firstUse) learn(ctx context.Context, learn func() error) error {
	select {
	case f.turn <- struct{}{}:
	case <-ctx.Done():
		return ctx.Err()
	}
	defer func() { <-f.turn }()
	return learn()
}

// resolveLock returns the election's lock name, the key of all its rows,
// learnt once from the DSN's database (lockName). It needs no privilege
// beyond connecting: readers create no tables.
func (s *store) resolveLock(ctx context.Context) (string, error) {
	s.mu.Lock()
	lock := s.lock
	s.mu.Unlock()
	if lock != "" {
		return lock, nil
	}
	var database string
	err := s.first.learn(ctx, func() error {
		if s.first.database != "" {
			database = s.first.database
			return nil
		}
		var name sql.NullString
		if err := s.db.QueryRowContext(ctx, "SELECT DATABASE()").Scan(&name); err != nil {
			return during("reaching the server", refusal(err))
		}
		if !name.Valid {
			return fmt.Errorf("%w: the DSN names no database; add one, as in user:pass@tcp(host:3306)/dbname", ErrInvalidConfig)
		}
		database, s.first.database = name.String, name.String
		return nil
	})
	if err != nil {
		return "", err
	}
	lock = lockName(database, s.cfg.TablePrefix, s.name)
	s.mu.Lock()
	s.lock = lock
	s.mu.Unlock()
	return lock, nil
}

// prepare reads the server's platform and settles the candidate's
// strategy, then creates or checks the tables, once, before a candidate's
// first campaign; it returns the lock name.
func (s *store) prepare(ctx context.Context, log *slog.Logger) (string, error) {
	// Bounded as a session's setup is: a server that accepts the connection
	// and never answers must not hold a campaign forever, whatever ctx.
	ctx, cancel := context.WithTimeout(ctx, s.cfg.Lease+s.cfg.Margin)
	defer cancel()
	lock, err := s.resolveLock(ctx)
	s.mu.Lock()
	ready := s.ready
	s.mu.Unlock()
	if err != nil || ready {
		return lock, err
	}
	var (
		p        platform
		strategy Strategy
		why      string
		learnt   bool // this candidate checked the server and the tables
	)
	err = s.first.learn(ctx, func() error {
		// The server first: a strategy it cannot serve is refused before
		// any table is created.
		if s.first.server == nil {
			server, err := detectPlatform(ctx, s.db)
			if err != nil {
				return err
			}
			s.first.server = &server
		}
		p = *s.first.server
		if strategy, why, err = p.strategyFor(s.cfg.Strategy); err != nil || s.first.ready {
			return err
		}
		check := checkSchema
		if !s.cfg.SkipCreateTables {
			check = createSchema
		}
		if err := check(ctx, s.db, s.tbl); err != nil {
			return err
		}
		s.first.ready, learnt = true, true
		return nil
	})
	if err != nil {
		return "", err
	}
	if learnt {
		if why != "" {
			log.Info("strategy chosen for this server", "strategy", strategy.String(), "why", why)
		}
		for _, w := range p.warnings(strategy, s.cfg.CheckInterval) {
			log.Warn(w)
		}
	}
	s.mu.Lock()
	s.ready, s.platform, s.strategy = true, p, strategy
	s.mu.Unlock()
	return lock, nil
}

// settled returns the server's platform and the candidate's strategy, as
// prepare settled them.
func (s *store) settled() (platform, Strategy) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.platform, s.strategy
}

// The record: read as a reader takes it, and as a reader who decides by it (vouch).

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

// records reads the records of every election in tables t.
func records(ctx context.Context, q querier, t tables) ([]Record, error) {
	return readRecords(ctx, q, t, "")
}

// recordsOf reads the records of the elections whose locks are locks.
func recordsOf(ctx context.Context, q querier, t tables, locks []string) ([]Record, error) {
	return readRecords(ctx, q, t, "WHERE r.lock_name IN ("+literals(locks)+")")
}

func readRecords(ctx context.Context, q querier, t tables, where string, args ...any) ([]Record, error) {
	return collect(ctx, q, t, "record", text("SELECT "+recordColumns("r.lock_name")+" FROM "+t.recordWithLease()+" "+where+" ORDER BY r.name", args...),
		func(rows *sql.Rows) (Record, error) {
			var r Record
			err := rows.Scan(r.fields()...)
			return r, err
		})
}

// recordWithLease is the record as r, and as l the lease row of the
// shared session that holds its term, while it leads: the session renews
// the term there (renewedAt).
func (t tables) recordWithLease() string {
	return "`" + t.record + "` r LEFT JOIN `" + t.lease + "` l ON l.lease_id = r.lease_id AND r.state = " + literal(stateLeading)
}

// renewedAt is the last renewal of the term the record names, from
// recordWithLease: its own, or its session's lease's if later.
const renewedAt = "GREATEST(r.renewed_at, COALESCE(l.renewed_at, r.renewed_at))"

// recordColumns selects, from recordWithLease, what Record holds, with
// owner naming the election's lock for IS_USED_LOCK. A missing row (a LEFT
// JOIN's) reads as NULLs, which Record.fields takes as zeros. The value is
// the term's only if its claim wrote it: the claim of a version before
// values leaves the last one.
func recordColumns(owner string) string {
	return "r.name, r.strategy, r.state, r.epoch, r.holder, r.host, r.pid, r.conn_id, " +
		utcMicros("r.since") + ", " + utcMicros(renewedAt) + ", " + utcMicros("r.ended_at") + ", " +
		ageMicros(renewedAt) + ", r.lease_us, IS_USED_LOCK(" + owner + "), " +
		"r.demote_epoch = r.epoch, IF(r.demote_epoch = r.epoch, " + ageMicros("r.demote_at") + ", NULL), " + utcMicros("r.demote_at") + ", r.handover_to, " +
		"IF(r.value_epoch <=> r.epoch, r.value, NULL), " + utcMicros("r.renewed_at") + ", " + utcMicros("UTC_TIMESTAMP(6)")
}

// fields returns the scan targets for recordColumns' columns, which fill
// r once the row has been scanned.
func (r *Record) fields() []any {
	return []any{scanned(&r.Name), scanned(&r.Strategy), scanned(&r.State), scanned(&r.Token), scanned(&r.Identity), scanned(&r.Host),
		scanned(&r.PID), scanned(&r.ConnID),
		scannedTime(&r.Since), scannedTime(&r.Renewed), scannedTime(&r.Ended),
		scannedRenewal(&r.RenewedAgo), scannedAge(&r.Expiry), scanned(&r.LockConnID),
		scanned(&r.demoted), scannedAge(&r.DemotedAgo), &r.demoteAt, scanned(&r.HandoverTo), scanned(&r.Value), &r.renewedUS, &r.nowUS}
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

// vouch makes rec, read by r, a record its reader can decide by: the
// latest local instants at which its renewal, its demotion and its claim
// can have been stamped, by this reader's watch of the server's clock and
// its earlier sightings. Record's rule reads its ages from there (see
// Record.renewalAge). A step of the server's clock seen by this read is
// logged.
func (s *store) vouch(rec *Record, r reading) {
	step, p := s.first.clock.see(r)
	switch {
	case step.Abs() >= noticedStep:
		s.cfg.Logger.Warn("the database server's clock stepped, or the pool reached another server whose clock differs: "+
			"a renewal of the election stamped before this read counts as made at it, so no leader is deposed by the step "+
			"(a lease that ran out meanwhile is taken over up to Lease+Margin later)",
			"election", s.name, "step", step.Round(time.Millisecond).String())
	case step != 0:
		s.cfg.Logger.Debug("the database server's clock moved apart from this candidate's (another node of a cluster, or a small step): a new run of the watch",
			"election", s.name, "step", step.String())
	}
	rec.read = r.recv
	if rec.Token == 0 { // no record: nothing stamped
		return
	}
	seen := &s.seen
	seen.mu.Lock()
	defer seen.mu.Unlock()
	rec.renewedBy = seen.renewal.see(rec.Token, rec.Renewed.UnixMicro(), p.stampedBy(rec.Renewed.UnixMicro()))
	rec.claimedBy = seen.claimed.see(rec.Token, rec.Since.UnixMicro(), p.stampedBy(rec.Since.UnixMicro()))
	if rec.demoteAt.Valid {
		rec.demotedBy = seen.demotion.see(rec.Token, rec.demoteAt.Int64, p.stampedBy(rec.demoteAt.Int64))
	}
}

// The leader's keepalive, and the locks of a candidate's session. GET_LOCK
// returns 1 when acquired, 0 on timeout, NULL on error (a killed query);
// a wait is in seconds as the server takes it (platform.lockWait).

// renew is a pinned GetLock leader's keepalive, on its session q: one
// statement that stamps the record of term token, if it still names
// session with no demotion pending and the session holds the lock, and
// refreshes the leader's candidate row with it. It reports whether the
// record matched (renewalMissed says why not). The candidate row is for
// listing and hand-over checks only: should the statement fail on it (a
// grant revoked on that table), the record alone is stamped, and the term
// goes on.
func (s *store) renew(ctx context.Context, q querier, lock string, token, session uint64) (bool, error) {
	where := text(" WHERE r.lock_name = ? AND r.epoch = ? AND r.conn_id = ? AND NOT (r.demote_epoch <=> r.epoch) AND IS_USED_LOCK(r.lock_name) = CONNECTION_ID()", lock, token, session)
	res, err := q.ExecContext(ctx, text("UPDATE `"+s.tbl.record+"` r LEFT JOIN `"+s.tbl.candidate+"` c "+
		"ON c.lock_name = r.lock_name AND c.identity = ? SET r.renewed_at = UTC_TIMESTAMP(6), "+seenNow("c."), s.cfg.Identity)+where)
	if denied(err) || serverError(err, 1146) { // denied, no table
		res, err = q.ExecContext(ctx, "UPDATE `"+s.tbl.record+"` r SET r.renewed_at = UTC_TIMESTAMP(6)"+where)
	}
	if err != nil {
		return false, err
	}
	n, err := res.RowsAffected()
	return err == nil && n >= 1, nil
}

// missed is why a keepalive matched no record: who holds the lock
// (IS_USED_LOCK), whether the record names the term, whether it asks the
// term to step down, and for whom.
type missed struct {
	owner         sql.NullInt64
	ours, demoted bool
	handTo        sql.NullString
}

// renewalMissed reads, on session q, why the keepalive of term token on
// session matched nothing.
func (s *store) renewalMissed(ctx context.Context, q querier, lock string, token, session uint64) (missed, error) {
	var m missed
	err := q.QueryRowContext(ctx, text("SELECT IS_USED_LOCK(lock_name), epoch = ? AND conn_id = ?, demote_epoch <=> epoch, handover_to "+
		"FROM `"+s.tbl.record+"` WHERE lock_name = ?", token, session, lock)).Scan(&m.owner, &m.ours, &m.demoted, &m.handTo)
	return m, err
}

// setUpSession readies session q to hold locks for candidates, with the
// wait_timeout w (platform.sessionSetup).
func setUpSession(ctx context.Context, q querier, server platform, w int64) error {
	_, err := q.ExecContext(ctx, server.sessionSetup(w))
	return err
}

// pinSession reads the id of session q and takes lock on it, waiting up
// to wait.
func pinSession(ctx context.Context, q querier, lock string, wait float64) (id uint64, got sql.NullInt64, err error) {
	err = q.QueryRowContext(ctx, text("SELECT CONNECTION_ID(), GET_LOCK(?, ?)", lock, wait)).Scan(&id, &got)
	return id, got, err
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

// releaseAt frees lock, held by session q, and reports whether it was
// held, in one statement that also places the local moment at on the
// database clock (timeAgo), before the release: UTC_TIMESTAMP is the
// time the statement began ("evaluated only once per query at the start
// of query execution", MySQL manual, Date and Time Functions; the same in
// MariaDB, TestResignedTermEndsBeforeTheNextStarts).
func releaseAt(ctx context.Context, q querier, lock string, at time.Time) (us int64, released bool, err error) {
	var n sql.NullInt64
	err = q.QueryRowContext(ctx, text("SELECT "+utcMicros(timeAgo)+", RELEASE_LOCK(?)", agoMicros(at), lock)).Scan(&us, &n)
	return us, n.Int64 == 1, err
}

// The end of a term.

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
			// MySQL 8.4 manual, "KILL Statement": a session of a user with
			// SYSTEM_USER is killed only by one that has it too. AWS's
			// "Master user account privileges": Aurora MySQL version 3's
			// master user has CONNECTION_ADMIN, RDS for MySQL's does not.
			err = fmt.Errorf("%w: KILL CONNECTION %d (%s, token %d, %s): %w; grant the electors' user CONNECTION_ADMIN "+
				"(MySQL 8; and SYSTEM_USER if the candidates' user has it), CONNECTION ADMIN (MariaDB 10.5+) or SUPER, or run every candidate "+
				"as the same user (the only fix on Amazon RDS for MySQL and Aurora MySQL version 2, which end other users' sessions through "+
				"CALL mysql.rds_kill alone)",
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
			err = s.endRecord(ctx, q, lock, token, end, anyHolder)
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
		err = s.endRecord(ctx, q, lock, token, end, anyHolder)
	}
	return err
}

// anyHolder is endRecord's holder for an end whichever session or lease
// the record names: no connection id, nor a LeaseRow id (below 2^63).
const anyHolder = math.MaxUint64

// endRecord records in the record, if it still describes term token as
// leading (and names holder, unless anyHolder), how the term ended: not
// before it started, whatever the database clock did.
func (s *store) endRecord(ctx context.Context, q querier, lock string, token uint64, end ending, holder uint64) error {
	at, us := end.moment()
	cond := ""
	if holder != anyHolder {
		cond = text(" AND conn_id = ?", holder)
	}
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

// The epoch and fenced transactions.

// epoch reads the newest token the election has issued; 0 if none.
func (s *store) epoch(ctx context.Context, lock string) (uint64, error) {
	var epoch uint64
	err := s.db.QueryRowContext(ctx, text("SELECT epoch FROM `"+s.tbl.epoch+"` WHERE lock_name = ?", lock)).Scan(&epoch)
	if err != nil && !errors.Is(err, sql.ErrNoRows) {
		return 0, during("reading the epoch", schemaError(s.tbl, err))
	}
	return epoch, nil
}

// causalEpoch reads the election's epoch as epoch does, but on a
// multi-primary cluster only once this member has applied every write set
// committed in the cluster before the read (platform.causalRead), on a
// session of its own that is dropped after: a certification failure can
// come back before the newer epoch is applied here.
func (s *store) causalEpoch(ctx context.Context, lock string) (uint64, error) {
	server, _ := s.settled()
	if !server.certifies() {
		return s.epoch(ctx, lock)
	}
	conn, err := s.db.Conn(ctx)
	if err != nil {
		return 0, err
	}
	defer drop(conn)
	if _, err := conn.ExecContext(ctx, server.causalRead()); err != nil {
		return 0, err
	}
	var epoch uint64
	err = conn.QueryRowContext(ctx, text("SELECT epoch FROM `"+s.tbl.epoch+"` WHERE lock_name = ?", lock)).Scan(&epoch)
	return epoch, err
}

// fencedSession is the server session of a fenced transaction, as its
// check read it.
type fencedSession struct {
	id     uint64
	server string // serverName
}

// killSession ends s through a pool session, if that reaches s's server,
// within Interval.
func (s *store) killSession(ctx context.Context, fs fencedSession) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.cfg.Interval)
	defer cancel()
	conn, err := s.db.Conn(ctx)
	if err != nil {
		return err
	}
	defer conn.Close()
	var server string
	if err := conn.QueryRowContext(ctx, "SELECT "+serverName).Scan(&server); err != nil {
		return err
	}
	if server != fs.server {
		return fmt.Errorf("the pool reaches %s, not the session's server %s", server, fs.server)
	}
	_, err = conn.ExecContext(ctx, text("KILL CONNECTION ?", fs.id))
	return err
}

// fenceRead reads, in a fenced transaction tx, the election's epoch,
// locking its row as the server allows (platform.fenceLock), with the
// session's wait_timeout and who the session is.
func (s *store) fenceRead(ctx context.Context, tx *sql.Tx, lock string, server platform) (epoch uint64, wait int64, fs fencedSession, err error) {
	err = tx.QueryRowContext(ctx, text("SELECT epoch, @@SESSION.wait_timeout, CONNECTION_ID(), "+serverName+" FROM `"+s.tbl.epoch+"` WHERE lock_name = ?"+server.fenceLock(), lock)).
		Scan(&epoch, &wait, &fs.id, &fs.server)
	return epoch, wait, fs, err
}

// writeEpochBack changes the epoch row and changes it back in tx, which
// puts the row in tx's write set.
func (s *store) writeEpochBack(ctx context.Context, tx *sql.Tx, lock string) error {
	for _, step := range []string{"+ 1", "- 1"} {
		if _, err := tx.ExecContext(ctx, text("UPDATE `"+s.tbl.epoch+"` SET epoch = epoch "+step+" WHERE lock_name = ?", lock)); err != nil {
			return err
		}
	}
	return nil
}

// The history.

// lastTerms reads the election's last n terms' history rows, newest
// first.
func (s *store) lastTerms(ctx context.Context, lock string, n int) ([]TermRecord, error) {
	return s.terms(ctx, lock, "epoch >= 0 ORDER BY epoch DESC LIMIT ?", n)
}

// termsFrom reads the history rows of the election's terms from token
// from on, oldest first.
func (s *store) termsFrom(ctx context.Context, lock string, from uint64) ([]TermRecord, error) {
	return s.terms(ctx, lock, "epoch >= ? ORDER BY epoch", from)
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

// The candidates.

// candidates reads the election's candidate rows; leader marks the one
// that leads.
func (s *store) candidates(ctx context.Context, lock string, leader Record) ([]Candidate, error) {
	return collect(ctx, s.db, s.tbl, "candidates", text("SELECT identity, host, pid, "+utcMicros("since")+", "+
		"IF(c.strategy = "+literal(GetLock.String())+" AND "+alive("c")+", 0, "+ageMicros("c.seen_at")+"), "+alive("c")+
		", c.value, c.priority, c.version, c.healthy, c.session FROM `"+s.tbl.candidate+"` c WHERE lock_name = ? ORDER BY identity", lock), func(rows *sql.Rows) (Candidate, error) {
		var (
			c          Candidate
			since, ago sql.NullInt64
			healthy    sql.NullBool
		)
		err := rows.Scan(&c.Identity, &c.Host, &c.PID, &since, &ago, &c.Alive, scanned(&c.Value), &c.Priority, scanned(&c.Version), &healthy, scanned(&c.Session))
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

// seenNow stamps a candidate row (its columns prefixed with c) as seen
// now, by this version: seen_at and lease_aware_at get the same value,
// the statement's one UTC_TIMESTAMP(6).
func seenNow(c string) string {
	return c + "seen_at = UTC_TIMESTAMP(6), " + c + "lease_aware_at = UTC_TIMESTAMP(6)"
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
	st      *store
	lock    string
	session string    // how the candidate reaches the server (Candidate.Session)
	seen    time.Time // when the row was last written
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
	var (
		other   sql.NullString
		top     sql.NullInt64
		elected bool // the election has a record
	)
	err := q.QueryRowContext(ctx, text("SELECT MIN(identity), (SELECT r.top_priority FROM `"+st.tbl.record+"` r WHERE r.lock_name = ?), "+
		"EXISTS (SELECT 1 FROM `"+st.tbl.record+"` r WHERE r.lock_name = ?) FROM `"+st.tbl.candidate+"` c WHERE c.lock_name = ? AND c.strategy <> ? AND "+
		present("c"), p.lock, p.lock, p.lock, strategy.String())).Scan(&other, &top, &elected)
	if err != nil {
		return during("reading the candidates", schemaError(st.tbl, err))
	}
	if other.Valid {
		return fmt.Errorf("%w: candidate %q of election %q uses another strategy than %v; every candidate must use the same (Config.Strategy)", ErrStrategy, other.String, st.name, strategy)
	}
	// The record's hint must cover this candidate's priority before its
	// row shows it alive; and again after, if the first term's record,
	// which counts the rows, may have been written in between.
	raise := !top.Valid || top.Int64 < int64(st.cfg.Priority)
	if raise && elected {
		if err := p.raise(ctx, q); err != nil {
			return err
		}
	}
	if err := p.write(ctx, q, true); err != nil {
		return err
	}
	if raise && !elected {
		if err := p.raise(ctx, q); err != nil {
			return err
		}
	}
	if _, err := q.ExecContext(ctx, text("DELETE c FROM `"+st.tbl.candidate+"` c WHERE c.lock_name = ? AND NOT "+present("c")+" AND "+
		ageMicros("c.seen_at")+" > 10 * c.expiry_us", p.lock)); err != nil {
		return during("cleaning up candidates", schemaError(st.tbl, err))
	}
	st.cfg.Observer.campaigning(st.name, p.session)
	return nil
}

// raise raises the record's top_priority, the highest priority a
// candidate has joined the election with, to this candidate's, and to
// every row's if it was not known (a record of an earlier version). It is
// never lowered: a hint above every candidate's priority only costs their
// starts a read of the candidate rows (store.rank).
func (p *presence) raise(ctx context.Context, q querier) error {
	st := p.st
	_, err := q.ExecContext(ctx, text("UPDATE `"+st.tbl.record+"` r SET r.top_priority = GREATEST(?, COALESCE((SELECT MAX(c.priority) FROM `"+st.tbl.candidate+
		"` c WHERE c.lock_name = r.lock_name), ?)) WHERE r.lock_name = ? AND (r.top_priority IS NULL OR r.top_priority < ?)",
		int(st.cfg.Priority), int(st.cfg.Priority), p.lock, int(st.cfg.Priority)))
	if err != nil {
		return during("joining the election", schemaError(st.tbl, err))
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
		"(lock_name, identity, strategy, host, pid, since, seen_at, lease_aware_at, expiry_us, value, priority, version, healthy, waiting_since, session) "+
		"VALUES (?, ?, ?, ?, ?, UTC_TIMESTAMP(6), UTC_TIMESTAMP(6), UTC_TIMESTAMP(6), ?, ?, ?, ?, ?, UTC_TIMESTAMP(6), ?) "+
		"ON DUPLICATE KEY UPDATE since = IF(pid <=> ? AND host <=> ?, since, UTC_TIMESTAMP(6)), "+
		"waiting_since = IF(? OR waiting_since IS NULL, UTC_TIMESTAMP(6), waiting_since), "+
		"strategy = ?, host = ?, pid = ?, "+seenNow("")+", expiry_us = ?, value = ?, priority = ?, version = ?, healthy = ?, session = ?",
		p.lock, st.cfg.Identity, strategy.String(), host, os.Getpid(), expiry, value, int(st.cfg.Priority), st.cfg.Version, v, p.session,
		os.Getpid(), host, begun, strategy.String(), host, os.Getpid(), expiry, value, int(st.cfg.Priority), st.cfg.Version, v, p.session))
	if err != nil {
		return during("candidate heartbeat", schemaError(st.tbl, err))
	}
	p.seen = time.Now()
	return nil
}

// deleteCandidate deletes this candidate's row, so that it is not offered
// as a hand-over target once it has stopped campaigning.
func (s *store) deleteCandidate(ctx context.Context) error {
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

// unhealthy marks this candidate's row unhealthy, which takes it out of
// the live candidates (alive) at once, whatever its session still holds.
func (s *store) unhealthy(ctx context.Context) error {
	lock, err := s.resolveLock(ctx)
	if err == nil {
		_, err = write(ctx, s.db, text("UPDATE `"+s.tbl.candidate+"` SET healthy = FALSE WHERE lock_name = ? AND identity = ?", lock, s.cfg.Identity))
	}
	return err
}

// preferred returns the live, healthy candidate of the highest priority
// above this one's that has campaigned for PreferAfter, the longest
// waiting first among equals; "" if none.
func (s *store) preferred(ctx context.Context, lock string) (string, error) {
	var to string
	err := s.db.QueryRowContext(ctx, text("SELECT c.identity FROM `"+s.tbl.candidate+"` c WHERE c.lock_name = ? AND c.identity <> ? AND c.priority > ? AND "+
		s.cfg.target("c")+" AND "+ageMicros("c.waiting_since")+" >= ? ORDER BY c.priority DESC, c.waiting_since, c.identity LIMIT 1",
		lock, s.cfg.Identity, int(s.cfg.Priority), s.cfg.PreferAfter.Microseconds())).Scan(&to)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return "", nil
	case err != nil:
		return "", during("reading the candidates", schemaError(s.tbl, err))
	}
	return to, nil
}

// targets reads which of the elections locks each live candidate a
// hand-over may name (Config.target) campaigns in: for each such row, its
// lock and its identity.
func (s *store) targets(ctx context.Context, locks []string) ([][2]string, error) {
	return collect(ctx, s.db, s.tbl, "candidates", "SELECT c.lock_name, c.identity FROM `"+s.tbl.candidate+"` c WHERE c.lock_name IN ("+
		literals(locks)+") AND "+s.cfg.target("c"), func(rows *sql.Rows) (c [2]string, err error) {
		err = rows.Scan(&c[0], &c[1])
		return c, err
	})
}

// What a leader, an operator or a policy asks of the record.

// removeRows deletes the election's rows in one transaction, once it has
// seen that no term may act and no candidate campaigns. It locks the
// record and epoch rows first: a term start, which writes both, waits for the
// transaction and then finds no record, so it starts the election anew.
// A candidate that joins meanwhile keeps its row: only rows of candidates
// that do not campaign are deleted. Repeatable read, whatever the server's
// default: its gap locks keep a first term's record out meanwhile.
func (s *store) removeRows(ctx context.Context, lock string) error {
	tx, err := s.db.BeginTx(ctx, &sql.TxOptions{Isolation: sql.LevelRepeatableRead})
	if err != nil {
		return during("removing the election", err)
	}
	defer tx.Rollback()
	// FOR UPDATE needs SELECT and one of DELETE, LOCK TABLES or UPDATE on
	// MySQL (its manual, "Locking Reads"; read, not tested here): DELETE,
	// which Remove needs anyway.
	for _, t := range []string{s.tbl.record, s.tbl.epoch} {
		if _, err := tx.ExecContext(ctx, text("SELECT 1 FROM `"+t+"` WHERE lock_name = ? FOR UPDATE", lock)); err != nil {
			return during("removing the election", schemaError(s.tbl, err))
		}
	}
	r, err := s.record(ctx, tx, lock)
	switch {
	case err == nil && (r.Leading() || r.overdue() != ""): // overdue, yet its session holds the lock
		return fmt.Errorf("%w: %q may still act in term %d of election %q; stop it first", ErrInUse, r.Identity, r.Token, s.name)
	case err != nil && !errors.Is(err, ErrNoLeader):
		return during("removing the election", err)
	}
	var live int
	if err := tx.QueryRowContext(ctx, text("SELECT COUNT(*) FROM `"+s.tbl.candidate+"` c WHERE c.lock_name = ? AND "+present("c"), lock)).Scan(&live); err != nil {
		return during("removing the election", schemaError(s.tbl, err))
	}
	if live > 0 {
		return fmt.Errorf("%w: %d candidates of election %q campaign; stop them first (Candidates lists them)", ErrInUse, live, s.name)
	}
	for _, q := range []string{
		"DELETE FROM `" + s.tbl.term + "` WHERE lock_name = ?",
		"DELETE c FROM `" + s.tbl.candidate + "` c WHERE c.lock_name = ? AND NOT " + present("c"),
		"DELETE FROM `" + s.tbl.epoch + "` WHERE lock_name = ?",
		"DELETE FROM `" + s.tbl.record + "` WHERE lock_name = ?",
	} {
		if _, err := tx.ExecContext(ctx, text(q, lock)); err != nil {
			return during("removing the election", schemaError(s.tbl, err))
		}
	}
	if err := tx.Commit(); err != nil {
		return during("removing the election", err)
	}
	return nil
}

// request writes the demotion of term token (and the hand-over target, if
// any) into the record, where the leader's next keepalive finds it. The
// hand-over is held for hold, or three of the term's leases if 0. An
// operator's request replaces one pending; a policy's (replace false)
// never does, so it cannot put off the kill of a leader that ignores an
// operator.
func (s *store) request(ctx context.Context, lock string, token uint64, to string, hold time.Duration, replace bool) error {
	var handTo, holdUS any
	if to != "" {
		handTo = to
	}
	if hold > 0 {
		holdUS = hold.Microseconds()
	}
	// The hand-over preference outlives the demotion long enough for the
	// target to win the lock, and no longer: a target that died meanwhile
	// must not block the election.
	// The term's lease, if a shared session holds it, counts the demotion:
	// that session's renewal, and the waiters, read its terms' records
	// only when that count moves.
	res, err := write(ctx, s.db, text("UPDATE "+s.tbl.recordWithLease()+" SET r.demote_epoch = r.epoch, r.demote_at = UTC_TIMESTAMP(6), "+
		"r.handover_to = ?, r.handover_until = UTC_TIMESTAMP(6) + INTERVAL COALESCE(?, 3 * r.lease_us) MICROSECOND, l.changes = l.changes + 1 "+
		"WHERE r.lock_name = ? AND r.epoch = ? AND r.state = ? AND (? OR NOT (r.demote_epoch <=> r.epoch))", handTo, holdUS, lock, token, stateLeading, replace))
	if err != nil {
		return during("requesting the demotion", schemaError(s.tbl, err))
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return ErrNoLeader // the term ended meanwhile
	}
	return nil
}

// proclaim writes value into the record of term token, if it still leads,
// and into its leader's candidate row, for listing only, as in renew. It
// reports whether the record changed: not if the value was already this
// one, or the term is over.
func (s *store) proclaim(ctx context.Context, lock string, token uint64, value string) (bool, error) {
	res, err := write(ctx, s.db, text("UPDATE `"+s.tbl.record+"` r LEFT JOIN `"+s.tbl.candidate+"` c "+
		"ON c.lock_name = r.lock_name AND c.identity = r.holder SET r.value = ?, c.value = ? "+
		"WHERE r.lock_name = ? AND r.epoch = ? AND r.state = ?", value, value, lock, token, stateLeading))
	if err != nil {
		return false, during("proclaiming", schemaError(s.tbl, err))
	}
	n, _ := res.RowsAffected()
	return n > 0, nil
}

// Times, as the statements write and read them: the database clock in
// microseconds since the Unix epoch.

// utcMicros reads a DATETIME(6) column written in UTC as microseconds since
// the Unix epoch, so that no DSN setting (parseTime, loc) changes it.
func utcMicros(col string) string {
	return "TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', " + col + ")"
}

// atMicros is the UTC DATETIME(6) of a placeholder's microseconds since
// the Unix epoch: the inverse of utcMicros.
const atMicros = "TIMESTAMPADD(MICROSECOND, ?, '1970-01-01 00:00:00')"

// datetime is the UTC DATETIME(6) of us, an SQL expression of
// microseconds since the Unix epoch: atMicros for an expression.
func datetime(us string) string {
	return "TIMESTAMPADD(MICROSECOND, " + us + ", '1970-01-01 00:00:00')"
}

// ageMicros is how long ago col was, on the database clock.
func ageMicros(col string) string {
	return "TIMESTAMPDIFF(MICROSECOND, " + col + ", UTC_TIMESTAMP(6))"
}

// serverName names the server a statement runs on, as TermRecord.Server
// shows it.
const serverName = "CONCAT(@@hostname, ':', @@port, '/', @@server_id)"

// timeAgo is the SQL for a moment on the database clock, given how many
// microseconds ago it was (agoMicros), measured just before the statement
// is sent: a local moment, written late, keeps its time. The statement
// must go on a session already in hand (see onConn), or a pool's dial
// would come between the measure and the send.
const timeAgo = "UTC_TIMESTAMP(6) - INTERVAL ? MICROSECOND"

func agoMicros(at time.Time) int64 { return max(time.Since(at), 0).Microseconds() }

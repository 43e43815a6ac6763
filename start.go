package election

// The term start: a read of the record, then the claim of it together with
// the epoch bump, two statements after the candidate has won, or three for
// the many starts a process makes at once (starter); and the history,
// which the term writes once it has begun. See docs/protocol.md,
// "Campaign" and "Shared sessions".

import (
	"context"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
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
	rec          Record
	exists       bool          // the election has a record
	delayUntilUS sql.NullInt64 // the end of a lock-delay owed, carried over from an earlier term (delay_until), µs
	handing      bool          // a hand-over to another live candidate is pending
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
	s.st.endRecord(ctx, q, s.lock, claimed, ending{why: stateLost, at: time.Now()}, text(" AND conn_id = ?", s.session))
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
	sent := time.Now()
	err := q.QueryRowContext(ctx, text("SELECT "+predecessorColumns(s.st.tbl, "?", binLiteral(s.st.cfg.Identity))+", r.lock_name IS NOT NULL "+
		"FROM (SELECT 1) d LEFT JOIN `"+s.st.tbl.record+"` r ON r.lock_name = ?", s.lock, s.lock)).
		Scan(append(p.fields(), &p.exists)...)
	if err != nil {
		return p, during("reading the record", schemaError(s.st.tbl, err))
	}
	s.st.vouch(&p.rec, reading{p.rec.nowUS, sent, time.Now()})
	return p, nil
}

// predecessorColumns reads a predecessor from the record as r in t: owner
// names its lock, me the reader's identity (SQL expressions).
func predecessorColumns(t tables, owner, me string) string {
	return recordColumns(owner) + ", " + utcMicros("r.delay_until") + ", COALESCE(" + handingOver(t, "r", me) + ", FALSE)"
}

// fields returns the scan targets for predecessorColumns.
func (p *predecessor) fields() []any {
	return append(p.rec.fields(), &p.delayUntilUS, &p.handing)
}

// delayLeft is the lock-delay still owed at the read, carried over in the
// record (delay_until): counted from the claim that wrote it, which stamped
// both, on the reader's watch (so that no step of the database clock since
// shortens it). Every read a term start follows is vouched for.
func (p predecessor) delayLeft() time.Duration {
	if !p.delayUntilUS.Valid {
		return 0
	}
	owed := micros(sql.NullInt64{Int64: p.delayUntilUS.Int64 - p.rec.Since.UnixMicro()})
	return max(p.rec.claimedBy.Add(owed).Sub(p.rec.read), 0)
}

// holding is the condition, on the record as r, that session (SQL) holds
// the election's lock as a GetLock candidate's claim and bump are made: a
// candidate on a shared session starts its term through the pool
// (sharedCandidate.start), and the session may have ended since its poll
// took the lock, and another candidate taken it. On a pinned session, which
// sends them itself, it always holds. A lease holds no lock: "".
func (s termStart) holding(r, session string) string {
	if _, strategy := s.st.settled(); strategy != GetLock {
		return ""
	}
	return " AND IS_USED_LOCK(" + r + ".lock_name) = " + session
}

// now is the server's clock at the read.
func (p predecessor) now() time.Time { return time.UnixMicro(p.rec.nowUS).UTC() }

// handingOver is true, on the record as r, while a hand-over to another
// live candidate than me (an identity, as SQL) is pending.
func handingOver(t tables, r, me string) string {
	return r + ".handover_to IS NOT NULL AND " + r + ".handover_to <> " + me + " AND " + r + ".handover_until > UTC_TIMESTAMP(6) AND EXISTS (" +
		"SELECT 1 FROM `" + t.candidate + "` c WHERE c.lock_name = " + r + ".lock_name AND c.identity = " + r + ".handover_to AND " + alive("c") + ")"
}

// decide decides, by the record's rule, whether a new term may follow p,
// and after what
// lock-delay:
//   - it refuses (ErrStrategy) while a term of the other strategy still acts;
//   - under LeaseRow, it returns ErrHeld unless the last term has ended, gone
//     stale (no renewal for its lease plus margin, by the reader's watch), or
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
	return max(p.delayLeft(), p.rec.lockDelay()), nil
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
	claimed := p.next()
	v := s.values(p, claimed, delay)
	if !p.exists {
		_, err := q.ExecContext(ctx, "INSERT INTO `"+s.st.tbl.record+"` "+
			"(lock_name, name, strategy, state, epoch, holder, host, pid, conn_id, lease_us, value, value_epoch, since, renewed_at) "+
			"VALUES ("+strings.Join([]string{v.lock, v.name, v.strategy, literal(stateLeading), v.epoch, v.identity, v.host, v.pid, v.session, v.leaseUS, v.value, v.epoch}, ", ")+
			", UTC_TIMESTAMP(6), UTC_TIMESTAMP(6))")
		if me := new(mysql.MySQLError); errors.As(err, &me) && me.Number == 1062 { // duplicate key
			return 0, errRaced
		}
		if err != nil {
			return 0, during("writing the record", schemaError(s.st.tbl, err))
		}
		return s.bump(ctx, q, claimed)
	}
	where := s.unchanged(v)
	if token, ok, err := s.claimBumped(ctx, q, v, claimed, where); ok || err != nil {
		return token, err
	}
	// Lost a race, or there is no epoch row: the claim alone tells which.
	res, err := q.ExecContext(ctx, s.set(v, "")+where)
	if err != nil {
		return 0, during("writing the record", schemaError(s.st.tbl, err))
	}
	if n, err := res.RowsAffected(); err != nil || n != 1 {
		return 0, errRaced
	}
	return s.bump(ctx, q, claimed)
}

// claimBumped makes the claim v at claimed where the record matches where
// (SQL), with the epoch's bump in the same statement, and returns the
// token; ok is false if it changed nothing: a race lost, or no epoch row.
func (s termStart) claimBumped(ctx context.Context, q querier, v claimValues, claimed uint64, where string) (token uint64, ok bool, err error) {
	res, err := q.ExecContext(ctx, s.set(v, "JOIN `"+s.st.tbl.epoch+"` e ON e.lock_name = r.lock_name")+
		", e.epoch = LAST_INSERT_ID("+bumped("e.epoch", v.epoch)+")"+where)
	if err != nil {
		return 0, false, during("starting the term", schemaError(s.st.tbl, err))
	}
	if n, err := res.RowsAffected(); err != nil || n != 2 {
		return 0, false, nil
	}
	id, err := res.LastInsertId()
	if err == nil && uint64(id) < claimed {
		// The bump's value never comes back lower; a server or proxy
		// that drops it from the OK packet must not make a token of 0.
		err = fmt.Errorf("the server returned %d as the new epoch, below %d", id, claimed)
	}
	if err != nil {
		return 0, false, fmt.Errorf("election: starting the term: %w", err)
	}
	token, err = s.follow(ctx, q, claimed, uint64(id))
	return token, true, err
}

// openOn starts the term in one statement, the claim with the bump, on p:
// the deputy's last look at the leader (pinned.contend), age ago on the
// same session, instead of a read after the lock was won. It applies when
// p's term was a GetLock term leading, not asked to step down, and owed
// and carried no lock-delay, so that decide gave (0, nil); the claim
// (continued) then takes the record only if that term is still there,
// under GetLock, and either still leading, not asked to step down and
// renewed within its lease plus margin, or ended gracefully with its
// history row ended, and no delay is carried and no hand-over asked for
// (to anyone: a hand-over is not the path to make fast, and the check of
// its target's life is not cheap): a record on which decide gives (0, nil)
// again, and a read now would show the term acting until now. Otherwise,
// or if the claim could not read the history (not granted, missing,
// locked), it returns errRaced, and the caller reads (open), which does
// not need the history. The clock the token must reach (next) is p's,
// moved on by age.
//
// The last term's session had ended when the lock was won, just before
// the claim: the returned predecessor was last seen then, and read when
// the claim returned, so that its history ends at the claim (lastActed)
// and Observer.Failover counts the claim's round trip (not the server's
// noticing that session's end, which the deputy cannot see).
func (s termStart) openOn(ctx context.Context, q querier, p predecessor, age time.Duration) (uint64, predecessor, error) {
	if delay, err := s.decide(p); err != nil || delay > 0 || !p.exists || p.rec.Strategy != GetLock.String() || p.rec.State != stateLeading || p.rec.demoted {
		return 0, p, errRaced
	}
	p.rec.nowUS += age.Microseconds()
	p.rec.Renewed = p.now()
	claimed := p.next()
	v := s.values(p, claimed, 0)
	sent := time.Now()
	token, ok, err := s.claimBumped(ctx, q, v, claimed, s.continued(v))
	p.rec.nowUS += time.Since(sent).Microseconds()
	p.rec.read, p.rec.renewedBy = time.Now(), sent
	if conflict(err) || denied(err) || serverError(err, 1146, 1205) || err == nil && !ok {
		err = errRaced
	}
	return token, p, err
}

// continued is openOn's condition on the record as r: see there.
func (s termStart) continued(v claimValues) string {
	return " WHERE r.lock_name = " + v.lock + " AND r.epoch = " + v.token + " AND CAST(r.strategy AS BINARY) = CAST(" + literal(GetLock.String()) + " AS BINARY) AND (" +
		"CAST(r.state AS BINARY) = CAST(" + literal(stateLeading) + " AS BINARY) AND NOT (r.demote_epoch <=> r.epoch) AND " + ageMicros("r.renewed_at") + " <= r.lease_us" +
		" OR CAST(r.state AS BINARY) IN (" + literals(gracefulEnds) + ") AND EXISTS (SELECT 1 FROM `" + s.st.tbl.term + "` t WHERE t.lock_name = r.lock_name AND t.epoch = r.epoch AND t.ended_at IS NOT NULL))" +
		" AND (r.delay_until IS NULL OR r.delay_until <= UTC_TIMESTAMP(6)) AND r.handover_to IS NULL" + s.holding("r", v.session)
}

// claimValues is what a claim writes and what it compares the record
// with, as SQL: literals for one term start (values), the columns of a
// derived table for a batch of them (claimBatch).
type claimValues struct {
	lock, name, strategy, epoch, identity, host, pid, session, leaseUS, since, delayUntil, value string // written
	token, state, renewedUS, demoteUS                                                            string // as read; demoteUS -1 for none
}

// claimColumn is one of a claim's values and its name in a batch's
// derived table.
type claimColumn struct {
	name  string
	value *string
}

func (v *claimValues) columns() []claimColumn {
	return []claimColumn{{"lock_name", &v.lock}, {"name", &v.name}, {"strategy", &v.strategy}, {"epoch", &v.epoch}, {"identity", &v.identity},
		{"host", &v.host}, {"pid", &v.pid}, {"session", &v.session}, {"lease_us", &v.leaseUS}, {"since", &v.since}, {"delay_until", &v.delayUntil},
		{"value", &v.value}, {"token", &v.token}, {"state", &v.state}, {"renewed_us", &v.renewedUS}, {"demote_us", &v.demoteUS}}
}

// values is the claim of s after p at epoch claimed, with the lock-delay
// delay, as literals: the names, identity and lock with their columns'
// collations, which a batch's derived table needs.
//
// The term starts (since) when the claim is made, on the database clock,
// but never before anything the last term stamped (its start, its last
// renewal, its end), so that the history stays in order however that
// clock was stepped between the two. The lock-delay owed ends delay after
// that start (delay_until), which a reader translates to its own clock
// through the start (predecessor.delayLeft).
func (s termStart) values(p predecessor, claimed uint64, delay time.Duration) claimValues {
	host, _ := os.Hostname()
	_, strategy := s.st.settled()
	startUS := utcMicros("UTC_TIMESTAMP(6)")
	if p.exists {
		startUS = "GREATEST(" + startUS + ", " + literal(p.rec.Since.UnixMicro()) + ", " + literal(p.rec.Renewed.UnixMicro())
		if !p.rec.Ended.IsZero() {
			startUS += ", " + literal(p.rec.Ended.UnixMicro())
		}
		startUS += ")"
	}
	since, delayUntil, demoteUS := datetime(startUS), "NULL", int64(-1)
	if delay > 0 {
		delayUntil = datetime(startUS + " + " + literal(delay.Microseconds()))
	}
	if p.rec.demoteAt.Valid {
		demoteUS = p.rec.demoteAt.Int64
	}
	return claimValues{lock: lockLiteral(s.lock), name: binLiteral(s.st.name), strategy: literal(strategy.String()), epoch: literal(claimed),
		identity: binLiteral(s.st.cfg.Identity), host: literal(host), pid: literal(os.Getpid()), session: literal(s.session),
		leaseUS: literal((s.st.cfg.Lease + s.st.cfg.Margin).Microseconds()), since: since, delayUntil: delayUntil, value: binLiteral(s.st.proclaimed()),
		token: literal(p.rec.Token), state: literal(p.rec.State), renewedUS: literal(p.rec.Renewed.UnixMicro()), demoteUS: literal(demoteUS)}
}

// next is the token a term that follows p claims: above p's, and at least
// the server's clock at the read (see claim).
func (p predecessor) next() uint64 { return max(p.rec.Token+1, uint64(max(p.rec.nowUS, 0))) }

// bumped is the epoch column col bumped for a claim at claimed (SQL): by
// one, and to at least claimed.
func bumped(col, claimed string) string { return "GREATEST(" + col + " + 1, " + claimed + ")" }

// set is the claim's UPDATE of the record as r, joined to join. A bump
// added to it must depend on no column it assigns: a multi-table UPDATE
// may make its assignments in any order.
func (s termStart) set(v claimValues, join string) string {
	return "UPDATE `" + s.st.tbl.record + "` r " + join + " SET r.name = " + v.name + ", r.strategy = " + v.strategy + ", r.epoch = " + v.epoch +
		", r.state = " + literal(stateLeading) + ", r.holder = " + v.identity + ", r.host = " + v.host + ", r.pid = " + v.pid +
		", r.conn_id = " + v.session + ", r.lease_us = " + v.leaseUS + ", r.since = " + v.since + ", r.renewed_at = UTC_TIMESTAMP(6), " +
		"r.ended_at = NULL, r.demote_epoch = NULL, r.demote_at = NULL, r.handover_to = NULL, r.handover_until = NULL, r.delay_until = " + v.delayUntil + ", r.value = " + v.value + ", r.value_epoch = " + v.epoch
}

// unchanged is the claim's condition: the record as read, the term it
// names and every column its holder or an operator writes (a renewal, an
// end, a request to step down), no hand-over pending since, and, under
// GetLock, the lock still the claimant's session's. The state is compared
// as bytes, which needs no collation shared with the value's.
func (s termStart) unchanged(v claimValues) string {
	return " WHERE r.lock_name = " + v.lock + " AND r.epoch = " + v.token + " AND CAST(r.state AS BINARY) = CAST(" + v.state + " AS BINARY) AND " +
		utcMicros("r.renewed_at") + " = " + v.renewedUS + " AND COALESCE(" + utcMicros("r.demote_at") + ", -1) = " + v.demoteUS +
		" AND NOT (" + handingOver(s.st.tbl, "r", v.identity) + ")" + s.holding("r", v.session)
}

// starter opens the terms of a share's candidates (shared GetLock
// sessions, batched leases) that win at once in a few statements for all
// of them, through at most spareSessions pool sessions: the first
// candidate to get one opens every start queued by then (claimBatch), as a
// group commit does. A process whose session took a thousand locks in one
// poll starts those terms in a few round trips, not two thousand.
type starter struct {
	spare spare
	db    *sql.DB
	limit time.Duration // bounds a batch, as tryLimit bounds one start

	mu    sync.Mutex
	queue []*opening
}

// opening is one term start in a starter's queue, and its outcome.
type opening struct {
	s     termStart
	taken bool          // in a batch; guarded by the starter's mu
	alone bool          // to be opened alone (see claimBatch)
	done  chan struct{} // closed when the outcome is in

	since func() time.Time // what the lease counts from, read just before the start's read
	sent  time.Time        // since's answer
	token uint64
	delay time.Duration
	p     predecessor
	err   error
}

// startBatch and startBytes bound a batch, and so its statements' size,
// well below the smallest max_allowed_packet a server here starts with
// (4 MiB, MySQL 5.7): an election's row is a few hundred bytes, plus its
// name, identity and value, which may be long.
const (
	startBatch = 1000
	startBytes = 1 << 20
)

// open opens s's term as termStart.open does, in a batch with the others
// queued, and returns its outcome (an empty one with an error when ctx
// ended before a batch took it). A start taken into a batch is waited
// for, even after ctx ends: the batch is bounded by the starter's limit,
// and a term it started is the caller's to end. One the batch leaves alone
// is opened alone, a few at a time, as before batches: a thousand first
// terms must not wait for each other.
//
// The term's lease counts from since, taken just before the read the term
// follows (opening.sent), or from that moment if since is nil.
func (b *starter) open(ctx context.Context, s termStart, since func() time.Time) (*opening, error) {
	if since == nil {
		since = time.Now
	}
	o := &opening{s: s, since: since, done: make(chan struct{})}
	b.mu.Lock()
	b.queue = append(b.queue, o)
	b.mu.Unlock()
	err := b.spare.run(ctx, func() error {
		b.flush(ctx, o)
		return nil
	})
	if err != nil {
		b.mu.Lock()
		taken := o.taken
		if !taken {
			b.queue = slices.DeleteFunc(b.queue, func(q *opening) bool { return q == o })
		}
		b.mu.Unlock()
		if !taken {
			return o, err
		}
	}
	<-o.done
	if o.alone {
		ctx, cancel := context.WithTimeout(ctx, b.limit)
		defer cancel()
		if err := b.spare.run(ctx, func() error {
			o.sent = o.since()
			o.err = onConn(ctx, b.db, func(q querier) (err error) {
				o.token, o.delay, o.p, err = o.s.open(ctx, q)
				return err
			})
			return nil
		}); err != nil {
			return o, err
		}
	}
	return o, o.err
}

// flush opens the queued starts in batches until o's has been taken into
// one. A batch holds one start of an election at most (two candidates of
// a process may wait in one): another waits for the next. Its statements
// run on one session, which sees its own claims on a cluster too; they
// keep ctx's values, not its end.
func (b *starter) flush(ctx context.Context, o *opening) {
	for {
		b.mu.Lock()
		if o.taken {
			b.mu.Unlock()
			return
		}
		var batch []*opening
		in, size := map[string]bool{}, 0
		for _, q := range b.queue {
			n := 300 + 2*(len(q.s.st.name)+len(q.s.st.cfg.Identity)+len(q.s.st.proclaimed())) // hex
			if in[q.s.lock] || len(batch) == startBatch || len(batch) > 0 && size+n > startBytes {
				continue
			}
			q.taken, in[q.s.lock], size = true, true, size+n
			batch = append(batch, q)
		}
		b.queue = slices.DeleteFunc(b.queue, func(q *opening) bool { return q.taken })
		b.mu.Unlock()
		// In one order, so that two processes' batches lock the rows they
		// share in one order.
		slices.SortFunc(batch, func(x, y *opening) int { return strings.Compare(x.s.lock, y.s.lock) })
		bctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), b.limit)
		conn, err := b.db.Conn(bctx)
		var refused error // by a read-only server: the session is dropped (release)
		for try := 0; len(batch) > 0; try++ {
			if err != nil {
				for _, q := range batch {
					q.err = during("reading the record", refusal(err))
					close(q.done)
				}
				break
			}
			batch = claimBatch(bctx, conn, batch, try, &refused)
		}
		if conn != nil {
			release(conn, refused)
		}
		cancel()
	}
}

// claimBatch opens the starts of batch, of distinct elections that share
// the tables, as open does each, in three statements for all of them: a
// read of their records (read's, joined to the batch), their claims, each
// a compare-and-set on its read that bumps its epoch row (claim's, in one
// multi-table UPDATE joined to the claims), and a read of the records and
// epoch rows, which tells whose claim landed and its token. It returns the
// starts whose claims lost a race on the first try, to be tried again; on
// the second they are ErrHeld, as open's are. Every other start is done
// when it returns, or left to be opened alone: one whose election has no
// record yet, or no epoch row, and every claim of a batch whose UPDATE
// lost to another transaction or waited too long for a row (a leader
// stopped inside a fenced transaction holds its epoch row): one election's
// wait or conflict must not become every other's. A start the server
// refused as read-only is noted in refused, before its caller may see it.
func claimBatch(ctx context.Context, conn *sql.Conn, batch []*opening, try int, refused *error) (raced []*opening) {
	defer func() {
		again := map[*opening]bool{}
		for _, o := range raced {
			again[o] = true
		}
		for _, o := range batch {
			if readOnly(o.err) {
				*refused = o.err
			}
			if !again[o] {
				close(o.done)
			}
		}
	}()
	tbl := batch[0].s.st.tbl
	byLock := make(map[string]*opening, len(batch))
	names := make([][]string, len(batch))
	for i, o := range batch {
		byLock[o.s.lock] = o
		names[i] = []string{lockLiteral(o.s.lock), binLiteral(o.s.st.cfg.Identity)}
	}
	fail := func(starts []*opening, err error) {
		for _, o := range starts {
			o.err = err
		}
	}
	// The read, as read's; the batch's identities decide whether a
	// hand-over is pending to another candidate.
	for _, o := range batch {
		o.sent = o.since()
	}
	type read struct {
		p           predecessor
		lock        string
		epochExists bool
	}
	sent := time.Now()
	reads, err := collect(ctx, conn, tbl, "record", "SELECT "+predecessorColumns(tbl, "r.lock_name", "x.identity")+", x.lock_name, e.lock_name IS NOT NULL "+
		"FROM "+derived([]string{"lock_name", "identity"}, names)+" x JOIN `"+tbl.record+"` r ON r.lock_name = x.lock_name "+
		"LEFT JOIN `"+tbl.epoch+"` e ON e.lock_name = r.lock_name", func(rows *sql.Rows) (r read, err error) {
		r.p.exists = true
		return r, rows.Scan(append(r.p.fields(), &r.lock, &r.epochExists)...)
	})
	if err != nil {
		fail(batch, err)
		return nil
	}
	recv := time.Now()
	found := map[*opening]bool{}
	for _, r := range reads {
		o := byLock[r.lock]
		o.s.st.vouch(&r.p.rec, reading{r.p.rec.nowUS, sent, recv})
		o.p, found[o] = r.p, r.epochExists
	}
	var (
		claims  []*opening
		claimed = map[*opening]uint64{}
		rows    [][]string
	)
	for _, o := range batch {
		if !found[o] {
			o.alone = true
			continue
		}
		if o.delay, o.err = o.s.decide(o.p); o.err != nil {
			continue
		}
		claimed[o] = o.p.next()
		v, row := o.s.values(o.p, claimed[o], o.delay), []string(nil)
		for _, c := range v.columns() {
			row = append(row, *c.value)
		}
		claims, rows = append(claims, o), append(rows, row)
	}
	if len(claims) == 0 {
		return nil
	}
	var (
		x    claimValues
		cols []string
	)
	for _, c := range x.columns() {
		*c.value, cols = "x."+c.name, append(cols, c.name)
	}
	s := claims[0].s
	_, err = conn.ExecContext(ctx, s.set(x, "JOIN `"+tbl.epoch+"` e ON e.lock_name = r.lock_name JOIN "+derived(cols, rows)+" x ON x.lock_name = r.lock_name")+
		", e.epoch = "+bumped("e.epoch", x.epoch)+s.unchanged(x))
	if conflict(err) || serverError(err, 1205) { // lost to another transaction, or a lock wait timed out: nothing was claimed
		for _, o := range claims {
			o.alone = true
		}
		return nil
	}
	if err != nil {
		fail(claims, during("starting the term", schemaError(tbl, err)))
		return nil
	}
	locks := make([]string, len(claims))
	for i, o := range claims {
		locks[i] = o.s.lock
	}
	type landed struct {
		lock                    string
		session, claimed, token uint64
	}
	landings, err := collect(ctx, conn, tbl, "record", "SELECT r.lock_name, r.conn_id, r.epoch, e.epoch FROM `"+tbl.record+"` r "+
		"JOIN `"+tbl.epoch+"` e ON e.lock_name = r.lock_name WHERE r.lock_name IN ("+literals(locks)+")", func(rows *sql.Rows) (l landed, err error) {
		return l, rows.Scan(&l.lock, &l.session, &l.claimed, &l.token)
	})
	if err != nil {
		// The claims may have landed: give them up, as a start whose bump
		// failed does, so that no one waits for them to go stale.
		for _, o := range claims {
			o.s.unclaim(ctx, conn, claimed[o])
		}
		fail(claims, err)
		return nil
	}
	got := map[string]landed{}
	for _, l := range landings {
		got[l.lock] = l
	}
	var lost []*opening
	for _, o := range claims {
		l := got[o.s.lock]
		switch {
		case l.session != o.s.session || l.claimed != claimed[o]:
			lost = append(lost, o)
			continue
		case l.token < claimed[o]:
			o.err = fmt.Errorf("election: starting the term: the epoch is %d, below the claimed %d", l.token, claimed[o])
			continue
		}
		if o.token, o.err = o.s.follow(ctx, conn, claimed[o], l.token); errors.Is(o.err, errRaced) {
			o.err = nil
			lost = append(lost, o)
		}
	}
	if len(lost) == 0 {
		return nil
	}
	if try == 0 {
		return lost
	}
	fail(lost, ErrHeld)
	return nil
}

// derived is a derived table of rows (SQL values) with columns cols, in
// a syntax every server reads (a table value constructor's differs between
// MariaDB and MySQL). Joined to a multi-table UPDATE as claimBatch does, it
// runs on MariaDB, Galera and TiDB here; MySQL 8 allows it by its manual
// ("UPDATE Statement": a multiple-table UPDATE may read a derived table
// that does not read the updated tables; not tested here).
func derived(cols []string, rows [][]string) string {
	var b strings.Builder
	b.WriteString("(")
	for i, row := range rows {
		if i > 0 {
			b.WriteString(" UNION ALL ")
		}
		b.WriteString("SELECT ")
		for j, v := range row {
			if j > 0 {
				b.WriteString(", ")
			}
			b.WriteString(v)
			if i == 0 {
				b.WriteString(" AS " + cols[j])
			}
		}
	}
	b.WriteString(")")
	return b.String()
}

// lockLiteral and binLiteral are a lock name, and an identity or an
// election's name, with the character sets and collations of their columns
// in the tables: a derived table's column is compared to a table's as an
// implicit collation, where a literal is coercible, and two implicit
// collations that differ are an error.
func lockLiteral(lock string) string { return collated(lock, "ascii", "ascii_bin") }

func binLiteral(s string) string { return collated(s, "utf8mb4", "utf8mb4_bin") }

func collated(s, charset, collation string) string {
	if plain(s) {
		return "_" + charset + "'" + s + "' COLLATE " + collation
	}
	return "_" + charset + " X'" + hex.EncodeToString([]byte(s)) + "' COLLATE " + collation
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
		"SELECT r.lock_name, r.epoch FROM `"+s.st.tbl.record+"` r WHERE r.lock_name = ? AND r.epoch = ? AND r.conn_id = ?"+s.holding("r", literal(s.session))+" "+
		"ON DUPLICATE KEY UPDATE epoch = LAST_INSERT_ID("+bumped("`"+s.st.tbl.epoch+"`.epoch", "?")+")", s.lock, claimed, s.session, claimed))
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
	// The term started when its claim set the record's since, on the
	// database clock: read it, without a lock, while the record still
	// names this term. A measure from the claim's return instead would be
	// late by however long this statement waited to run, and could follow
	// the leader's first write (TestHistoryStartIsTheClaim, under load).
	// A record that names an earlier term, or none, is not the one the
	// claim wrote: the pool reaches another server than the term's (a
	// failover of the database, which the term learns of at its next
	// keepalive), whose history this term must not close.
	var (
		since  sql.NullInt64
		epoch  sql.Null[uint64]
		server string
	)
	// On a multi-primary cluster the session may reach a member that has
	// not applied the claim yet: it is read again until it has, within the
	// history's bound.
	for cluster, _ := s.st.settled(); ; {
		if err := q.QueryRowContext(ctx, text("SELECT "+utcMicros("since")+", epoch, "+serverName+" FROM `"+s.st.tbl.record+"` WHERE lock_name = ?", s.lock)).
			Scan(&since, &epoch, &server); err != nil && !errors.Is(err, sql.ErrNoRows) {
			return during("writing the history", schemaError(s.st.tbl, err))
		}
		if epoch.Valid && epoch.V >= token {
			break
		}
		if !cluster.certifies() || ctx.Err() != nil {
			return fmt.Errorf("election: the history of term %d was not written: the server the pool reaches, %s, has not granted that term "+
				"(its record names term %d, 0: none): was the database failed over?", token, server, epoch.V)
		}
		select {
		case <-ctx.Done():
		case <-time.After(10 * time.Millisecond):
		}
	}
	startUS, startArg := "?", since.Int64
	if epoch.V > token {
		// A later term has the record by now: the claim's return, measured
		// back from now, and never before anything the last term stamped,
		// as the claim's since is not (values).
		startUS, startArg = utcMicros(timeAgo), agoMicros(started)
		if p.exists {
			startUS = "GREATEST(" + startUS + ", " + literal(max(p.rec.Since.UnixMicro(), p.rec.Renewed.UnixMicro(), p.rec.Ended.UnixMicro())) + ")"
		}
	}
	if p.exists {
		// Ended as the record said, if it had recorded its end there; and
		// in any case no earlier than it was last seen alive, and no later
		// than this term began, whatever the database clock did meanwhile.
		var reason any
		if p.rec.State != stateLeading {
			reason = p.rec.State
		}
		ended := datetime("LEAST(GREATEST(?, ?), " + startUS + ")")
		endedArgs := []any{p.rec.lastActed(p.now()).UnixMicro(), max(p.rec.Since.UnixMicro(), p.rec.Renewed.UnixMicro()), startArg}
		if _, err := q.ExecContext(ctx, text("INSERT IGNORE INTO `"+s.st.tbl.term+"` (lock_name, epoch, holder, host, pid, started_at, ended_at, reason) "+
			"VALUES (?, ?, ?, ?, ?, "+atMicros+", IF(? IS NULL, NULL, "+ended+"), ?)",
			slices.Concat([]any{s.lock, p.rec.Token, p.rec.Identity, p.rec.Host, p.rec.PID, p.rec.Since.UnixMicro(), reason}, endedArgs, []any{reason})...)); err != nil {
			return during("writing the history", schemaError(s.st.tbl, err))
		}
		if _, err := q.ExecContext(ctx, text("UPDATE `"+s.st.tbl.term+"` SET ended_at = IF(epoch = ?, "+ended+", "+atMicros+"), "+
			"reason = IF(epoch = ?, COALESCE(?, ?), ?) WHERE lock_name = ? AND epoch < ? AND ended_at IS NULL",
			slices.Concat([]any{p.rec.Token}, endedArgs, []any{p.rec.Since.UnixMicro(), p.rec.Token, reason, stateLost, stateLost, s.lock, token})...)); err != nil {
			return during("closing the last term", schemaError(s.st.tbl, err))
		}
	}
	// Not before the last term's end as its row has it: the last leader
	// may have written its own since this term's claim (a resignation
	// releases first), on a clock stepped back meanwhile.
	host, _ := os.Hostname()
	if _, err := q.ExecContext(ctx, text("INSERT IGNORE INTO `"+s.st.tbl.term+"` (lock_name, epoch, holder, host, pid, server, started_at) "+
		"SELECT ?, ?, ?, ?, ?, "+serverName+", "+datetime("GREATEST("+startUS+", COALESCE(MAX("+utcMicros("t.ended_at")+"), "+startUS+"))")+
		" FROM `"+s.st.tbl.term+"` t WHERE t.lock_name = ? AND t.epoch = ?",
		s.lock, token, s.st.cfg.Identity, host, os.Getpid(), startArg, startArg, s.lock, p.rec.Token)); err != nil {
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

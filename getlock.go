package election

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/sqlelect/election/internal/failpoint"
)

// getLock is the GetLock strategy: each candidate pins a session of its
// own and queues for the election's lock; the server hands the lock to the
// next waiter the moment the holder's session ends.
//
// Waiting is silent: one waiting candidate, the deputy (the holder of the
// deputy lock), waits for the election's lock and reads the record in
// between, to kill a leader that hangs or ignores a demotion: each wait
// lasts until C after the leader it read could first be overdue (see watchFor);
// every other candidate blocks on the deputy lock and becomes the deputy
// when the server grants it. A candidate's liveness is its candidate lock,
// which its session holds (see candidateLock). See docs/protocol.md,
// "Campaign".
type getLock struct {
	st     *store
	server platform
	log    *slog.Logger
	limit  readLimit
}

// queueWait bounds one wait of a candidate queued behind the deputy, the
// only statement it sends while it waits: a thousand queued candidates cost
// less than a statement per second. The wait needs no bound to hand over:
// the deputy's end (a crash, wait_timeout, a kill, or a win) grants the
// deputy lock at once to the next in the queue, and the server ends the wait
// of a client that closed its connection. A shorter DSN readTimeout makes
// the waits shorter (see readLimit); the driver's TCP keepalives keep the
// quiet connection open through NATs and load balancers.
const queueWait = time.Hour

// readLimit learns a DSN's readTimeout. The driver ends a statement that
// runs longer as if the connection were lost ("invalid connection"), and
// drops the session with it; a wait in GET_LOCK is such a statement. A
// *sql.DB does not show its DSN, so the limit is learnt from the waits it
// ends: two in a row that end so after the same time were cut by it (a
// fault does not repeat so exactly, and a wait that outlasts the first
// one clears it). From then on waits last at most half that: the candidate
// works, at the price of a statement per step where it would send one an
// hour.
type readLimit struct {
	mu   sync.Mutex
	last time.Duration // how long the last wait ended so had run, if no longer wait followed
	step time.Duration // the longest wait, once learnt
}

// fit returns wait, shortened to fit under the learnt readTimeout.
func (l *readLimit) fit(wait time.Duration) time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.step > 0 {
		return min(wait, l.step)
	}
	return wait
}

// ended notes a wait that ran for ran, cut by the driver or not; it
// returns the new step when this cut taught it, else 0.
func (l *readLimit) ended(ran time.Duration, cut bool) time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	slack := 100*time.Millisecond + l.last/10 // scheduling, and the round trip
	switch {
	case !cut:
		if ran > l.last+slack {
			l.last = 0 // no readTimeout made the last cut
		}
		return 0
	case l.last == 0 || ran < l.last-slack || ran > l.last+slack:
		l.last = ran
		return 0
	}
	step := min(ran, l.last) / 2
	l.last = 0
	if l.step > 0 && l.step <= step {
		return 0
	}
	l.step = step
	return step
}

// pinned is one candidate's own server session. Lock, keepalive and
// ownership statements run only here: through the pool, database/sql would
// retry a dropped session's statement on a fresh session that holds nothing.
type pinned struct {
	g      *getLock
	conn   *sql.Conn
	id     uint64 // CONNECTION_ID()
	lock   string
	deputy bool          // the session holds the deputy lock
	queued bool          // the session has queued for the deputy lock
	watch  time.Duration // the deputy's next wait for the election's lock
	// looked is the deputy's last look at the leader, taken at lookedAt
	// (zero: none to start on), for a term start in one statement
	// (termStart.claimOnLook).
	looked   predecessor
	lookedAt time.Time
	seen     leaderSeen
	token    uint64
	row      presence
	share    *sessionShare // counts the session as its own, once the term began
}

// identityInUse is the error of a candidate whose candidate lock another
// session holds, naming the statement that shows which.
func identityInUse(lock, identity, election string) error {
	return fmt.Errorf("%w: another session (IS_USED_LOCK(%s)) campaigns as %q in election %q; give every candidate its own Config.Identity",
		ErrIdentityInUse, literal(candidateLock(lock, identity)), identity, election)
}

// deputyLock is the lock whose holder watches the leader for the waiters.
func deputyLock(lock string) string { return lock + "/deputy" }

// acquire waits for the lock and opens a term, on a session of the
// candidate's own if it insists (Config.OwnSession) or, unless it is a
// shard's, while the pool has fewer than ownSessions of them, else on a
// shared session (shared.go).
func (g *getLock) acquire(ctx context.Context, lock string, try bool) (won, error) {
	sh := shareOf(g.st)
	if !sh.takeOwn(g.st.cfg.OwnSession, g.st.shard, g.log) {
		return sh.acquireShared(ctx, g, lock, try)
	}
	w, err := g.acquireOwn(ctx, lock, try)
	if err != nil {
		sh.dropOwn()
		return w, err
	}
	w.h.(*pinned).share = sh
	return w, nil
}

// acquireOwn pins a session, waits for the lock and opens a term on it.
func (g *getLock) acquireOwn(ctx context.Context, lock string, try bool) (won, error) {
	s, err := g.pin(ctx, lock)
	if err != nil {
		return won{}, err
	}
	for {
		got, err := s.wait(ctx, try)
		switch {
		case err == nil && !got && try:
			err = ErrHeld
		case err == nil && !got:
			if err = s.contend(ctx); err == nil {
				continue
			}
		case err == nil:
			failpoint.Hit(ctx, failpoint.Locked)
			sent := time.Now()
			var (
				delay time.Duration
				p     predecessor
			)
			if delay, p, err = s.startTerm(ctx); err == nil {
				return won{h: s, token: s.token, sent: sent, delay: delay, p: p}, nil
			}
			if errors.Is(err, errYield) {
				if try {
					err = ErrHeld // dropping the session gives the lock back
				} else if err = s.yield(ctx, err); err == nil {
					continue
				}
			}
		}
		s.close()
		return won{}, err
	}
}

// pin takes a session from the pool for good and sets it up: the session's
// timeouts, its id, and the candidate lock, which it holds until it ends.
// Every candidate's session, not only the leader's, gets the short
// wait_timeout: a waiter cut off from the server is still granted a lock
// when its turn comes, and only wait_timeout frees it. Lock waits are
// bounded at 2W, so that a session stuck behind a row or metadata lock
// frees itself even where hang detection may not kill it.
func (g *getLock) pin(ctx context.Context, lock string) (*pinned, error) {
	// A connection whose handshake went into a network partition hangs
	// until the server's connect_timeout; a candidate stuck there cannot
	// take over from anyone, so it gives up after Lease+Margin and retries.
	cfg := g.st.cfg
	ctx, cancel := context.WithTimeout(ctx, cfg.Lease+cfg.Margin)
	defer cancel()
	conn, err := g.st.db.Conn(ctx)
	if err != nil {
		return nil, during("opening a session", refusal(err))
	}
	s := &pinned{g: g, conn: conn, lock: lock, row: presence{st: g.st, lock: lock, session: SessionOwn}}
	// A queued candidate waits up to queueWait in one statement, which no
	// statement time limit may cut (see platform.sessionSetup).
	if err := setUpSession(ctx, conn, g.server, cfg.waitTimeout()); err != nil {
		s.close()
		return nil, during("setting up the session", refusal(err))
	}
	// The candidate lock of this identity may still be held for a moment
	// by this candidate's last session, which is closing (or, cut off, is
	// dropped within W): wait for it within the lease.
	id, got, err := pinSession(ctx, conn, candidateLock(lock, cfg.Identity), g.server.lockWait(g.limit.fit(cfg.Lease)))
	if err != nil {
		s.close()
		return nil, during("setting up the session", refusal(err))
	}
	s.id = id
	if got.Int64 != 1 {
		s.close()
		return nil, identityInUse(lock, cfg.Identity, g.st.name)
	}
	if err := s.row.join(ctx, conn); err != nil {
		s.close()
		return nil, err
	}
	return s, nil
}

// wait waits for the election's lock and reports whether it is held: with
// try, not at all; as the deputy, up to its watch (C at first, then see
// watchFor); otherwise it queues for the deputy lock, up to queueWait, and
// once granted it waits as the deputy.
func (s *pinned) wait(ctx context.Context, try bool) (bool, error) {
	if try {
		return s.getLock(ctx, s.lock, 0)
	}
	if !s.deputy {
		if !s.queued {
			s.queued = true
			s.g.log.Debug("waiting: queued for the deputy's place, silent until the server grants it")
		}
		got, err := s.getLock(ctx, deputyLock(s.lock), queueWait)
		if err != nil || !got {
			return false, err
		}
		s.deputy, s.watch = true, s.g.st.cfg.CheckInterval
		s.g.log.Debug("waiting: became the deputy, which watches the leader", "check_interval", s.g.st.cfg.CheckInterval.String())
	}
	return s.getLock(ctx, s.lock, s.watch)
}

// getLock runs GET_LOCK(name, wait) on the session, the wait shortened to
// fit under a learnt readTimeout. GET_LOCK returns 1 when acquired, 0 on
// timeout, NULL on error (a killed query).
//
// A timed wait the server has not answered W after its end went to a
// server that stopped or was cut off (a primary paused or partitioned in an
// unplanned failover): the session is dropped, and the candidate campaigns
// again through the pool, which may reach a promoted replica. A queued
// waiter's hour is left alone: the deputy's bounded wait covers the
// election. (The server times its waits on its wall clock: a step of it
// back by more than W cuts a wait, and costs the deputy its place, never
// more.)
func (s *pinned) getLock(ctx context.Context, name string, wait time.Duration) (bool, error) {
	wait = s.g.limit.fit(wait)
	waitCtx := ctx
	if wait > 0 && wait < queueWait {
		var cancel context.CancelFunc
		waitCtx, cancel = context.WithTimeout(ctx, wait+time.Duration(s.g.st.cfg.waitTimeout())*time.Second)
		defer cancel()
	}
	began := time.Now()
	got, err := waitLock(waitCtx, s.conn, name, s.g.server.lockWait(wait))
	ran := time.Since(began)
	cut := errors.Is(err, mysql.ErrInvalidConn)
	if wait > 0 && ctx.Err() == nil && (err == nil || cut) {
		if step := s.g.limit.ended(ran, cut); step > 0 {
			s.g.log.Warn("the DSN's readTimeout ends lock waits: waiting in steps that fit under it, a statement each; "+
				"to wait silently, give the Elector a *sql.DB whose DSN has no readTimeout, or one above "+queueWait.String(),
				"cut_after", ran.Round(time.Millisecond).String(), "step", step.Round(time.Millisecond).String())
		}
	}
	switch {
	case err != nil && ctx.Err() != nil:
		return false, ctx.Err()
	case err != nil && waitCtx.Err() != nil:
		return false, fmt.Errorf("%w: the server did not answer a wait of %v for a lock within %v after its end: it stopped or was cut off; the session is dropped",
			ErrSessionLost, wait, ran.Round(time.Millisecond)-wait)
	case cut && wait > 0:
		return false, fmt.Errorf("%w: waiting up to %v for a lock, the connection failed after %v, as it does when a DSN readTimeout is shorter than the wait (two such cuts in a row, and the waits are made to fit under it): %w",
			ErrSessionLost, wait, ran.Round(time.Millisecond), err)
	case err != nil:
		return false, fmt.Errorf("%w: waiting for the lock: %w", ErrSessionLost, err)
	case !got.Valid:
		return false, fmt.Errorf("%w: GET_LOCK returned NULL (was the session killed?)", ErrSessionLost)
	}
	return got.Int64 == 1, nil
}

// contend runs between two waits of the deputy: it kills a holder that is
// stuck, or that ignored a demotion. Other waiters send nothing.
func (s *pinned) contend(ctx context.Context) error {
	if !s.deputy {
		return nil
	}
	st := s.g.st
	p, err := termStart{st, s.lock, s.id, 0}.read(ctx, s.conn)
	s.watch, s.lookedAt = st.cfg.CheckInterval, time.Time{}
	if err != nil || !p.exists {
		return err
	}
	rec := p.rec
	if rec.Leading() {
		s.seen.see(s.g.log, rec.Identity, rec.Token)
	}
	why := rec.overdue()
	if why == "" {
		s.watch = watchFor(rec, st.cfg)
		s.looked, s.lookedAt = p, time.Now()
		return nil
	}
	s.g.log.Debug("the leader is overdue; killing its session", "reason", why, "leader", rec.Identity, "token", rec.Token,
		"renewed_ago", rec.renewalAge().String(), "expiry", rec.Expiry.String())
	err = st.kill(ctx, s.conn, s.lock, rec, why, s.g.log)
	if errors.Is(err, ErrKillDenied) {
		// Never take over without the kill: keep waiting, and say why.
		s.g.log.Error("cannot end a stuck leader's session", "err", err, "holder", rec.Identity, "conn_id", rec.ConnID)
		return nil
	}
	return err
}

// watchFor is how long the deputy may wait for the lock after reading rec,
// in which nobody is overdue: until one CheckInterval after the leader rec
// names could first be (Record.overdue), when a deputy that read every
// CheckInterval would have killed it at the latest, and at least
// CheckInterval. Not at that first moment: a paused leader's idle session
// is dropped by wait_timeout (W = ⌈L + S⌉) about then, and should be, as
// before, rather than killed as hung. A later term renews after rec's, so
// with this candidate's lease and margin it cannot be overdue sooner; one
// with shorter ones may be killed that much later, never sooner. With no
// leader holding the lock as recorded (a winner between its GET_LOCK and
// its claim), CheckInterval.
func watchFor(rec Record, cfg Config) time.Duration {
	if rec.State != stateLeading || rec.Strategy != GetLock.String() || !rec.holds() {
		return cfg.CheckInterval
	}
	until := min(rec.Expiry-rec.renewalAge(), cfg.Lease+cfg.Margin)
	if rec.demoted {
		until = min(until, rec.Expiry-rec.demotionAge())
	}
	return max(until, 0) + cfg.CheckInterval
}

// startTerm opens the term on the pinned session: in one statement on the
// deputy's last look at the leader where that still holds (see
// termStart.claimOnLook), else in two; see termStart.readAndClaim. GET_LOCK is held, so
// the election is always free to take.
func (s *pinned) startTerm(ctx context.Context) (time.Duration, predecessor, error) {
	// Bounded as a lease's try is: the lock is won, but a start sent into a
	// network partition would otherwise wait for the caller's context.
	ctx, cancel := context.WithTimeout(ctx, s.g.st.cfg.tryLimit())
	defer cancel()
	start := termStart{s.g.st, s.lock, s.id, 0}
	if looked := s.lookedAt; !looked.IsZero() {
		s.lookedAt = time.Time{}
		token, p, err := start.claimOnLook(ctx, s.conn, s.looked, time.Since(looked))
		if err == nil {
			s.token = token
			return 0, p, nil
		}
		if !errors.Is(err, errRaced) {
			return 0, p, err
		}
	}
	token, delay, p, err := start.readAndClaim(ctx, s.conn)
	if err != nil {
		return 0, p, err
	}
	s.token = token
	return delay, p, nil
}

// yield gives the lock and the deputy's place back without starting a
// term (why: errYield's cause), and waits one check interval before it
// queues again, so that the candidate it yields to, queued behind it,
// becomes the deputy and wins next.
func (s *pinned) yield(ctx context.Context, why error) error {
	if err := releaseLocks(ctx, s.conn, s.lock, deputyLock(s.lock)); err != nil {
		return fmt.Errorf("%w: yielding: %w", ErrSessionLost, err)
	}
	s.deputy = false
	s.g.log.Info("gave the lock back", "why", why)
	select {
	case <-time.After(s.g.st.cfg.CheckInterval):
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// begin is what the term does once it has begun, before its first
// keepalive: it hands the deputy's place to the next waiter (no waiter
// watches the leader until then), and writes the term's history. The
// history goes through the pool: a write cut off by its deadline must not
// take the pinned session (and the lock) with it.
func (s *pinned) begin(ctx context.Context, started time.Time, p predecessor) error {
	if s.deputy {
		if err := releaseLocks(ctx, s.conn, deputyLock(s.lock)); err != nil {
			return fmt.Errorf("election: leaving the deputy's place: %w", err)
		}
		s.deputy = false
	}
	return termStart{s.g.st, s.lock, s.id, 0}.writeHistory(ctx, s.g.st.db, s.token, p, started)
}

// renew stamps the record and confirms that this session still holds the
// lock and has not been asked to step down, all on the pinned session.
//
// One statement while all is well: the renewal only matches if this
// session holds the lock (IS_USED_LOCK) and the record names this term
// with no demotion pending. Only when it matches nothing does a read tell
// why.
func (s *pinned) renew(ctx context.Context, _ <-chan struct{}) error {
	st := s.g.st
	renewed, err := st.renew(ctx, s.conn, s.lock, s.token, s.id)
	if err != nil {
		return fmt.Errorf("%w: keepalive: %w", ErrSessionLost, err)
	}
	if renewed {
		return nil
	}
	m, err := st.renewalMissed(ctx, s.conn, s.lock, s.token, s.id)
	if err != nil {
		return fmt.Errorf("%w: keepalive: %w", ErrSessionLost, err)
	}
	switch {
	case !m.owner.Valid || uint64(m.owner.Int64) != s.id:
		return fmt.Errorf("%w: IS_USED_LOCK is %v, this session is %d", ErrLockLost, m.owner.Int64, s.id)
	case !m.ours:
		return fmt.Errorf("%w: the record names another term", ErrLockLost)
	case m.demoted:
		return demotion(m.handTo)
	}
	return fmt.Errorf("%w: the keepalive matched no record", ErrLockLost)
}

// release records why the term ended and frees the lock for the next
// candidate; the session is dropped afterwards all the same. An end the
// leader was asked for is recorded first: the record shows the request,
// and the next term, reading it, would owe a lock-delay unless the end
// reads as graceful there. A resignation frees the lock first, so that the
// next term starts a round trip sooner: nothing was asked of this one, so
// its record owes the next term nothing either way (a request made in the
// instant before, not yet seen, may cost a lock-delay, never an overlap),
// and its end overrides the next term's "lost" in the history.
// The release takes the end's moment on the database clock, before it
// frees the lock: written after, the end must still precede the next
// term's start in the history, however long its statement waited to run.
// A resignation whose release fails still records its end, through the
// pool; the dropped session frees the lock.
func (s *pinned) release(ctx context.Context, end ending) error {
	if end.why == stateResigned {
		released, err := s.releaseLock(ctx, end)
		if err != nil {
			return errors.Join(err, s.lost(ctx, end))
		}
		return s.g.st.endTerm(ctx, s.conn, s.lock, s.token, released)
	}
	if err := s.g.st.endTerm(ctx, s.conn, s.lock, s.token, end); err != nil {
		return err
	}
	_, err := s.releaseLock(ctx, end)
	return err
}

// releaseLock frees the election's lock, and returns end with its moment
// taken on the database clock by the same statement, before the release
// (releaseAt).
func (s *pinned) releaseLock(ctx context.Context, end ending) (ending, error) {
	us, released, err := releaseAt(ctx, s.conn, s.lock, end.at)
	if err != nil {
		return end, fmt.Errorf("RELEASE_LOCK: %w", err)
	}
	if !released {
		return end, errors.New("RELEASE_LOCK: this session did not hold the lock")
	}
	end.serverUS = us
	return end, nil
}

// lost records, through the pool, why a term ended that the session could
// not end: the session may be gone, the pool is not.
func (s *pinned) lost(ctx context.Context, end ending) error {
	return s.g.st.endTerm(ctx, s.g.st.db, s.lock, s.token, end)
}

// close drops the session for sure (see drop): in the pool it would still
// hold the lock (GET_LOCK is re-entrant there) and the short wait_timeout.
func (s *pinned) close() {
	drop(s.conn)
	if s.share != nil {
		s.share.dropOwn()
	}
}

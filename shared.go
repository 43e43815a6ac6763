package election

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"slices"
	"sync"
	"time"

	"github.com/go-sql-driver/mysql"
)

// A process in many elections shares sessions. The first ownSessions
// GetLock candidates on one *sql.DB, and those configured with
// OwnSession, each pin a session of their own and block in GET_LOCK
// (getlock.go), so their elections fail over in milliseconds; every other
// one joins a shared session, which holds the
// candidate locks and the election locks of all its candidates: it tries
// the locks of all its waiting candidates, and reads their records to kill
// a stuck leader, in one statement per CheckInterval, and renews all the
// terms it holds in one statement per Interval. A shared session holds at
// most one candidate of an election (GET_LOCK is re-entrant within a
// session), so a process with k candidates of one election opens k of
// them. When a shared session ends, every term on it ends and every
// candidate on it campaigns again: see docs/protocol.md, "Shared sessions".
const ownSessions = 4

// spareSessions bounds the pool sessions that the candidates on a share's
// sessions use at once, for what needs no lock of theirs: writing their
// rows and the history, and, through as many more, starting their terms,
// so that the terms of thousands of elections won at once never wait
// behind the history of the first ones to begin. A process that joins or
// wins thousands of elections at once opens no more than twice this.
const spareSessions = 4

// spare bounds the pool sessions that a share's candidates use at once.
type spare chan struct{}

func newSpare() spare { return make(spare, spareSessions) }

// run runs f on the pool while fewer than spareSessions others do.
func (sp spare) run(ctx context.Context, f func() error) error {
	select {
	case sp <- struct{}{}:
		defer func() { <-sp }()
	case <-ctx.Done():
		return ctx.Err()
	}
	return f()
}

// shareKey is what candidates that may share a session have in common:
// the pool, the tables, and the timing, which sets the session's
// wait_timeout and the pace of its statements.
type shareKey struct {
	db                                   *sql.DB
	tbl                                  tables
	interval, lease, margin, checkPeriod time.Duration
}

// shareKeyOf is the key of st's candidates.
func shareKeyOf(st *store) shareKey {
	return shareKey{st.db, st.tbl, st.cfg.Interval, st.cfg.Lease, st.cfg.Margin, st.cfg.CheckInterval}
}

// registry keeps one T per shareKey while it has users: the sessions of
// GetLock candidates (shares), the batched statements of LeaseRow ones
// (leaseShares).
type registry[T any] struct {
	mu    sync.Mutex
	m     map[shareKey]*T
	users map[shareKey]int
}

func newRegistry[T any]() *registry[T] {
	return &registry[T]{m: map[shareKey]*T{}, users: map[shareKey]int{}}
}

// use returns k's T, made by create for its first user, counted as one
// more user.
func (r *registry[T]) use(k shareKey, create func() *T) *T {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.m[k] == nil {
		r.m[k] = create()
	}
	r.users[k]++
	return r.m[k]
}

// done counts one user of k's T less, forgets it when it has none, and
// reports whether that was the last.
func (r *registry[T]) done(k shareKey) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.users[k]--; r.users[k] > 0 {
		return false
	}
	delete(r.m, k)
	delete(r.users, k)
	return true
}

// sessionShare is the sessions of the GetLock candidates of one shareKey.
type sessionShare struct {
	key shareKey

	spare    spare         // bounds the pool sessions its candidates use at once, but for their starts
	starts   *starter      // opens its candidates' terms, through a spare of its own
	tryLimit time.Duration // bounds a statement on its sessions: 2W + L (see sharedSession.do)
	opening  sync.Mutex    // held by a candidate that opens a session, for the others to join it

	mu       sync.Mutex       // held for no I/O
	own      int              // candidates with a session of their own
	told     bool             // the first candidate that shares has said so
	sessions []*sharedSession // open, not lost
}

var shares = newRegistry[sessionShare]()

// shareOf returns the share of st's candidates, counted as one more user
// (own or member).
func shareOf(st *store) *sessionShare {
	k := shareKeyOf(st)
	return shares.use(k, func() *sessionShare {
		return &sessionShare{key: k, spare: newSpare(), starts: &starter{spare: newSpare(), db: st.db, limit: st.cfg.tryLimit()}, tryLimit: st.cfg.tryLimit() + st.cfg.Lease}
	})
}

// done counts one user less.
func (sh *sessionShare) done() { shares.done(sh.key) }

// takeOwn reports whether the next candidate, which may insist or be a
// shard's, pins a session of its own (SessionOwn) or shares one
// (SessionShared): the one place that decides it. The first to share on
// the pool says so, at Info, with how to get a session of one's own.
func (sh *sessionShare) takeOwn(insist, shard bool, log *slog.Logger) bool {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if !insist && (shard || sh.own >= ownSessions) {
		if !sh.told && !shard { // a shard shares by design (Shards)
			sh.told = true
			log.Info("campaigning on a session shared with this process's other elections on the pool, "+
				"which fails over at its tries (CheckInterval), not in milliseconds; set Config.OwnSession for a session of its own",
				"own_sessions", sh.own)
		}
		return false
	}
	sh.own++
	return true
}

func (sh *sessionShare) dropOwn() {
	sh.mu.Lock()
	sh.own--
	sh.mu.Unlock()
	sh.done()
}

// forget takes s from the sessions candidates join; sh.mu is held.
func (sh *sessionShare) forget(s *sharedSession) {
	sh.sessions = slices.DeleteFunc(sh.sessions, func(o *sharedSession) bool { return o == s })
}

// sharedSession is one shared session: its candidates, by lock name, and
// the loop that sends its statements.
type sharedSession struct {
	sh   *sessionShare
	conn *sql.Conn
	id   uint64 // the session's id on the server (sessionID)
	// lease is the id of its lease row, which renews its terms (openLease);
	// changes (guarded by mu), the count of changes there as of the last
	// renewal that read its terms' records, and those it counted itself
	// since; full asks the next renewal to read them. The renewal alone
	// uses full.
	lease uint64
	full  bool
	use   turns         // one statement sequence at a time; the loop's first
	quit  chan struct{} // closed when the loop is to stop
	gone  chan struct{} // closed when the loop has stopped

	mu       sync.Mutex
	changes  uint64
	alive    time.Time // when the last statement the server answered was sent
	members  map[string]*sharedCandidate
	entering []*sharedCandidate // waiting for their candidate locks
	wake     chan struct{}      // a candidate is entering
	lost     chan struct{}      // closed when the session failed or closed
	err      error              // why
	next     *renewal           // the renewal statement not sent yet
}

// renewal is one renewal statement of a shared session and its outcome
// for each term it renewed.
type renewal struct {
	done    chan struct{}    // closed once results are in
	results map[string]error // by lock name: nil if renewed
}

// sharedCandidate is one candidate on a shared session: a holder while it
// leads.
type sharedCandidate struct {
	s       *sharedSession
	st      *store
	log     *slog.Logger
	lock    string
	won     chan time.Time // the poll that took the lock, sent when it did
	entered chan error     // whether the loop took the candidate lock: nil, errBusy, or why not
	token   uint64

	// Guarded by s.mu.
	left    bool      // leaving: no lock is taken for it any more
	waiting bool      // the poll tries its lock
	holding bool      // the renewal renews its term
	skip    time.Time // no try before then (a pending hand-over to another)
	refused error     // why a renewal refused its term (demoted, lost), if one did
	stamped time.Time // when its record's own renewal was last stamped, at the latest
	led     bool      // it took the lock for a term, and the lease has not counted its freeing

	seen leaseSeen // the poll's alone: what it last saw of its election's lease
}

// joinSession adds a candidate of election lock to a shared session that
// has none of that election, opening one if need be, and takes its
// candidate lock and writes its row there.
func (sh *sessionShare) joinSession(ctx context.Context, st *store, log *slog.Logger, lock string) (*sharedCandidate, error) {
	ctx, cancel := context.WithTimeoutCause(ctx, st.cfg.Lease+st.cfg.Margin, errJoinTimeout)
	defer cancel()
	m := &sharedCandidate{st: st, log: log, lock: lock, won: make(chan time.Time, 1), entered: make(chan error, 1)}
	// One candidate at a time looks for a session, so that candidates
	// joining at once open one, not one each; only an opening does I/O.
	sh.opening.Lock()
	sh.mu.Lock()
	for _, s := range sh.sessions {
		s.mu.Lock()
		if s.members[lock] == nil && s.err == nil && len(s.members) < sessionMembers {
			s.members[lock], m.s = m, s
		}
		s.mu.Unlock()
		if m.s != nil {
			break
		}
	}
	sh.mu.Unlock()
	if m.s == nil {
		s, err := sh.openSession(ctx, st, m)
		if err != nil {
			sh.opening.Unlock()
			sh.done()
			return nil, err
		}
		m.s = s
	}
	sh.opening.Unlock()
	if err := m.enter(ctx); err != nil {
		m.leaveSession()
		return nil, err
	}
	return m, nil
}

// openSession opens a shared session with m as its first candidate, and
// starts its loop.
func (sh *sessionShare) openSession(ctx context.Context, st *store, m *sharedCandidate) (*sharedSession, error) {
	conn, err := st.db.Conn(ctx)
	if err != nil {
		return nil, during("opening a session", refusal(err))
	}
	server, _ := st.settled()
	s := &sharedSession{sh: sh, conn: conn, quit: make(chan struct{}), gone: make(chan struct{}),
		members: map[string]*sharedCandidate{m.lock: m}, wake: make(chan struct{}, 1), lost: make(chan struct{}), next: &renewal{done: make(chan struct{})}}
	if err := setUpSession(ctx, conn, server, st.cfg.waitTimeout()); err != nil {
		drop(conn)
		return nil, during("setting up the session", refusal(err))
	}
	if s.id, err = sessionID(ctx, conn); err != nil {
		drop(conn)
		return nil, during("setting up the session", refusal(err))
	}
	if s.lease, err = openLease(ctx, conn, st.tbl); err != nil {
		drop(conn)
		return nil, during("writing the session's lease", schemaError(st.tbl, err))
	}
	sh.mu.Lock()
	sh.sessions = append(sh.sessions, s)
	sh.mu.Unlock()
	go s.run()
	return s, nil
}

// enter has the loop take the candidate lock, trying again every
// CheckInterval within the lease while this identity's last session lets
// it go, and writes the candidate's row through the pool.
func (m *sharedCandidate) enter(ctx context.Context) error {
	s := m.s
	for {
		s.mu.Lock()
		s.entering = append(s.entering, m)
		s.mu.Unlock()
		select {
		case s.wake <- struct{}{}:
		default:
		}
		select {
		case err := <-m.entered:
			if err == nil {
				row := presence{st: m.st, lock: m.lock, session: SessionShared}
				return s.sh.spare.run(ctx, func() error { return row.join(ctx, m.st.db) })
			}
			if !errors.Is(err, errBusy) {
				return during("setting up the session", refusal(err))
			}
		case <-s.lost:
			return s.err
		case <-ctx.Done():
			return ctx.Err()
		}
		select {
		case <-time.After(m.st.cfg.CheckInterval):
		case <-ctx.Done():
			if !errors.Is(context.Cause(ctx), errJoinTimeout) {
				return ctx.Err()
			}
			return identityInUse(m.lock, m.st.cfg.Identity, m.st.name)
		}
	}
}

// errBusy: another session holds the candidate lock; errJoinTimeout: it
// did for as long as a candidate may take to join.
var (
	errBusy        = errors.New("election: the candidate lock is held")
	errJoinTimeout = errors.New("election: joining took Lease+Margin")
)

// admit takes the candidate locks of the candidates entering, in a
// statement per batch of them, and tells each whether it got its own.
func (s *sharedSession) admit() {
	s.mu.Lock()
	entering := s.entering
	s.entering = nil
	s.mu.Unlock()
	for len(entering) > 0 {
		batch := entering[:min(len(entering), lockBatch)]
		entering = entering[len(batch):]
		err := s.doFirst(func(ctx context.Context, conn *sql.Conn) error {
			// In the session's turn: a candidate that is not leaving yet
			// frees what this takes when it leaves.
			s.mu.Lock()
			batch = slices.DeleteFunc(batch, func(m *sharedCandidate) bool { return m.left })
			s.mu.Unlock()
			locks := make([]string, len(batch))
			for i, m := range batch {
				locks[i] = candidateLock(m.lock, m.st.cfg.Identity)
			}
			got, err := tryLocks(ctx, conn, locks)
			if err != nil {
				s.fail(err)
				return err
			}
			for i, m := range batch {
				if got[i] {
					m.entered <- nil
				} else {
					m.entered <- errBusy
				}
			}
			return nil
		})
		if err != nil {
			for _, m := range slices.Concat(batch, entering) {
				m.entered <- err
			}
			return
		}
	}
}

// lockBatch is how many elections one statement renews or tries at most,
// which bounds its size (about a quarter of a megabyte).
const lockBatch = 5000

// sessionMembers is how many candidates one shared session holds at most.
// A server takes a named lock in time that grows with the locks the
// session already holds (MariaDB 10.11: 3000 GET_LOCKs in 44 ms on a
// session holding none, in 830 ms on one holding 6000), so a session that
// held every election of a process would take the locks of thousands of
// elections freed at once in seconds; sessions of a thousand take them
// in parallel, each in about a tenth of a second.
const sessionMembers = 1000

// do runs f on the session, one statement sequence at a time, after the
// loop's (see turns); an error that leaves the session in doubt ends it
// for every candidate on it.
//
// f gets a context of the session's, never a candidate's: the driver
// drops a connection whose statement's context ends, and with it every
// candidate's locks. It is bounded by 2W + L: a statement sent into a
// partition gives up, one that waits for a row lock gets the server's error
// at 2W first (the session's lock waits), and one that is only slow
// (thousands of elections on a busy server) is not cut, while each term's
// own lease still ends it on time.
func (s *sharedSession) do(f func(ctx context.Context, conn *sql.Conn) error) error {
	return s.doAs(false, f)
}

// doFirst is do for the loop's own statements, which go first.
func (s *sharedSession) doFirst(f func(ctx context.Context, conn *sql.Conn) error) error {
	return s.doAs(true, f)
}

func (s *sharedSession) doAs(urgent bool, f func(ctx context.Context, conn *sql.Conn) error) error {
	s.mu.Lock()
	err := s.err
	s.mu.Unlock()
	if err != nil {
		return err
	}
	s.use.take(urgent)
	defer s.use.give()
	s.mu.Lock()
	err = s.err // it may have failed while this waited
	s.mu.Unlock()
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), s.sh.tryLimit)
	defer cancel()
	sent := time.Now()
	err = f(ctx, s.conn)
	if !sessionFailed(err) {
		s.mu.Lock()
		s.alive = sent
		s.mu.Unlock()
	}
	if sessionFailed(err) {
		s.fail(err)
		return fmt.Errorf("%w: %w", ErrSessionLost, err)
	}
	return err
}

// turns hands the session to one user at a time, the loop's renewals and
// polls before any candidate's statements: thousands of candidates joining
// at once must not delay the renewal of the terms the session holds.
type turns struct {
	mu     sync.Mutex
	held   bool
	urgent int // urgent takers waiting
	first  *sync.Cond
	rest   *sync.Cond
}

func (t *turns) take(urgent bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.first == nil {
		t.first, t.rest = sync.NewCond(&t.mu), sync.NewCond(&t.mu)
	}
	if urgent {
		t.urgent++
		for t.held {
			t.first.Wait()
		}
		t.urgent--
	} else {
		for t.held || t.urgent > 0 {
			t.rest.Wait()
		}
	}
	t.held = true
}

func (t *turns) give() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.held = false
	if t.urgent > 0 {
		t.first.Signal()
	} else {
		t.rest.Signal()
	}
}

// sessionFailed reports an error after which the session cannot be
// trusted to hold its locks: the connection failed or was cut (a context
// that ends cuts it), or the server ended the session. A server's refusal
// of one statement leaves it as it was.
func sessionFailed(err error) bool {
	if err == nil {
		return false
	}
	var me *mysql.MySQLError
	if errors.As(err, &me) {
		// Shutdown, interrupted, killed (MariaDB), disconnected for
		// inactivity (MySQL 8.0.24+); a server no longer the primary.
		return slices.Contains([]uint16{1053, 1317, 1927, 4031}, me.Number) || readOnly(err)
	}
	var ne net.Error
	return errors.Is(err, driver.ErrBadConn) || errors.Is(err, mysql.ErrInvalidConn) || errors.Is(err, sql.ErrConnDone) ||
		errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) ||
		errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.As(err, &ne)
}

// fail ends the session for all its candidates.
//
// The connection is dropped at once: a session that answers on (a KILL
// QUERY, a statement refused after it took locks) would keep every lock
// it holds. Callers hold the session's turn, or are its last user.
func (s *sharedSession) fail(err error) {
	s.mu.Lock()
	first := s.err == nil
	if first {
		s.err = fmt.Errorf("%w: the shared session %d failed: %w", ErrSessionLost, s.id, err)
		close(s.lost)
	}
	s.mu.Unlock()
	if first {
		drop(s.conn)
	}
	s.sh.mu.Lock()
	s.sh.forget(s)
	s.sh.mu.Unlock()
}

// run sends the session's own statements until its last candidate leaves:
// the candidate locks of those entering, the poll every CheckInterval, and
// on a goroutine of its own, so that no poll can delay it, the renewal
// every Interval.
func (s *sharedSession) run() {
	defer close(s.gone)
	defer drop(s.conn)
	defer func() { // its last user: no turn to take
		ctx, cancel := context.WithTimeout(context.Background(), s.sh.key.interval)
		defer cancel()
		closeLease(ctx, s.conn, s.sh.key.tbl, s.lease)
	}()
	renewing := make(chan struct{})
	go func() {
		defer close(renewing)
		s.every(s.sh.key.interval, s.renewAll)
	}()
	defer func() { <-renewing }()
	poll := time.NewTicker(s.sh.key.checkPeriod)
	defer poll.Stop()
	for {
		select {
		case <-s.quit:
			return
		case <-s.wake:
			s.admit()
		case <-poll.C:
			s.poll()
		}
	}
}

// every runs f every period until the session is to stop.
func (s *sharedSession) every(period time.Duration, f func()) {
	tick := time.NewTicker(period)
	defer tick.Stop()
	for {
		select {
		case <-s.quit:
			return
		case <-tick.C:
			f()
		}
	}
}

// membersWhere returns the session's candidates that pass keep.
func (s *sharedSession) membersWhere(keep func(m *sharedCandidate) bool) []*sharedCandidate {
	s.mu.Lock()
	defer s.mu.Unlock()
	var ms []*sharedCandidate
	for _, m := range s.members {
		if keep(m) {
			ms = append(ms, m)
		}
	}
	return ms
}

// poll tries, in one statement, the locks of every waiting candidate
// whose election has a record and may have changed (changed), and reads
// those records; it hands each lock it took to its candidate, and kills
// the session of a leader that the record's rule finds stuck or
// disobedient. Elections without a record yet are tried in a statement of
// their own.
func (s *sharedSession) poll() {
	now := time.Now()
	waiting := s.membersWhere(func(m *sharedCandidate) bool { return m.waiting && now.After(m.skip) })
	if len(waiting) == 0 {
		return
	}
	waiting, err := s.changed(waiting)
	if err != nil || len(waiting) == 0 {
		return
	}
	byLock := make(map[string]*sharedCandidate, len(waiting))
	locks := make([]string, len(waiting))
	for i, m := range waiting {
		byLock[m.lock], locks[i] = m, m.lock
	}
	sent := time.Now()
	type overdue struct {
		m   *sharedCandidate
		rec Record
		why string
	}
	var (
		stuck []overdue
		taken []*sharedCandidate
	)
	err = s.doFirst(func(ctx context.Context, conn *sql.Conn) error {
		err := tryRead(ctx, conn, s.sh.key.tbl, locks, func(lock string, got bool, rec Record, r reading, l leaseState) {
			m := byLock[lock]
			delete(byLock, lock)
			m.st.vouch(&rec, r)
			switch {
			case got:
				taken = append(taken, m)
			case rec.overdue() != "":
				stuck = append(stuck, overdue{m, rec, rec.overdue()})
			default:
				m.seen = s.seenFor(rec, l, r)
			}
		})
		if err != nil {
			s.fail(err)
			return err
		}
		return s.hand(ctx, conn, taken, sent)
	})
	if err != nil {
		return // logged by the candidates, which the failure reaches
	}
	var fresh []*sharedCandidate // elections without a record yet
	for _, m := range byLock {
		fresh = append(fresh, m)
	}
	for len(fresh) > 0 {
		batch := fresh[:min(len(fresh), lockBatch)]
		fresh = fresh[len(batch):]
		sent := time.Now()
		if s.doFirst(func(ctx context.Context, conn *sql.Conn) error {
			locks := make([]string, len(batch))
			for i, m := range batch {
				locks[i] = m.lock
			}
			got, err := tryLocks(ctx, conn, locks)
			if err != nil {
				s.fail(err)
				return err
			}
			var taken []*sharedCandidate
			for i, m := range batch {
				if got[i] {
					taken = append(taken, m)
				}
			}
			return s.hand(ctx, conn, taken, sent)
		}) != nil {
			return
		}
	}
	for _, o := range stuck {
		o.m.log.Debug("the leader is overdue; killing its session", "reason", o.why, "leader", o.rec.Identity, "token", o.rec.Token)
		err := s.doFirst(func(ctx context.Context, conn *sql.Conn) error {
			return o.m.st.kill(ctx, conn, o.m.lock, o.rec, o.why, o.m.log)
		})
		if errors.Is(err, ErrKillDenied) {
			o.m.log.Error("cannot end a stuck leader's session", "err", err, "holder", o.rec.Identity, "conn_id", o.rec.ConnID)
		}
	}
}

// leaseSeen is what a waiting candidate saw of its election's term, held
// on a shared session's lease: while that lease's session holds its lock,
// counts no change and keeps renewing it, the term is as it was, and the
// poll neither tries the election's lock nor reads its record. The
// term's end frees the lock only after the record says so (endTerm), and
// is counted after the lock is free (countFreed); a demotion counts when
// it is written (store.request); a session that dies frees the lease's
// lock with the election's.
type leaseSeen struct {
	lease     uint64    // 0: none, try the lock and read the record
	changes   uint64    // the changes counted in the lease when the record was read
	renewedUS int64     // the lease's renewal last seen
	moved     time.Time // when that renewal was seen to move, or when it was made, by the record's age
}

// quiet is how long a lease may be seen not to move before its terms'
// records are read again at every poll: L + S − 2C, so that a hung
// session's terms are read again by L + S after their last renewal (seen
// up to C after it, then the poll C later), when the record's rule may
// first find them overdue. Zero or less: no lease is trusted so.
func (s *sharedSession) quiet() time.Duration {
	k := s.sh.key
	return k.lease + k.margin - 2*k.checkPeriod
}

// seenFor is what a waiter keeps of a read of rec, with its lease l, in
// reading r: the lease, if the term leads (the record's rule), with no
// request pending, renewed through lease l; else nothing.
func (s *sharedSession) seenFor(rec Record, l leaseState, r reading) leaseSeen {
	if l.id == 0 || s.quiet() <= 0 || !rec.Leading() || rec.demoted || rec.HandoverTo != "" {
		return leaseSeen{}
	}
	return leaseSeen{lease: l.id, changes: l.changes, renewedUS: l.renewedUS, moved: r.sent.Add(-rec.renewalAge())}
}

// changed returns the candidates of waiting whose election may have
// changed: those that keep no lease, and those whose lease, read here in
// one statement for all, is gone, is no longer held, counts a change, or
// has not moved for quiet; those forget it.
func (s *sharedSession) changed(waiting []*sharedCandidate) ([]*sharedCandidate, error) {
	var ids []uint64
	seen := map[uint64]bool{}
	for _, m := range waiting {
		if id := m.seen.lease; id != 0 && !seen[id] {
			seen[id] = true
			ids = append(ids, id)
		}
	}
	if len(ids) == 0 {
		return waiting, nil
	}
	var leases map[uint64]leaseState
	sent := time.Now()
	err := s.doFirst(func(ctx context.Context, conn *sql.Conn) (err error) {
		if leases, err = readLeases(ctx, conn, s.sh.key.tbl, ids); err != nil {
			s.fail(err)
		}
		return err
	})
	if err != nil {
		return nil, err // logged by the candidates, which the failure reaches
	}
	var look []*sharedCandidate
	for _, m := range waiting {
		w := &m.seen
		if w.lease == 0 {
			look = append(look, m)
			continue
		}
		l, ok := leases[w.lease]
		if ok && l.renewedUS != w.renewedUS {
			w.renewedUS, w.moved = l.renewedUS, sent
		}
		if !ok || !l.held || l.changes != w.changes || sent.Sub(w.moved) > s.quiet() {
			*w = leaseSeen{}
			look = append(look, m)
		}
	}
	return look, nil
}

// hand gives each lock the poll took, in a statement sent at sent, to its
// candidate, and frees those whose candidate is leaving, on conn, before
// the session serves anyone else: a candidate that starts to leave later
// frees its lock itself (leaveSession).
func (s *sharedSession) hand(ctx context.Context, conn *sql.Conn, taken []*sharedCandidate, sent time.Time) error {
	var orphans []string
	s.mu.Lock()
	for _, m := range taken {
		if !m.left && m.waiting {
			m.waiting, m.seen = false, leaseSeen{}
			m.won <- sent
		} else {
			orphans = append(orphans, m.lock)
		}
	}
	s.mu.Unlock()
	if len(orphans) == 0 {
		return nil
	}
	if err := releaseLocks(ctx, conn, orphans...); err != nil {
		s.fail(err) // a lock no one would free
		return err
	}
	return nil
}

// renewAll renews the terms of every candidate that leads on this
// session: by renewing the session's lease, in one statement, while no
// change it did not count itself has counted there since its terms'
// records were last read;
// else as pinned.renew does for one (renewTerms). A term refused once
// (demoted, lost) is never renewed again.
//
// A candidate of an earlier version reads no lease: to it a term is as
// fresh as its record's own renewal, and one that looks stale is killed as
// hung. So while an election has such a candidate, its term's record is
// also stamped at least every (L + S) / 2 (stampForEarlier, a few terms
// each time, as they started at different moments), and no such reader
// finds a live term stale.
func (s *sharedSession) renewAll() {
	refresh := max((s.sh.key.lease+s.sh.key.margin)/2-s.sh.key.interval, s.sh.key.interval)
	s.mu.Lock()
	r := s.next
	s.next = &renewal{done: make(chan struct{})}
	var holding, due []*sharedCandidate
	for _, m := range s.members {
		if m.holding {
			holding = append(holding, m)
			if time.Since(m.stamped) >= refresh {
				due = append(due, m)
			}
		}
	}
	s.mu.Unlock()
	defer close(r.done)
	r.results = make(map[string]error, len(holding))
	if len(holding) == 0 {
		return
	}
	renewed := false
	err := s.doFirst(func(ctx context.Context, conn *sql.Conn) (err error) {
		if !s.full {
			s.mu.Lock()
			changes := s.changes
			s.mu.Unlock()
			renewed, err = renewLease(ctx, conn, s.sh.key.tbl, s.lease, changes)
			s.full = err == nil && !renewed
		}
		return err
	})
	if renewed || err != nil {
		s.mu.Lock()
		for _, m := range holding {
			r.results[m.lock] = m.refused
			if err != nil {
				r.results[m.lock] = keepaliveFailed(err)
			}
		}
		s.mu.Unlock()
		if renewed {
			s.stampForEarlier(r, due)
		}
		return
	}
	var changes uint64
	if err := s.doFirst(func(ctx context.Context, conn *sql.Conn) (err error) {
		changes, err = leaseChanges(ctx, conn, s.sh.key.tbl, s.lease)
		return err
	}); err != nil {
		for _, m := range holding {
			r.results[m.lock] = keepaliveFailed(err)
		}
		return
	}
	if s.renewTerms(r, holding) {
		s.mu.Lock()
		s.changes, s.full = changes, false
		s.mu.Unlock()
	}
}

// stampForEarlier renews, as renewTerms does, the records of the terms due
// whose elections have a candidate of an earlier version
// (earlierReaders), and counts the others as stamped: their candidates
// judge them by the lease.
func (s *sharedSession) stampForEarlier(r *renewal, due []*sharedCandidate) {
	if len(due) == 0 {
		return
	}
	var earlier map[string]bool
	sent := time.Now()
	if s.doFirst(func(ctx context.Context, conn *sql.Conn) (err error) {
		earlier, err = earlierReaders(ctx, conn, s.sh.key.tbl)
		return err
	}) != nil {
		return // they are still due at the next renewal
	}
	var stamp []*sharedCandidate
	s.mu.Lock()
	for _, m := range due {
		if earlier[m.lock] {
			stamp = append(stamp, m)
		} else {
			m.stamped = sent
		}
	}
	s.mu.Unlock()
	s.renewTerms(r, stamp)
}

// renewTerms renews the terms of holding, as pinned.renew does for one, in
// one statement per lockBatch of them, each followed by a read of its
// terms only when some did not match, to tell which and why; it records
// each one's outcome in r and reports whether every statement was
// answered.
func (s *sharedSession) renewTerms(r *renewal, holding []*sharedCandidate) bool {
	failed := false
	for len(holding) > 0 {
		batch := holding[:min(len(holding), lockBatch)]
		holding = holding[len(batch):]
		held := make([]heldTerm, len(batch))
		for i, m := range batch {
			held[i] = heldTerm{m.lock, m.token, s.id}
		}
		sent := time.Now()
		err := s.doFirst(func(ctx context.Context, conn *sql.Conn) error {
			outcomes, err := renewShared(ctx, conn, s.sh.key.tbl, s.id, held)
			s.mu.Lock()
			defer s.mu.Unlock()
			for i, o := range outcomes {
				r.results[batch[i].lock] = o
				if o == nil {
					batch[i].stamped = sent
				}
			}
			return err
		})
		if err != nil {
			failed = true
			for _, m := range batch {
				r.results[m.lock] = keepaliveFailed(err)
			}
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, m := range s.members {
		if err := r.results[m.lock]; err != nil && !errors.Is(err, errTransient) && !errors.Is(err, ErrSessionLost) {
			m.refused = err
		}
	}
	return !failed
}

// keepaliveFailed is a term's outcome of a renewal that failed with err:
// refused (a lock wait, a deadlock), the terms try again within their
// leases.
func keepaliveFailed(err error) error {
	if errors.Is(err, ErrSessionLost) {
		return err
	}
	return fmt.Errorf("%w: keepalive: %w", errTransient, err)
}

// acquireShared waits, on a shared session, until this candidate has won the
// election and opened a term: the poll takes the lock, the candidate
// starts the term on the session. With try, it tries the lock once, now.
func (sh *sessionShare) acquireShared(ctx context.Context, g *getLock, lock string, try bool) (won, error) {
	m, err := sh.joinSession(ctx, g.st, g.log, lock)
	if err != nil {
		return won{}, err
	}
	for {
		var sent time.Time
		if try {
			var got sql.NullInt64
			sent = time.Now()
			if err := m.s.do(func(ctx context.Context, conn *sql.Conn) (err error) {
				got, err = waitLock(ctx, conn, lock, 0)
				return err
			}); err != nil {
				m.leaveSession()
				return won{}, err
			}
			if got.Int64 != 1 {
				m.leaveSession()
				return won{}, ErrHeld
			}
		} else {
			m.s.mu.Lock()
			m.waiting = true
			m.s.mu.Unlock()
			select {
			case sent = <-m.won:
			case <-m.s.lost:
				m.leaveSession()
				return won{}, m.s.err
			case <-ctx.Done():
				m.leaveSession()
				return won{}, ctx.Err()
			}
		}
		alive, delay, p, err := m.start(ctx)
		if err == nil {
			return won{h: m, token: m.token, sent: later(sent, alive), delay: delay, p: p, shared: true}, nil
		}
		if !errors.Is(err, errYield) || try {
			if errors.Is(err, errYield) {
				err = ErrHeld
			}
			m.leaveSession()
			return won{}, err
		}
		// The election is meant for another candidate (errYield): give the
		// lock back, and let that one take it before this one tries again.
		if err := m.s.do(func(ctx context.Context, conn *sql.Conn) error {
			return releaseLocks(ctx, conn, lock)
		}); err != nil {
			m.leaveSession()
			return won{}, err
		}
		m.s.mu.Lock()
		m.skip = time.Now().Add(g.st.cfg.CheckInterval)
		m.s.mu.Unlock()
		m.log.Info("gave the lock back", "why", err)
	}
}

// start opens the term, as pinned.startTerm does, through the pool, in a
// batch with the other terms its share starts at once (starter): the
// session holds the lock, and the record names the session, which any
// session may write (see docs/protocol.md, "Shared sessions"). It returns
// when the session last ran a statement before the start: the term's lease
// may count from there, since the lock was the session's then (it is until
// the session ends), and the claim, which stamps the record, was sent
// after it, so the lease ends before the record goes stale.
func (m *sharedCandidate) start(ctx context.Context) (time.Time, time.Duration, predecessor, error) {
	o, err := m.s.sh.starts.startBatched(ctx, termStart{m.st, m.lock, m.s.id, m.s.lease}, func() time.Time {
		m.s.mu.Lock()
		defer m.s.mu.Unlock()
		return m.s.alive
	})
	if err != nil {
		return time.Time{}, 0, predecessor{}, err
	}
	m.token = o.token
	m.s.mu.Lock()
	m.holding, m.refused, m.stamped, m.led = true, nil, o.sent, true // the claim stamps it, after o.sent
	m.s.mu.Unlock()
	return o.sent, o.delay, o.p, nil
}

// leaveSession gives up the candidate's locks on the session and removes
// it; the last candidate to leave closes the session.
func (m *sharedCandidate) leaveSession() {
	s := m.s
	s.mu.Lock()
	m.left = true
	s.mu.Unlock()
	s.do(func(ctx context.Context, conn *sql.Conn) error {
		if err := releaseLocks(ctx, conn, m.lock, candidateLock(m.lock, m.st.cfg.Identity)); err != nil {
			s.fail(err) // locks no one would free
			return err
		}
		s.mu.Lock()
		led := m.led
		s.mu.Unlock()
		if led {
			return s.countFreed(ctx, conn, m)
		}
		return nil
	})
	s.sh.mu.Lock()
	s.mu.Lock()
	delete(s.members, m.lock)
	last := len(s.members) == 0
	if last && s.err == nil {
		s.err = fmt.Errorf("%w: the shared session %d was closed", ErrSessionLost, s.id)
		close(s.lost)
		s.sh.forget(s)
	}
	s.mu.Unlock()
	s.sh.mu.Unlock()
	if last {
		close(s.quit)
		<-s.gone
	}
	s.sh.done()
}

// begin writes the term's history through the pool, a few terms at a
// time (spare).
func (m *sharedCandidate) begin(ctx context.Context, started time.Time, p predecessor) error {
	return m.s.sh.spare.run(ctx, func() error {
		return termStart{m.st, m.lock, m.s.id, m.s.lease}.writeHistory(ctx, m.st.db, m.token, p, started)
	})
}

// renew waits for the session's next renewal, which is sent after this
// call, and returns its outcome for this term.
func (m *sharedCandidate) renew(ctx context.Context, quit <-chan struct{}) error {
	s := m.s
	s.mu.Lock()
	r := s.next
	s.mu.Unlock()
	select {
	case <-r.done:
		if err, ok := r.results[m.lock]; ok {
			return err
		}
		return fmt.Errorf("%w: the keepalive left this term out", ErrLockLost)
	case <-s.lost:
		return s.err
	case <-quit:
		return errResigning
	case <-ctx.Done():
		return fmt.Errorf("%w: keepalive: %w", ErrSessionLost, ctx.Err())
	}
}

// release records why the term ended, then frees the election's lock on
// the session and counts that in its lease, in one use of it, so that no
// renewal comes between.
func (m *sharedCandidate) release(ctx context.Context, end ending) error {
	m.stopRenewing()
	return m.s.do(func(ctx context.Context, conn *sql.Conn) error {
		if err := m.st.endTerm(ctx, conn, m.lock, m.token, end); err != nil {
			return err
		}
		if err := releaseHeld(ctx, conn, m.lock); err != nil {
			return err
		}
		return m.s.countFreed(ctx, conn, m)
	})
}

// countFreed counts, in the session's lease, that m's election lock,
// which it took for a term, was freed: that election's waiters watch the
// lease, not the lock (poll). The session counts it as known, so that its
// renewal still renews the lease in one statement. If it cannot, it fails
// the session, whose end frees the lease's lock, which they also watch.
func (s *sharedSession) countFreed(ctx context.Context, conn *sql.Conn, m *sharedCandidate) error {
	counted, err := countChange(ctx, conn, s.sh.key.tbl, s.lease)
	if err != nil {
		s.fail(err)
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	m.led = false
	if counted {
		s.changes++
	}
	return nil
}

// lost records, through the pool a few at a time (spare: a session that
// dies ends thousands of terms at once), why a term ended that the leader
// did not end; close then frees the lock, if the session still holds it.
func (m *sharedCandidate) lost(ctx context.Context, end ending) error {
	m.stopRenewing()
	return m.s.sh.spare.run(ctx, func() error { return m.st.endTerm(ctx, m.st.db, m.lock, m.token, end) })
}

func (m *sharedCandidate) stopRenewing() {
	m.s.mu.Lock()
	m.holding = false
	m.s.mu.Unlock()
}

// close leaves the shared session: the next campaign joins again.
func (m *sharedCandidate) close() {
	m.stopRenewing()
	m.leaveSession()
}

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
	"strings"
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

// shareKey is what candidates that may share a session have in common:
// the pool, the tables, and the timing, which sets the session's
// wait_timeout and the pace of its statements.
type shareKey struct {
	db                                   *sql.DB
	tbl                                  tables
	interval, lease, margin, checkPeriod time.Duration
}

// sessionShare is the sessions of the GetLock candidates of one shareKey.
type sessionShare struct {
	key shareKey

	mu       sync.Mutex
	own      int              // candidates with a session of their own
	sessions []*sharedSession // open, not lost
	users    int              // own plus members: the share is forgotten at 0
	starts   chan struct{}    // bounds the pool sessions that term starts write history on
}

var shares = struct {
	sync.Mutex
	m map[shareKey]*sessionShare
}{m: map[shareKey]*sessionShare{}}

// shareOf returns the share of st's candidates, counted as one more user.
func shareOf(st *store) *sessionShare {
	k := shareKey{st.db, st.tbl, st.cfg.Interval, st.cfg.Lease, st.cfg.Margin, st.cfg.CheckInterval}
	shares.Lock()
	defer shares.Unlock()
	sh := shares.m[k]
	if sh == nil {
		sh = &sessionShare{key: k, starts: make(chan struct{}, 2)}
		shares.m[k] = sh
	}
	sh.mu.Lock()
	sh.users++
	sh.mu.Unlock()
	return sh
}

// done counts one user less, and forgets the share when it has none.
func (sh *sessionShare) done() {
	shares.Lock()
	defer shares.Unlock()
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if sh.users--; sh.users == 0 {
		delete(shares.m, sh.key)
	}
}

// takeOwn reports whether the next candidate, which may insist, pins a
// session of its own.
func (sh *sessionShare) takeOwn(insist bool) bool {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if sh.own >= ownSessions && !insist {
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

// sharedSession is one shared session: its candidates, by lock name, and
// the loop that sends its statements.
type sharedSession struct {
	sh   *sessionShare
	conn *sql.Conn
	id   uint64        // CONNECTION_ID()
	use  turns         // one statement sequence at a time; the loop's first
	quit chan struct{} // closed when the loop is to stop
	gone chan struct{} // closed when the loop has stopped

	mu      sync.Mutex
	members map[string]*sharedCandidate
	lost    chan struct{} // closed when the session failed or closed
	err     error         // why
	next    *renewal      // the renewal statement not sent yet
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
	s     *sharedSession
	st    *store
	log   *slog.Logger
	lock  string
	won   chan time.Time // the poll that took the lock, sent when it did
	token uint64

	// Guarded by s.mu.
	waiting bool      // the poll tries its lock
	holding bool      // the renewal renews its term
	skip    time.Time // no try before then (a pending hand-over to another)
}

// join adds a candidate of election lock to a shared session that has none
// of that election, opening one if need be, and takes its candidate lock
// and writes its row there.
func (sh *sessionShare) join(ctx context.Context, st *store, log *slog.Logger, lock string) (*sharedCandidate, error) {
	ctx, cancel := context.WithTimeout(ctx, st.cfg.Lease+st.cfg.Margin)
	defer cancel()
	m := &sharedCandidate{st: st, log: log, lock: lock, won: make(chan time.Time, 1)}
	// Under the share's lock, so that candidates joining at once open one
	// session, not one each.
	sh.mu.Lock()
	for _, s := range sh.sessions {
		s.mu.Lock()
		if s.members[lock] == nil && s.err == nil {
			s.members[lock], m.s = m, s
		}
		s.mu.Unlock()
		if m.s != nil {
			break
		}
	}
	if m.s == nil {
		s, err := sh.open(ctx, st)
		if err != nil {
			sh.mu.Unlock()
			sh.done()
			return nil, err
		}
		s.members[lock], m.s = m, s
	}
	sh.mu.Unlock()
	if err := m.enter(ctx); err != nil {
		m.leave()
		return nil, err
	}
	return m, nil
}

// open opens a shared session and starts its loop; sh.mu is held.
func (sh *sessionShare) open(ctx context.Context, st *store) (*sharedSession, error) {
	conn, err := st.db.Conn(ctx)
	if err != nil {
		return nil, during("opening a session", refusal(err))
	}
	server, _ := st.settled()
	s := &sharedSession{sh: sh, conn: conn, quit: make(chan struct{}), gone: make(chan struct{}),
		members: map[string]*sharedCandidate{}, lost: make(chan struct{}), next: &renewal{done: make(chan struct{})}}
	if _, err := conn.ExecContext(ctx, server.sessionSetup(st.cfg.waitTimeout())); err != nil {
		drop(conn)
		return nil, during("setting up the session", refusal(err))
	}
	if err := conn.QueryRowContext(ctx, "SELECT CONNECTION_ID()").Scan(&s.id); err != nil {
		drop(conn)
		return nil, during("setting up the session", refusal(err))
	}
	sh.sessions = append(sh.sessions, s)
	go s.run()
	return s, nil
}

// enter takes the candidate lock, waiting within the lease for this
// identity's last session to let it go, and writes the candidate's row.
func (m *sharedCandidate) enter(ctx context.Context) error {
	cand := candidateLock(m.lock, m.st.cfg.Identity)
	for {
		var got sql.NullInt64
		err := m.s.do(func(conn *sql.Conn) error {
			return conn.QueryRowContext(ctx, text("SELECT GET_LOCK(?, 0)", cand)).Scan(&got)
		})
		switch {
		case err != nil:
			return during("setting up the session", refusal(err))
		case got.Int64 == 1:
			row := presence{st: m.st, lock: m.lock}
			return m.s.do(func(conn *sql.Conn) error { return row.join(ctx, conn) })
		}
		select {
		case <-time.After(m.st.cfg.CheckInterval):
		case <-ctx.Done():
			return fmt.Errorf("%w: another session (IS_USED_LOCK(%s)) campaigns as %q in election %q; give every candidate its own Config.Identity",
				ErrIdentityInUse, literal(cand), m.st.cfg.Identity, m.st.name)
		}
	}
}

// do runs f on the session, one statement sequence at a time, after the
// loop's (see turns); an error that leaves the session in doubt ends it
// for every candidate on it.
func (s *sharedSession) do(f func(conn *sql.Conn) error) error { return s.doAs(false, f) }

// doFirst is do for the loop's own statements, which go first.
func (s *sharedSession) doFirst(f func(conn *sql.Conn) error) error { return s.doAs(true, f) }

func (s *sharedSession) doAs(urgent bool, f func(conn *sql.Conn) error) error {
	s.mu.Lock()
	err := s.err
	s.mu.Unlock()
	if err != nil {
		return err
	}
	s.use.take(urgent)
	defer s.use.give()
	err = f(s.conn)
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
		// inactivity (MySQL 8.0.24+).
		return slices.Contains([]uint16{1053, 1317, 1927, 4031}, me.Number)
	}
	var ne net.Error
	return errors.Is(err, driver.ErrBadConn) || errors.Is(err, mysql.ErrInvalidConn) || errors.Is(err, sql.ErrConnDone) ||
		errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) ||
		errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.As(err, &ne)
}

// fail ends the session for all its candidates.
func (s *sharedSession) fail(err error) {
	s.mu.Lock()
	if s.err == nil {
		s.err = fmt.Errorf("%w: the shared session %d failed: %w", ErrSessionLost, s.id, err)
		close(s.lost)
	}
	s.mu.Unlock()
	s.sh.mu.Lock()
	for i, o := range s.sh.sessions {
		if o == s {
			s.sh.sessions = append(s.sh.sessions[:i], s.sh.sessions[i+1:]...)
			break
		}
	}
	s.sh.mu.Unlock()
}

// run sends the session's own statements until its last candidate leaves:
// the poll every CheckInterval, the renewal every Interval.
func (s *sharedSession) run() {
	defer close(s.gone)
	defer drop(s.conn)
	cfg := s.sh.key
	poll := time.NewTicker(cfg.checkPeriod)
	defer poll.Stop()
	renew := time.NewTicker(cfg.interval)
	defer renew.Stop()
	for {
		select {
		case <-s.quit:
			return
		case <-s.lost:
			<-s.quit
			return
		case <-poll.C:
			s.poll()
		case <-renew.C:
			s.renew()
		}
	}
}

// candidates returns the session's candidates that pass keep.
func (s *sharedSession) candidates(keep func(m *sharedCandidate) bool) []*sharedCandidate {
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
// whose election has a record, and reads those records; it hands each lock
// it took to its candidate, and kills the session of a leader that the
// record's rule finds stuck or disobedient. Elections without a record
// yet are tried in a statement of their own.
func (s *sharedSession) poll() {
	now := time.Now()
	waiting := s.candidates(func(m *sharedCandidate) bool { return m.waiting && now.After(m.skip) })
	if len(waiting) == 0 {
		return
	}
	byLock := make(map[string]*sharedCandidate, len(waiting))
	names := make([]string, len(waiting))
	for i, m := range waiting {
		byLock[m.lock], names[i] = m, literal(m.lock)
	}
	tbl := s.sh.key.tbl
	ctx, cancel := context.WithTimeout(context.Background(), s.sh.key.lease)
	defer cancel()
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
	err := s.doFirst(func(conn *sql.Conn) error {
		rows, err := conn.QueryContext(ctx, "SELECT r.lock_name, GET_LOCK(r.lock_name, 0), "+recordColumns("r.lock_name")+
			" FROM `"+tbl.record+"` r WHERE r.lock_name IN ("+strings.Join(names, ", ")+")")
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var (
				lock string
				got  sql.NullInt64
				rec  Record
			)
			if err := rows.Scan(append([]any{&lock, &got}, rec.fields()...)...); err != nil {
				return err
			}
			m := byLock[lock]
			delete(byLock, lock)
			switch {
			case got.Int64 == 1:
				taken = append(taken, m)
			case rec.overdue() != "":
				stuck = append(stuck, overdue{m, rec, rec.overdue()})
			}
		}
		if err := rows.Err(); err != nil {
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
		batch := fresh[:min(len(fresh), 500)]
		fresh = fresh[len(batch):]
		tries := make([]string, len(batch))
		for i, m := range batch {
			tries[i] = text("GET_LOCK(?, 0)", m.lock)
		}
		got := make([]sql.NullInt64, len(batch))
		dst := make([]any, len(batch))
		for i := range got {
			dst[i] = &got[i]
		}
		sent := time.Now()
		if s.doFirst(func(conn *sql.Conn) error {
			if err := conn.QueryRowContext(ctx, "SELECT "+strings.Join(tries, ", ")).Scan(dst...); err != nil {
				return err
			}
			var taken []*sharedCandidate
			for i, m := range batch {
				if got[i].Int64 == 1 {
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
		err := s.doFirst(func(conn *sql.Conn) error { return o.m.st.kill(ctx, conn, o.m.lock, o.rec, o.why, o.m.log) })
		if errors.Is(err, ErrKillDenied) {
			o.m.log.Error("cannot end a stuck leader's session", "err", err, "holder", o.rec.Identity, "conn_id", o.rec.ConnID)
		}
	}
}

// hand gives each lock the poll took, in a statement sent at sent, to its
// candidate, and frees those whose candidate left meanwhile, on conn,
// before the session serves anyone else: a candidate still on the session
// frees its lock itself if it leaves now (leave).
func (s *sharedSession) hand(ctx context.Context, conn *sql.Conn, taken []*sharedCandidate, sent time.Time) error {
	var orphans []string
	s.mu.Lock()
	for _, m := range taken {
		if s.members[m.lock] == m && m.waiting {
			m.waiting = false
			m.won <- sent
		} else {
			orphans = append(orphans, text("RELEASE_LOCK(?)", m.lock))
		}
	}
	s.mu.Unlock()
	if len(orphans) == 0 {
		return nil
	}
	_, err := conn.ExecContext(ctx, "DO "+strings.Join(orphans, ", "))
	return err
}

// renew renews, in one statement, the terms of every candidate that
// leads on this session, as pinned.renew does for one; a read of those
// terms follows only when some did not match, to tell which and why.
func (s *sharedSession) renew() {
	s.mu.Lock()
	r := s.next
	s.next = &renewal{done: make(chan struct{})}
	var holding []*sharedCandidate
	for _, m := range s.members {
		if m.holding {
			holding = append(holding, m)
		}
	}
	s.mu.Unlock()
	defer close(r.done)
	if len(holding) == 0 {
		return
	}
	r.results = make(map[string]error, len(holding))
	tbl := s.sh.key.tbl
	locks := make([]string, len(holding))
	terms := make([]string, len(holding))
	byLock := make(map[string]*sharedCandidate, len(holding))
	for i, m := range holding {
		locks[i], terms[i], byLock[m.lock] = literal(m.lock), text("(?, ?)", m.lock, m.token), m
	}
	in := " r.lock_name IN (" + strings.Join(locks, ", ") + ") AND (r.lock_name, r.epoch) IN (" + strings.Join(terms, ", ") + ")"
	ctx, cancel := context.WithTimeout(context.Background(), s.sh.key.lease)
	defer cancel()
	err := s.doFirst(func(conn *sql.Conn) error {
		res, err := conn.ExecContext(ctx, text("UPDATE `"+tbl.record+"` r LEFT JOIN `"+tbl.candidate+"` c ON c.lock_name = r.lock_name AND c.identity = r.holder "+
			"SET r.renewed_at = UTC_TIMESTAMP(6), c.seen_at = UTC_TIMESTAMP(6) "+
			"WHERE r.conn_id = ? AND NOT (r.demote_epoch <=> r.epoch) AND IS_USED_LOCK(r.lock_name) = CONNECTION_ID() AND", s.id)+in)
		if err != nil {
			return err
		}
		if n, err := res.RowsAffected(); err == nil && n == int64(2*len(holding)) {
			for _, m := range holding { // every record, and each one's candidate row, matched
				r.results[m.lock] = nil
			}
			return nil
		}
		for _, m := range holding {
			r.results[m.lock] = fmt.Errorf("%w: the keepalive matched no record", ErrLockLost)
		}
		rows, err := conn.QueryContext(ctx, text("SELECT r.lock_name, IS_USED_LOCK(r.lock_name), r.epoch, r.conn_id = ?, r.demote_epoch <=> r.epoch, r.handover_to "+
			"FROM `"+tbl.record+"` r WHERE r.lock_name IN ("+strings.Join(locks, ", ")+")", s.id))
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var (
				lock          string
				owner         sql.NullInt64
				epoch         uint64
				ours, demoted bool
				handTo        sql.NullString
			)
			if err := rows.Scan(&lock, &owner, &epoch, &ours, &demoted, &handTo); err != nil {
				return err
			}
			switch m := byLock[lock]; {
			case !owner.Valid || uint64(owner.Int64) != s.id:
				r.results[lock] = fmt.Errorf("%w: IS_USED_LOCK is %v, this session is %d", ErrLockLost, owner.Int64, s.id)
			case !ours || epoch != m.token:
				r.results[lock] = fmt.Errorf("%w: the record names another term", ErrLockLost)
			case demoted:
				r.results[lock] = demotion(handTo)
			default:
				// Renewed: what made the record match cannot have come back
				// between the two statements.
				r.results[lock] = nil
			}
		}
		return rows.Err()
	})
	if err != nil {
		for _, m := range holding {
			r.results[m.lock] = fmt.Errorf("%w: keepalive: %w", ErrSessionLost, err)
		}
	}
}

// acquire waits, on a shared session, until this candidate has won the
// election and opened a term: the poll takes the lock, the candidate
// starts the term on the session. With try, it tries the lock once, now.
func (sh *sessionShare) acquire(ctx context.Context, g *getLock, lock string, try bool) (won, error) {
	m, err := sh.join(ctx, g.st, g.log, lock)
	if err != nil {
		return won{}, err
	}
	for {
		var sent time.Time
		if try {
			var got sql.NullInt64
			sent = time.Now()
			if err := m.s.do(func(conn *sql.Conn) error {
				return conn.QueryRowContext(ctx, text("SELECT GET_LOCK(?, 0)", lock)).Scan(&got)
			}); err != nil {
				m.leave()
				return won{}, err
			}
			if got.Int64 != 1 {
				m.leave()
				return won{}, ErrHeld
			}
		} else {
			m.s.mu.Lock()
			m.waiting = true
			m.s.mu.Unlock()
			select {
			case sent = <-m.won:
			case <-m.s.lost:
				m.leave()
				return won{}, m.s.err
			case <-ctx.Done():
				m.leave()
				return won{}, ctx.Err()
			}
		}
		delay, p, err := m.start(ctx)
		if err == nil {
			return won{h: m, token: m.token, sent: sent, delay: delay, p: p}, nil
		}
		if !errors.Is(err, errYield) || try {
			if errors.Is(err, errYield) {
				err = ErrHeld
			}
			m.leave()
			return won{}, err
		}
		// A hand-over to another candidate is pending: give the lock back,
		// and let the target take it before this one tries again.
		if err := m.s.do(func(conn *sql.Conn) error {
			_, err := conn.ExecContext(ctx, text("DO RELEASE_LOCK(?)", lock))
			return err
		}); err != nil {
			m.leave()
			return won{}, err
		}
		m.s.mu.Lock()
		m.skip = time.Now().Add(g.st.cfg.CheckInterval)
		m.s.mu.Unlock()
		m.log.Info("yielded the lock to a pending hand-over")
	}
}

// start opens the term on the session, as pinned.startTerm does.
func (m *sharedCandidate) start(ctx context.Context) (delay time.Duration, p predecessor, err error) {
	ctx, cancel := context.WithTimeout(ctx, m.st.cfg.tryLimit())
	defer cancel()
	err = m.s.do(func(conn *sql.Conn) (err error) {
		m.token, delay, p, err = termStart{m.st, m.lock, m.s.id}.open(ctx, conn)
		return err
	})
	if err == nil {
		m.s.mu.Lock()
		m.holding = true
		m.s.mu.Unlock()
	}
	return delay, p, err
}

// leave gives up the candidate's locks on the session and removes it; the
// last candidate to leave closes the session.
func (m *sharedCandidate) leave() {
	s := m.s
	ctx, cancel := context.WithTimeout(context.Background(), m.st.cfg.Interval)
	defer cancel()
	s.do(func(conn *sql.Conn) error {
		_, err := conn.ExecContext(ctx, text("DO RELEASE_LOCK(?), RELEASE_LOCK(?)", m.lock, candidateLock(m.lock, m.st.cfg.Identity)))
		return err
	})
	s.sh.mu.Lock()
	s.mu.Lock()
	delete(s.members, m.lock)
	last := len(s.members) == 0
	if last && s.err == nil {
		s.err = fmt.Errorf("%w: the shared session %d was closed", ErrSessionLost, s.id)
		close(s.lost)
		for i, o := range s.sh.sessions {
			if o == s {
				s.sh.sessions = append(s.sh.sessions[:i], s.sh.sessions[i+1:]...)
				break
			}
		}
	}
	s.mu.Unlock()
	s.sh.mu.Unlock()
	if last {
		close(s.quit)
		<-s.gone
	}
	s.sh.done()
}

// begin writes the term's history through the pool, a few starts at a
// time: a process that wins many elections at once must not open a
// session for each.
func (m *sharedCandidate) begin(ctx context.Context, started time.Time, p predecessor) error {
	select {
	case m.s.sh.starts <- struct{}{}:
		defer func() { <-m.s.sh.starts }()
	case <-ctx.Done():
		return ctx.Err()
	}
	return termStart{m.st, m.lock, m.s.id}.writeHistory(ctx, m.st.db, m.token, p, started)
}

// renew waits for the session's next renewal, which is sent after this
// call, and returns its outcome for this term.
func (m *sharedCandidate) renew(ctx context.Context) error {
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
	case <-ctx.Done():
		return fmt.Errorf("%w: keepalive: %w", ErrSessionLost, ctx.Err())
	}
}

// release records why the term ended, then frees the election's lock on
// the session, in one use of it, so that no renewal comes between.
func (m *sharedCandidate) release(ctx context.Context, end ending) error {
	m.stopRenewing()
	return m.s.do(func(conn *sql.Conn) error {
		if err := m.st.endTerm(ctx, conn, m.lock, m.token, end); err != nil {
			return err
		}
		var released sql.NullInt64
		if err := conn.QueryRowContext(ctx, text("SELECT RELEASE_LOCK(?)", m.lock)).Scan(&released); err != nil {
			return err
		}
		if released.Int64 != 1 {
			return errors.New("RELEASE_LOCK: this session did not hold the lock")
		}
		return nil
	})
}

// lost records, through the pool, why a term ended that the leader did
// not end; close then frees the lock, if the session still holds it.
func (m *sharedCandidate) lost(ctx context.Context, end ending) error {
	m.stopRenewing()
	return m.st.endTerm(ctx, m.st.db, m.lock, m.token, end)
}

func (m *sharedCandidate) stopRenewing() {
	m.s.mu.Lock()
	m.holding = false
	m.s.mu.Unlock()
}

// close leaves the shared session: the next campaign joins again.
func (m *sharedCandidate) close() {
	m.stopRenewing()
	m.leave()
}

package election

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/sqlelect/election/internal/failpoint"
)

// StaleTokenError reports a write refused because a newer term exists (or
// the writer's own term has ended). It wraps ErrFenced.
type StaleTokenError struct {
	Resource string // what was written, where the checker knows it
	Token    uint64 // the token the write carried
	Current  uint64 // the newest token known; 0 if the term ended locally
	Cause    error  // why the term ended, for a locally ended term
	// Failed is the error a fenced transaction failed with when its term
	// ended while it was open: the server aborted it (a deadlock or, on
	// Galera, the newer term's epoch bump), or the term's context or the
	// server's wait_timeout ended it. Nothing of it was committed. It is
	// not unwrapped: retrying it would retry a stale write.
	Failed error
}

// Error says which token was refused, and what superseded it.
func (e *StaleTokenError) Error() string {
	var msg string
	switch {
	case e.Cause != nil:
		msg = fmt.Sprintf("election: stale fencing token %d: the term has ended: %v", e.Token, e.Cause)
	case e.Resource != "":
		msg = fmt.Sprintf("election: stale fencing token %d for %q: %d has been seen", e.Token, e.Resource, e.Current)
	default:
		msg = fmt.Sprintf("election: stale fencing token %d: the election is at %d", e.Token, e.Current)
	}
	if e.Failed != nil {
		msg += fmt.Sprintf(" (the transaction was rolled back: %v)", e.Failed)
	}
	return msg
}

// Unwrap returns ErrFenced.
func (e *StaleTokenError) Unwrap() error { return ErrFenced }

// Fenced runs fn in a transaction on the elector's database that commits
// only while this term is the election's newest. It first takes a shared
// lock on the election's epoch row and checks that it still equals the
// term's token; a new term must bump that row, so it starts only after this
// transaction ends, and every write fn makes commits before any write of a
// later term. If the term has ended locally, or a newer term exists, Fenced
// returns a *StaleTokenError (errors.Is(err, ErrFenced)) and fn does not run;
// if the term ends, or its lease runs out, while fn runs, the transaction is
// rolled back instead of committed, with the same error.
// If fn returns an error the transaction is rolled back and the error is
// returned. A transaction that fails because its term ended while it was
// open fails the same way, on every platform: aborted by the server (on
// Galera, by the newer term's epoch bump: error 1213), ended with ctx (the
// term's context, say), or its session dropped by the server's
// wait_timeout; nothing of it was committed, and the failure is in the
// error's Failed, not unwrapped, so that code that retries
// driver.ErrBadConn does not retry a stale write. Only a COMMIT whose
// connection failed while it was in flight is reported as of unknown
// outcome, and one that the server still held Interval after the term
// ended: its session is killed then, so that Fenced does not wait for the
// server after its term (not on Galera).
//
// The transaction runs on a session the term keeps for its fenced
// transactions, not on the pinned one, so a long one does not delay
// keepalives; it does delay the next term's start. That session has the
// candidates' wait_timeout (Lease+Margin), set once when the term first
// needs it, so that a leader that stops inside a transaction cannot block
// the election: fn must not leave the transaction idle for that long (no
// statement sent: time spent in fn between statements counts), or the
// server drops the session and Fenced fails ("bad connection"), however
// often it is retried. Work that may take longer belongs outside: claim it
// in one Fenced call, do it, and record it in another only if the claim
// stands (examples/queue). A
// Fenced that finds it busy runs on a pool session of its own, with the
// same wait_timeout while it runs. No session goes back to the pool with
// that wait_timeout: the term closes its own when it ends, or when it has
// been idle for nearly that long. In a pool bounded by SetMaxOpenConns the
// term keeps it only while another connection is left for the rest of the
// program, and otherwise gives it back after each transaction, reset.
func (t *Term) Fenced(ctx context.Context, fn func(tx *sql.Tx) error) error {
	return t.FencedTx(ctx, nil, fn)
}

// FencedTx is Fenced with the transaction's options, as sql.DB.BeginTx
// takes them: an isolation level, or ReadOnly for reads that must see only
// what this term may act on (a leader's consistent read under its token,
// refused once a newer term exists). nil is Fenced. The fence holds at
// every isolation level: its check is a locking read, which sees the
// newest epoch whatever the level. The server may refuse an option: TiDB
// refuses READ ONLY (error 1235) and SERIALIZABLE (8048); on Galera and
// multi-primary Group Replication, where the fence writes the epoch row
// (platform.certifies), ReadOnly is refused with ErrUnsupported.
func (t *Term) FencedTx(ctx context.Context, opts *sql.TxOptions, fn func(tx *sql.Tx) error) error {
	if !t.IsLeader() {
		return &StaleTokenError{Token: t.token, Cause: t.endCause()}
	}
	if err := oneConnection(t.st.db); err != nil {
		return err
	}
	if server, _ := t.st.settled(); opts != nil && opts.ReadOnly && server.certifies() {
		return fmt.Errorf("%w: a fenced transaction cannot be READ ONLY on Galera or multi-primary Group Replication, where its check writes the epoch row; leave ReadOnly unset", ErrUnsupported)
	}
	lock, err := t.st.resolveLock(ctx)
	if err != nil {
		return err
	}
	// The transaction ends with the term: a function stopped inside it
	// (one that never returns) must not hold the epoch row, and with it the
	// next term's start, until the server drops its session. database/sql
	// rolls it back when its context ends, unless its COMMIT has begun
	// (which commit bounds).
	txCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	defer context.AfterFunc(t.ctx, cancel)()
	s, tx, err := t.kept.begin(txCtx, opts)
	if errors.Is(err, errTermOver) {
		return &StaleTokenError{Token: t.token, Cause: t.endCause()}
	}
	if err != nil {
		return fmt.Errorf("election: fenced transaction: %w", err)
	}
	// Only a COMMIT or ROLLBACK of ours that succeeded proves that the
	// session is idle: after a cancelled ctx, database/sql may still be
	// rolling back in the background, and would roll back the next
	// transaction on it instead.
	clean := false
	defer func() {
		if !clean {
			tx.Rollback() // fn panicked; a no-op once the transaction has ended
		}
		t.kept.put(ctx, s, clean)
	}()
	f := fencedTxn{t: t, lock: lock, tx: tx}
	err = f.check(ctx)
	if err == nil {
		err = fn(tx)
	}
	switch {
	case err == nil && ctx.Err() != nil:
		// database/sql rolls back a transaction whose context ended and
		// would not send the COMMIT: say so before trying.
		err = fmt.Errorf("election: fenced transaction: not committed: %w", ctx.Err())
	case err == nil && !t.IsLeader():
		// The term ended, or its lease ran out (the process paused, say),
		// while fn ran: a newer term may have begun, where no row lock
		// reaches (Galera).
		err = &StaleTokenError{Token: t.token, Cause: t.endCause()}
	}
	if err != nil {
		clean = tx.Rollback() == nil
		return f.staleOr(ctx, err)
	}
	failpoint.Hit(ctx, failpoint.Committing)
	if err := f.commit(ctx); err != nil {
		// A context ended before the COMMIT was sent: database/sql rolls the
		// transaction back (the term ended, and txCtx with it).
		if rolledBack(err) || txCtx.Err() != nil && (errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)) {
			return f.staleOr(ctx, fmt.Errorf("election: fenced transaction: committing: %w", err))
		}
		return fmt.Errorf("election: fenced transaction: committing, with an unknown outcome: %w", err)
	}
	clean = true
	return nil
}

// rolledBack reports whether a failed COMMIT certainly committed nothing:
// the server refused it, database/sql had ended the transaction, or the
// driver found the session closed before sending. A connection lost, or a
// context ended, while the COMMIT was in flight leaves the outcome unknown.
func rolledBack(err error) bool {
	var me *mysql.MySQLError
	return errors.As(err, &me) || errors.Is(err, sql.ErrTxDone) || errors.Is(err, driver.ErrBadConn)
}

// staleOr returns err, from a fenced transaction that committed nothing,
// as a *StaleTokenError if it is a failure of the transaction itself (the
// server's, the session's, the context's) and the term was over when it
// happened: ended locally, or superseded in the election (the epoch is
// read again to tell: on Galera the newer term's bump aborts the
// transaction with error 1213). Errors of fn's own are returned as they
// are.
func (f fencedTxn) staleOr(ctx context.Context, err error) error {
	t := f.t
	var me *mysql.MySQLError
	switch {
	case errors.Is(err, ErrFenced):
		return err
	case !errors.As(err, &me) && !errors.Is(err, driver.ErrBadConn) && !errors.Is(err, mysql.ErrInvalidConn) &&
		!errors.Is(err, sql.ErrTxDone) && !errors.Is(err, sql.ErrConnDone) &&
		!errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded):
		return err
	case !t.IsLeader():
		return &StaleTokenError{Token: t.token, Cause: t.endCause(), Failed: err}
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), t.st.cfg.Interval)
	defer cancel()
	if current, rerr := t.st.causalEpoch(ctx, f.lock); rerr == nil && current > t.token {
		return &StaleTokenError{Token: t.token, Current: current, Failed: err}
	}
	return err
}

// begin starts a transaction on the term's kept session, or, while another
// fenced transaction has it, on a pool session of its own. A kept session
// that the server dropped while it was idle (past its wait_timeout, or
// killed) fails at BEGIN, before anything ran: begin drops it and tries
// once more, on a fresh session.
func (k *keptSession) begin(ctx context.Context, opts *sql.TxOptions) (*fencedConn, *sql.Tx, error) {
	for retry := true; ; retry = false {
		s, err := k.take(ctx)
		if err != nil {
			return nil, nil, err
		}
		tx, err := s.BeginTx(ctx, opts)
		if err == nil {
			return s, tx, nil
		}
		k.put(ctx, s, false)
		// MySQL 8.0.24+ writes why it closes an idle session (4031,
		// ER_CLIENT_INTERACTION_TIMEOUT) before it does (its 8.0.24 release
		// notes, WL #14425; read, not tested here).
		if !s.reused || !retry || ctx.Err() != nil || !errors.Is(err, driver.ErrBadConn) && !errors.Is(err, mysql.ErrInvalidConn) && !serverError(err, 4031) {
			return nil, nil, err // a refused option fails the same way on any session
		}
	}
}

// commit sends tx's COMMIT. database/sql's Commit takes no context: a
// COMMIT that the server holds (waiting for a semi-synchronous replica's
// acknowledgement, a backup's commit lock, a disk that stalls) would hold
// Fenced, and with it Run's function, for as long, after the term has
// ended. So if the term ends while the COMMIT is in flight, the session is
// killed, Interval later, from the pool: its COMMIT then fails, with an
// unknown outcome. Not where the platform forbids it (killsCommits), nor
// behind a proxy that reaches another server: the kill checks that it
// reaches the session's server.
func (f fencedTxn) commit(ctx context.Context) error {
	t, s := f.t, f.session
	if server, _ := t.st.settled(); !server.killsCommits() {
		return f.tx.Commit()
	}
	done, watched := make(chan struct{}), make(chan struct{})
	stop := context.AfterFunc(t.ctx, func() { // no goroutine unless the term ends
		defer close(watched)
		select {
		case <-done:
			return
		case <-time.After(t.st.cfg.Interval):
		}
		if err := t.st.killSession(ctx, s); err != nil {
			t.log.Warn("could not kill the session of a COMMIT sent before the term ended", "conn_id", s.id, "err", err)
		}
	})
	err := f.tx.Commit()
	close(done)
	if !stop() {
		<-watched // no kill after Fenced has returned
	}
	return err
}

// fencedTxn is one fenced transaction of term t: its transaction, and its
// server session as check read it.
type fencedTxn struct {
	t       *Term
	lock    string
	tx      *sql.Tx
	session fencedSession
}

// check takes the shared lock on the epoch row and compares it with the
// token. The same statement reads the session's wait_timeout: fn of an
// earlier transaction on the kept session may have changed it, and a leader
// stopped inside this one would then hold the epoch row that long; and who
// the session is, for commit.
func (f *fencedTxn) check(ctx context.Context) error {
	t, tx, lock := f.t, f.tx, f.lock
	server, _ := t.st.settled()
	current, wait, session, err := t.st.fenceRead(ctx, tx, lock, server)
	f.session = session
	if err != nil {
		return fmt.Errorf("election: fenced transaction: reading the epoch: %w", err)
	}
	if current != t.token {
		return &StaleTokenError{Token: t.token, Current: current}
	}
	if server.certifies() {
		// A multi-primary cluster replicates no locks: a newer term's bump,
		// made on another member, would not wait for this transaction.
		// Changing the epoch row and changing it back puts the row in this
		// transaction's write set, so that certification refuses whichever
		// of the two commits second (see conflict; read as fenced), and a
		// bump applied on this member first aborts it on the row lock.
		if err := t.st.writeEpochBack(ctx, tx, lock); err != nil {
			return fmt.Errorf("election: fenced transaction: entering the epoch in the write set: %w", err)
		}
	}
	if w := t.st.cfg.waitTimeout(); wait != w {
		if _, err := tx.ExecContext(ctx, server.setWaitTimeout(w)); err != nil {
			return fmt.Errorf("election: fenced transaction: restoring wait_timeout: %w", err)
		}
	}
	return nil
}

// errTermOver is keptSession.take's answer once the term has ended.
var errTermOver = errors.New("election: the term has ended")

// keptSession is the server session a term keeps for its fenced
// transactions, so that each one costs a single statement more than the
// same plain transaction: its wait_timeout is set once, not set and reset
// around every transaction.
type keptSession struct {
	st   *store
	none bool // keep none: the term is on a shared session, and its process may lead many

	mu     sync.Mutex
	conn   *sql.Conn // idle, or nil: none yet, dropped, or busy
	since  time.Time // when conn went idle
	busy   bool      // a fenced transaction runs on it
	closed bool      // the term has ended: nothing is kept any more
}

// fencedConn is the session of one fenced transaction.
type fencedConn struct {
	*sql.Conn
	kept   bool // the term's own, not a pool session of this transaction's
	reused bool // kept from an earlier transaction: the server may have dropped it since
}

// take returns the kept session, opening it if there is none, or, while it
// is busy, a pool session of the caller's own. Either way the caller holds
// one pool session, never two: with SetMaxOpenConns(2) and a pinned
// candidate, a second would wait forever.
func (k *keptSession) take(ctx context.Context) (*fencedConn, error) {
	k.mu.Lock()
	if k.closed {
		k.mu.Unlock()
		return nil, errTermOver
	}
	if k.busy {
		k.mu.Unlock()
		conn, err := k.newSession(ctx)
		if err != nil {
			return nil, err
		}
		return &fencedConn{Conn: conn}, nil
	}
	conn := k.conn
	k.conn, k.busy = nil, true
	k.mu.Unlock()
	if conn != nil {
		return &fencedConn{Conn: conn, kept: true, reused: true}, nil
	}
	conn, err := k.newSession(ctx)
	if err != nil {
		k.mu.Lock()
		k.busy = false
		k.mu.Unlock()
		return nil, err
	}
	return &fencedConn{Conn: conn, kept: true}, nil
}

// newSession takes a session from the pool and gives it the candidates'
// wait_timeout.
func (k *keptSession) newSession(ctx context.Context) (*sql.Conn, error) {
	conn, err := k.st.db.Conn(ctx)
	if err != nil {
		return nil, err
	}
	server, _ := k.st.settled()
	if _, err := conn.ExecContext(ctx, server.setWaitTimeout(k.st.cfg.waitTimeout())); err != nil {
		drop(conn)
		return nil, err
	}
	return conn, nil
}

// put ends a transaction's use of its session. The term keeps its own
// after a clean end, unless the term has ended or the pool is crowded. A
// session that is not kept goes back to the pool with the server's default
// wait_timeout, but is dropped when its state is in doubt, and so is the
// term's own once the term has ended: it may carry what fn left on it over
// many transactions.
func (k *keptSession) put(ctx context.Context, s *fencedConn, clean bool) {
	back := clean
	if s.kept {
		k.mu.Lock()
		k.busy = false
		keep := clean && !k.closed && !k.none && !k.crowded()
		if keep {
			k.conn, k.since = s.Conn, time.Now()
		}
		back = clean && !k.closed && !keep
		k.mu.Unlock()
		if keep {
			return
		}
	}
	if !back {
		drop(s.Conn)
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), k.st.cfg.Interval)
	defer cancel()
	server, _ := k.st.settled()
	if _, err := s.ExecContext(ctx, server.resetWaitTimeout()); err != nil {
		drop(s.Conn)
		return
	}
	s.Close()
}

// crowded reports whether the pool is bounded and has no connection left
// but those in use, the kept one among them: keeping it could make the
// rest of the program wait for as long as the term lasts.
func (k *keptSession) crowded() bool {
	st := k.st.db.Stats()
	return st.MaxOpenConnections > 0 && st.InUse >= st.MaxOpenConnections
}

// spare drops the idle kept session if the pool is crowded, or if the
// server would soon end it for its wait_timeout: a session the server ends
// is an aborted client in its log, and a failed BEGIN for the next Fenced.
// The keepalive loop calls it every Interval, so that the kept session
// holds the last connection of a bounded pool no longer than that while
// others wait.
func (k *keptSession) spare() {
	cfg := k.st.cfg
	// An interval for the next call, and one for a late one.
	old := time.Duration(cfg.waitTimeout())*time.Second - 2*cfg.Interval
	k.mu.Lock()
	var conn *sql.Conn
	if k.conn != nil && (k.crowded() || time.Since(k.since) >= old) {
		conn, k.conn = k.conn, nil
	}
	k.mu.Unlock()
	if conn != nil {
		drop(conn)
	}
}

// close ends the keeping when the term ends: an idle session is dropped at
// once, a busy one when its transaction ends, and no later Fenced opens
// one.
func (k *keptSession) close() {
	k.mu.Lock()
	conn := k.conn
	k.conn, k.closed = nil, true
	k.mu.Unlock()
	if conn != nil {
		drop(conn)
	}
}

// TokenHeader is the HTTP header that carries a fencing token from a
// leader to a downstream store.
const TokenHeader = "Fencing-Token"

// SetToken puts the term's token in h, for a request to a downstream store
// that checks it (see Fence.Handler).
func (t *Term) SetToken(h http.Header) { h.Set(TokenHeader, strconv.FormatUint(t.token, 10)) }

// TokenFrom reads the fencing token of a request's headers. More than one
// token header is refused: a proxy in front might read another one than
// the store.
func TokenFrom(h http.Header) (uint64, error) {
	vs := h.Values(TokenHeader)
	if len(vs) > 1 {
		return 0, fmt.Errorf("election: %d %s headers; send one", len(vs), TokenHeader)
	}
	v := h.Get(TokenHeader)
	if v == "" {
		return 0, fmt.Errorf("election: no %s header", TokenHeader)
	}
	token, err := strconv.ParseUint(v, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("election: %s header %q is not a token", TokenHeader, v)
	}
	return token, nil
}

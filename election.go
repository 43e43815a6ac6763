// Package election elects one leader among many candidates through a MySQL
// or MariaDB server that the candidates already use.
//
// With the default strategy, GetLock, each candidate pins one session from
// the caller's *sql.DB and blocks in GET_LOCK. The winner bumps a
// per-election epoch, which is the term's fencing token, and keeps the
// session busy with keepalives that confirm it still holds the lock. When
// the leader's process dies the server frees the lock and the next candidate
// leads milliseconds later. The LeaseRow strategy holds the election with a
// lease in a row instead, for Galera, multi-primary Group Replication and
// connection-multiplexing proxies, at the price of failing over only after
// Lease+Margin.
//
// Run is the usual entry point: it campaigns, runs the leader's function
// with a context cancelled when leadership is lost, and campaigns again.
// Campaign and Term give finer control, Term.Fenced and Fence make writes
// safe against stale leaders, TryRun runs a scheduled task on one instance
// only, and Leader, Watch, History, Candidates, Demote and Handover serve
// operators (see cmd/electctl).
//
// # Timing contract
//
// Interval (I) is how often the leader renews; Lease (L) is how long it may
// act after the last confirmed keepalive, measured from the moment that
// keepalive was sent, on its own monotonic clock; Margin (S) is the time
// between the end of that lease and the earliest moment the server can give
// the lock to someone else. Every pinned session gets wait_timeout
// W = L + S, rounded up to whole seconds, so a leader that stops talking
// (paused, partitioned, its host dead) is dropped by the server W after its
// last command, which is S after its own lease has already ended its term.
//
// # Guarantees and limits
//
// While the server keeps the leader's session alive, no other candidate can
// hold the lock. A leader that loses the server's attention ends its term,
// and cancels the term's context, before the server frees the lock, provided
// its clock runs at most S/L slower than the server's and its code stops
// acting within S of the cancellation.
//
// The server itself may end a live leader's session (a restart, a DBA's
// KILL, a proxy reset). The next candidate then leads at once, while the old
// leader learns of it at its next keepalive, within I. Only writes checked
// with the term's fencing token are safe in that window: use Term.Fenced in
// the same database and Fence (or the token) in downstream stores. Writes
// that do not check the token are not fenced.
//
// Tokens are durable InnoDB rows. A failover to an asynchronous replica that
// lost the last commits can hand out a token twice; back the election with
// semi-synchronous replication or a single-primary Group Replication cluster.
// GET_LOCK is not cluster-wide on Galera or multi-primary Group Replication.
package election

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"os"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/cenkalti/backoff/v4"
)

// Defaults of the timing contract; see the package documentation.
const (
	DefaultInterval = time.Second
	DefaultLease    = 5 * time.Second
	DefaultMargin   = time.Second
)

// DefaultHistoryLimit is how many past terms each election keeps.
const DefaultHistoryLimit = 1000

// maxWaitTimeout is the largest wait_timeout the server accepts, in seconds.
const maxWaitTimeout = 31536000

// Errors callers branch on. Errors the package returns wrap them; use
// errors.Is.
var (
	// ErrInvalidConfig: New was given input it cannot use; the message says
	// which and how to fix it.
	ErrInvalidConfig = errors.New("election: invalid configuration")
	// ErrSchema: the tables are missing or the user may not use them; the
	// message carries the DDL to run.
	ErrSchema = errors.New("election: tables missing or not usable")
	// ErrCampaigning: this Elector already campaigns or leads; one Elector is
	// one candidate.
	ErrCampaigning = errors.New("election: this elector is already campaigning or leading")
	// ErrHeld: TryRun found the election led by another candidate.
	ErrHeld = errors.New("election: held by another candidate")
	// ErrNoLeader: nobody leads the election now.
	ErrNoLeader = errors.New("election: no leader")
	// ErrFenced: a write was refused because its term is no longer the
	// newest; nothing was written.
	ErrFenced = errors.New("election: stale fencing token")

	// Why a term ended (Term.Err). A term also ends when the context given
	// to Campaign ends; Term.Err then returns that context's cause.

	// ErrResigned: Resign was called.
	ErrResigned = errors.New("election: resigned")
	// ErrLeaseExpired: no keepalive was confirmed within the lease.
	ErrLeaseExpired = errors.New("election: lease expired")
	// ErrSessionLost: the pinned session failed: killed, timed out, its
	// network dropped or the server restarted.
	ErrSessionLost = errors.New("election: database session lost")
	// ErrLockLost: the session is alive but no longer holds the election,
	// or the record names another term.
	ErrLockLost = errors.New("election: lock no longer held")
	// ErrDemoted: an operator asked the leader to step down (Demote,
	// Handover) and it did.
	ErrDemoted = errors.New("election: demoted")

	// ErrNotCandidate: a hand-over named a candidate that is not alive.
	ErrNotCandidate = errors.New("election: not a live candidate")
	// ErrKillDenied: the server refused to kill a stuck leader's session;
	// the message names the privilege to grant.
	ErrKillDenied = errors.New("election: not allowed to kill the leader's session")
	// ErrStrategy: candidates of another strategy run this election.
	ErrStrategy = errors.New("election: the election runs with another strategy")
	// ErrUnsupported: the server cannot give this strategy's guarantees (for
	// GetLock: Galera, multi-primary Group Replication); the message names
	// the strategy to use.
	ErrUnsupported = errors.New("election: strategy not supported by this server")
)

// Strategy is how candidates hold an election.
type Strategy int

const (
	// GetLock (the default) pins one session per candidate and holds the
	// election with GET_LOCK: failover in milliseconds when a leader dies.
	GetLock Strategy = iota
	// LeaseRow holds the election with a lease in the record row, renewed
	// every Interval through the pool: no pinned session, so it works
	// through proxies and on Galera and multi-primary Group Replication,
	// but a dead leader is replaced only after Lease+Margin.
	LeaseRow
)

// String returns the name stored in the record: "get_lock" or "lease".
func (s Strategy) String() string {
	switch s {
	case GetLock:
		return "get_lock"
	case LeaseRow:
		return "lease"
	}
	return fmt.Sprintf("Strategy(%d)", int(s))
}

// Config tunes an Elector. The zero value of every field means its default.
// New checks the timings as a whole; see the package documentation for what
// they mean together.
type Config struct {
	// Strategy is GetLock (default) or LeaseRow. Every candidate of an
	// election must use the same one; a candidate of another is refused
	// with ErrStrategy while one is alive.
	Strategy Strategy
	// Identity names this candidate in the record, to operators and in
	// logs. Default: host-pid-random. At most 255 characters. Give every
	// candidate its own.
	Identity string
	// Interval is how often the leader renews its keepalive. Default 1s.
	Interval time.Duration
	// Lease is how long the leader may act after a keepalive it sent was
	// confirmed, on its local monotonic clock. Default 5s; at least
	// 2×Interval, so that one slow keepalive does not end a term.
	Lease time.Duration
	// Margin is how long after the lease ends the server may first free the
	// lock of a silent leader. Default 1s. It covers the leader's clock
	// running slow and the time its code takes to stop after its context is
	// cancelled.
	Margin time.Duration
	// CheckInterval is how long a waiting candidate blocks in GET_LOCK
	// before it looks again. Default Interval. It must be below the DSN's
	// readTimeout, if one is set.
	CheckInterval time.Duration
	// TablePrefix starts the table names. Default DefaultTablePrefix.
	TablePrefix string
	// SkipCreateTables stops the Elector from creating missing tables on
	// first use; see SchemaDDL.
	SkipCreateTables bool
	// HistoryLimit bounds the term history kept per election. Default
	// DefaultHistoryLimit.
	HistoryLimit int
	// Logger receives the Elector's structured logs. Default: none.
	Logger *slog.Logger
	// Observer receives the Elector's events, for metrics. Default: none.
	Observer *Observer
}

// Observer receives an Elector's events, for metrics and tracing. Every
// field is optional. The functions are called synchronously from the
// Elector's goroutines: they must be fast and must not call the Elector.
type Observer struct {
	// TermStarted: this candidate began a term.
	TermStarted func(election, identity string, token uint64)
	// TermEnded: the term ended; reason is as in TermRecord.Reason.
	TermEnded func(election, identity string, token uint64, reason string)
	// Renewed: a keepalive finished after latency; err is nil if it was
	// confirmed.
	Renewed func(election string, latency time.Duration, err error)
	// Killed: this candidate killed (err nil) or failed to kill the session
	// of a stuck or disobedient leader; reason is hang-killed or
	// demote-killed.
	Killed func(election, reason string, err error)
	// CampaignFailed: a campaign under Run failed and will be retried.
	CampaignFailed func(election string, err error)
}

// waitTimeout is the pinned sessions' wait_timeout W, in whole seconds.
func (c Config) waitTimeout() int64 {
	return int64(math.Ceil((c.Lease + c.Margin).Seconds()))
}

func (c Config) withDefaults() Config {
	if c.Interval == 0 {
		c.Interval = DefaultInterval
	}
	if c.Lease == 0 {
		c.Lease = DefaultLease
	}
	if c.Margin == 0 {
		c.Margin = DefaultMargin
	}
	if c.CheckInterval == 0 {
		c.CheckInterval = c.Interval
	}
	if c.TablePrefix == "" {
		c.TablePrefix = DefaultTablePrefix
	}
	if c.HistoryLimit == 0 {
		c.HistoryLimit = DefaultHistoryLimit
	}
	if c.Identity == "" {
		c.Identity = defaultIdentity()
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.Observer == nil {
		c.Observer = &Observer{}
	}
	return c
}

func (c Config) validate() error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: "+format, append([]any{ErrInvalidConfig}, args...)...)
	}
	switch {
	case c.Interval < time.Millisecond:
		return bad("Interval %v is below 1ms: keepalives that often would load the server; use 100ms or more", c.Interval)
	case c.Lease < 2*c.Interval:
		return bad("Lease %v must be at least 2×Interval (%v), so that one slow keepalive does not end the term: raise Lease or lower Interval", c.Lease, c.Interval)
	case c.Margin < time.Millisecond:
		return bad("Margin %v is below 1ms: it must cover clock drift and the time your code takes to stop; the default is %v", c.Margin, DefaultMargin)
	case c.CheckInterval < time.Millisecond:
		return bad("CheckInterval %v is below 1ms", c.CheckInterval)
	case c.waitTimeout() > maxWaitTimeout:
		return bad("Lease+Margin %v exceeds what the server's wait_timeout can express (%ds)", c.Lease+c.Margin, maxWaitTimeout)
	case len(c.Identity) > 255 || !utf8.ValidString(c.Identity):
		return bad("Identity %q must be valid UTF-8 of at most 255 bytes", c.Identity)
	case c.HistoryLimit < 1:
		return bad("HistoryLimit %d must be at least 1", c.HistoryLimit)
	case c.Strategy != GetLock && c.Strategy != LeaseRow:
		return bad("Strategy %v is unknown: use election.GetLock or election.LeaseRow", c.Strategy)
	}
	return validatePrefix(c.TablePrefix)
}

func defaultIdentity() string {
	host, _ := os.Hostname()
	b := make([]byte, 3)
	rand.Read(b)
	return fmt.Sprintf("%s-%d-%s", host, os.Getpid(), hex.EncodeToString(b))
}

// Elector is one candidate in one election. It is safe for concurrent use;
// at most one Campaign or Run is under way at a time.
type Elector struct {
	db   *sql.DB
	name string
	cfg  Config
	tbl  tables
	log  *slog.Logger

	mu       sync.Mutex
	ready    bool   // tables checked and lock name known
	lockName string // derived from the database name on first use
	busy     bool   // a campaign or a term is under way
	claim    uint64 // counts campaigns, so that a late keeper releases only its own
	term     *Term  // the current term, if any
	running  *Term  // the term whose function Run is running

	stats struct{ terms, kills, killsDenied, demotions atomic.Uint64 }
}

// Stats counts what an Elector has done since New.
type Stats struct {
	Terms       uint64 // terms this candidate started
	Kills       uint64 // sessions of stuck or disobedient leaders it killed
	KillsDenied uint64 // kills the server refused (see ErrKillDenied)
	Demotions   uint64 // demotions and hand-overs it requested
}

// Stats returns the Elector's counters.
func (e *Elector) Stats() Stats {
	return Stats{
		Terms:       e.stats.terms.Load(),
		Kills:       e.stats.kills.Load(),
		KillsDenied: e.stats.killsDenied.Load(),
		Demotions:   e.stats.demotions.Load(),
	}
}

// New returns a candidate for the election called name on db. It validates
// its input but does no I/O; the tables are created, and the server
// checked, on first use. Names may be any UTF-8 string of up to 64 KiB.
// db must allow at least two open connections: a candidate pins one.
func New(db *sql.DB, name string, cfg Config) (*Elector, error) {
	if db == nil {
		return nil, fmt.Errorf("%w: db is nil", ErrInvalidConfig)
	}
	if err := validateName(name); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if n := db.Stats().MaxOpenConnections; n == 1 {
		return nil, fmt.Errorf("%w: db allows only one open connection, which the candidate pins, so fenced transactions would wait forever: call db.SetMaxOpenConns(2) or more", ErrInvalidConfig)
	}
	return &Elector{
		db:   db,
		name: name,
		cfg:  cfg,
		tbl:  tablesFor(cfg.TablePrefix),
		log:  cfg.Logger.With("election", name, "identity", cfg.Identity),
	}, nil
}

// Name returns the election's name.
func (e *Elector) Name() string { return e.name }

// Identity returns this candidate's identity.
func (e *Elector) Identity() string { return e.cfg.Identity }

// IsLeader reports whether this candidate holds a term whose local lease is
// still valid.
func (e *Elector) IsLeader() bool {
	e.mu.Lock()
	t := e.term
	e.mu.Unlock()
	return t != nil && t.IsLeader()
}

// prepare creates or checks the tables and learns the lock name, once.
func (e *Elector) prepare(ctx context.Context) (string, error) {
	lock, err := e.lockNameFor(ctx)
	if err != nil || e.isReady() {
		return lock, err
	}
	check := checkSchema
	if !e.cfg.SkipCreateTables {
		check = createSchema
	}
	if err := check(ctx, e.db, e.tbl); err != nil {
		return "", err
	}
	p, err := detectPlatform(ctx, e.db)
	if err != nil {
		return "", err
	}
	warnings, err := p.check(e.cfg.Strategy)
	if err != nil {
		return "", err
	}
	for _, w := range warnings {
		e.log.Warn(w)
	}
	e.mu.Lock()
	e.lockName, e.ready = lock, true
	e.mu.Unlock()
	return lock, nil
}

func (e *Elector) isReady() bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.ready
}

// begin marks the Elector busy for one campaign and its term.
func (e *Elector) begin() (uint64, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.busy {
		return 0, ErrCampaigning
	}
	e.busy = true
	e.claim++
	return e.claim, nil
}

// end releases campaign claim's hold on the Elector, unless a later one
// holds it.
func (e *Elector) end(claim uint64) {
	e.mu.Lock()
	if e.claim == claim {
		e.busy, e.term = false, nil
	}
	e.mu.Unlock()
}

// Campaign blocks until this candidate leads, ctx ends, or the attempt
// fails, and returns the new term. The term is bound to ctx: when ctx ends
// the term ends at once (its lock is released, as by Resign), so cancel ctx
// only once the leader's work has stopped, or call Resign instead. A failed
// attempt returns an error and may be retried; Run does that with backoff.
func (e *Elector) Campaign(ctx context.Context) (*Term, error) {
	return e.campaign(ctx, ctx, false)
}

// campaign waits under waitCtx and binds the term to termCtx. With try it
// does not wait: it returns ErrHeld if another candidate leads.
func (e *Elector) campaign(waitCtx, termCtx context.Context, try bool) (*Term, error) {
	claim, err := e.begin()
	if err != nil {
		return nil, err
	}
	acquire := e.acquireLock
	if e.cfg.Strategy == LeaseRow {
		acquire = e.acquireLease
	}
	t, err := acquire(waitCtx, termCtx, try)
	switch {
	case t == nil:
		e.end(claim)
		return nil, err
	case err != nil:
		return nil, err // the term ended early; its keeper released the claim
	}
	e.mu.Lock()
	if e.claim == claim && e.busy { // not if the term has already ended
		e.term = t
	}
	e.mu.Unlock()
	return t, nil
}

// Run campaigns, runs fn while this candidate leads, and campaigns again
// when a term is lost (at once, or after a pause when it was demoted), with
// backoff after failed campaigns, until ctx ends.
//
// fn's context is cancelled when the term ends or ctx ends; fn must stop
// acting then and return. Only after fn has returned does Run release the
// lock, so the next leader never starts while fn still runs. Run returns
// ctx's error once ctx ends, fn's result if fn returns while the term is
// still held (the work is done; the term is resigned first), and at once on
// errors that retrying cannot fix (ErrInvalidConfig, ErrSchema,
// ErrCampaigning, ErrStrategy, ErrUnsupported).
func (e *Elector) Run(ctx context.Context, fn func(ctx context.Context, t *Term) error) error {
	defer func() {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), e.cfg.Interval)
		e.leave(ctx)
		cancel()
	}()
	b := backoff.NewExponentialBackOff()
	b.InitialInterval = e.cfg.Interval
	b.MaxInterval = e.cfg.Lease
	b.MaxElapsedTime = 0
	wait := func() error {
		select {
		case <-time.After(b.NextBackOff()):
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	for {
		// The term outlives ctx so that it is released only after fn returns.
		t, err := e.campaign(ctx, context.WithoutCancel(ctx), false)
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			if permanent(err) {
				return err
			}
			e.log.Warn("campaign failed; retrying", "err", err)
			if f := e.cfg.Observer.CampaignFailed; f != nil {
				f(e.name, err)
			}
			if err := wait(); err != nil {
				return err
			}
			continue
		}
		fnErr := e.runTerm(ctx, t, fn)
		lost := t.Err()
		t.Resign(context.WithoutCancel(ctx))
		switch {
		case ctx.Err() != nil:
			return ctx.Err()
		case lost == nil:
			return fnErr
		}
		// A candidate that lost its term campaigns again at once: when every
		// candidate has just lost a term (faults in a row), a pause here
		// would leave nobody to take over. A demoted one steps aside for a
		// backoff, so that another leads.
		b.Reset()
		if errors.Is(lost, ErrDemoted) {
			if err := wait(); err != nil {
				return err
			}
		}
	}
}

// runTerm runs fn for term t, with a context cancelled when t ends or ctx
// ends, and tracks it for HealthHandler.
func (e *Elector) runTerm(ctx context.Context, t *Term, fn func(ctx context.Context, t *Term) error) error {
	fnCtx, cancel := context.WithCancelCause(t.Context())
	defer cancel(nil)
	stop := context.AfterFunc(ctx, func() { cancel(context.Cause(ctx)) })
	defer stop()
	e.setRunning(t)
	defer e.setRunning(nil)
	return fn(fnCtx, t)
}

// TryRun is the cluster lock for a task scheduled on every instance (as
// ShedLock provides): if this candidate can lead at once it runs fn once,
// in a term of its own with its fencing token, and returns fn's result;
// if another candidate leads it returns ErrHeld at once and fn does not
// run. fn's context is cancelled if the term ends or ctx ends. After fn
// returns, the term is held until atLeast has passed since it began, so
// that instances whose schedule fires a little later (clock jitter) find
// the task held and skip it; then it is resigned.
func (e *Elector) TryRun(ctx context.Context, atLeast time.Duration, fn func(ctx context.Context, t *Term) error) error {
	t, err := e.campaign(ctx, context.WithoutCancel(ctx), true)
	if err != nil {
		return err
	}
	defer t.Resign(context.WithoutCancel(ctx))
	err = e.runTerm(ctx, t, fn)
	select {
	case <-time.After(time.Until(t.start.Add(atLeast))):
	case <-t.Done():
	case <-ctx.Done():
	}
	return err
}

func (e *Elector) setRunning(t *Term) {
	e.mu.Lock()
	e.running = t
	e.mu.Unlock()
}

func permanent(err error) bool {
	for _, p := range []error{ErrInvalidConfig, ErrSchema, ErrCampaigning, ErrStrategy, ErrUnsupported} {
		if errors.Is(err, p) {
			return true
		}
	}
	return false
}

// errTransient marks a renewal that failed but may succeed if tried again
// within the lease (a lease row reached through the pool).
var errTransient = errors.New("transient")

// holder is a strategy's hold on a won election, as a Term drives it.
type holder interface {
	// renew confirms, within ctx, that the hold is still ours and extends it.
	// An error wrapping errTransient leaves the term to its lease.
	renew(ctx context.Context) error
	// release records why the leader chose to end the term and gives the
	// election up for the next candidate.
	release(ctx context.Context, why string) error
	// lost records why a term ended that the leader did not choose to end.
	lost(ctx context.Context, why string) error
	// close frees every resource; the hold is gone for sure afterwards.
	close()
}

// Term is one period of leadership: it starts when Campaign returns and ends
// when its context is cancelled. Its token is higher than that of every
// earlier term of the election.
//
// When a term ends because an operator demoted it (Err is ErrDemoted), its
// context is cancelled at once but the lock is kept until Resign is called,
// or the lease runs out, so that the next leader starts only after this
// one's code has stopped: call Resign when the work has stopped (Run does).
type Term struct {
	e     *Elector
	claim uint64 // the campaign that won it
	token uint64
	start time.Time // local, when the term began
	h     holder

	ctx    context.Context
	cancel context.CancelCauseFunc
	resign chan struct{} // closed by the first Resign
	once   sync.Once
	done   chan struct{} // closed when the hold is released and dropped

	mu    sync.Mutex
	until time.Time   // end of the local lease (monotonic)
	timer *time.Timer // cancels ctx at until
	ended time.Time   // when the keepalive loop saw the term end
}

// endedAt returns when the term was seen to end, zero while it lasts.
func (t *Term) endedAt() time.Time {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.ended
}

// newTerm starts the term's keepalive loop. sent is when the command that
// confirmed the hold was sent: the lease counts from there.
func newTerm(e *Elector, h holder, token uint64, sent time.Time, parent context.Context) *Term {
	ctx, cancel := context.WithCancelCause(parent)
	t := &Term{
		e: e, h: h, token: token, start: time.Now(),
		ctx: ctx, cancel: cancel,
		resign: make(chan struct{}), done: make(chan struct{}),
		until: sent.Add(e.cfg.Lease),
	}
	t.timer = time.AfterFunc(time.Until(t.until), func() { cancel(ErrLeaseExpired) })
	e.stats.terms.Add(1)
	e.mu.Lock()
	t.claim = e.claim // the campaign's: nobody else can claim while it runs
	e.mu.Unlock()
	go t.keep(parent)
	return t
}

// Token returns the term's fencing token: the election's epoch for this
// term, higher than that of every earlier term.
func (t *Term) Token() uint64 { return t.token }

// Context returns a context that is cancelled when the term ends or may have
// ended. The leader must stop acting when it is done.
func (t *Term) Context() context.Context { return t.ctx }

// Done returns a channel that is closed when the term ends.
func (t *Term) Done() <-chan struct{} { return t.ctx.Done() }

// Err returns nil while the term lasts and why it ended afterwards:
// ErrResigned, ErrLeaseExpired, ErrSessionLost, ErrLockLost, or the cause of
// the Campaign context's end.
func (t *Term) Err() error {
	if t.ctx.Err() == nil {
		return nil
	}
	return context.Cause(t.ctx)
}

// IsLeader reports whether the term lasts and its local lease is valid,
// reading the monotonic clock itself rather than waiting for a timer.
func (t *Term) IsLeader() bool {
	t.mu.Lock()
	until := t.until
	t.mu.Unlock()
	return t.ctx.Err() == nil && time.Now().Before(until)
}

// deadline returns the end of the local lease.
func (t *Term) deadline() time.Time {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.until
}

// extend moves the lease to sent+Lease, unless it has already expired.
func (t *Term) extend(sent time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if !t.timer.Stop() {
		return // the lease ran out while the keepalive was in flight
	}
	t.until = sent.Add(t.e.cfg.Lease)
	t.timer.Reset(time.Until(t.until))
}

// Resign ends the term, if it lasts, and gives the election up so that the
// next candidate leads at once. It cancels the term's context first, so call
// it once the leader's work has stopped. It returns when the lock is
// released and the session dropped, or when ctx ends; the release itself
// never waits past the local lease.
func (t *Term) Resign(ctx context.Context) error {
	t.once.Do(func() { close(t.resign) })
	select {
	case <-t.done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// keep renews the term every Interval until it ends, then releases it if
// the end was chosen (Resign, the campaign's context) and drops the hold.
func (t *Term) keep(parent context.Context) {
	defer close(t.done)
	defer t.e.end(t.claim)
	defer t.h.close()
	defer t.timer.Stop()
	log := t.e.log.With("token", t.token)
	log.Info("term started")
	obs := t.e.cfg.Observer
	if obs.TermStarted != nil {
		obs.TermStarted(t.e.name, t.e.cfg.Identity, t.token)
	}
	tick := time.NewTicker(t.e.cfg.Interval)
	defer tick.Stop()
	for {
		select {
		case <-t.resign:
			t.cancel(ErrResigned)
		case <-t.ctx.Done():
		case <-tick.C:
			sent := time.Now()
			ctx, cancel := context.WithDeadline(context.Background(), t.deadline())
			err := t.h.renew(ctx)
			cancel()
			if obs.Renewed != nil {
				obs.Renewed(t.e.name, time.Since(sent), err)
			}
			if err == nil {
				t.extend(sent)
				continue
			}
			if errors.Is(err, errTransient) && time.Now().Before(t.deadline()) {
				log.Warn("keepalive failed; retrying within the lease", "err", err)
				continue
			}
			if !time.Now().Before(t.deadline()) {
				err = ErrLeaseExpired // the keepalive was cut off by the lease
			}
			t.cancel(err)
			continue
		}
		break
	}
	t.mu.Lock()
	t.ended = time.Now()
	t.mu.Unlock()
	reason := context.Cause(t.ctx)
	why := t.why(reason, parent)
	if why == stateDemoted || why == stateHandedOver {
		// The leader did not choose this end: its code gets until Resign
		// (Run calls it once fn has returned), within the lease, to stop
		// before the next leader can start.
		select {
		case <-t.resign:
		case <-time.After(time.Until(t.deadline())):
		}
	}
	if why == stateResigned || why == stateDemoted || why == stateHandedOver {
		// Release so the next candidate need not wait, but never past the
		// lease.
		ctx, cancel := context.WithDeadline(context.Background(), t.deadline())
		if err := t.h.release(ctx, why); err != nil {
			log.Warn("release failed; dropping the session instead", "err", err)
		}
		cancel()
	} else {
		ctx, cancel := context.WithTimeout(context.Background(), t.e.cfg.Interval)
		if err := t.h.lost(ctx, why); err != nil {
			log.Warn("could not record why the term ended", "reason", why, "err", err)
		}
		cancel()
	}
	log.Info("term ended", "reason", reason)
	if obs.TermEnded != nil {
		obs.TermEnded(t.e.name, t.e.cfg.Identity, t.token, why)
	}
}

// why names a term's end for the record and the history.
func (t *Term) why(reason error, parent context.Context) string {
	switch {
	case errors.Is(reason, ErrResigned), parent.Err() != nil && errors.Is(reason, context.Cause(parent)):
		return stateResigned
	case errors.Is(reason, errHandedOver):
		return stateHandedOver
	case errors.Is(reason, ErrDemoted):
		return stateDemoted
	case errors.Is(reason, ErrLeaseExpired):
		return stateLeaseExpired
	case errors.Is(reason, ErrLockLost):
		return stateLockLost
	}
	return stateSessionLost
}

// waitLockDelay holds a new term back for delay, keeping it renewed, when
// its predecessor was asked to step down and had to be killed: that
// leader's lease may still run. It returns the term's end if it ends first.
func (t *Term) waitLockDelay(ctx context.Context, delay time.Duration) error {
	if delay <= 0 {
		return nil
	}
	t.e.log.Info("waiting out the lock-delay of a killed leader", "delay", delay)
	select {
	case <-time.After(delay):
		return nil
	case <-t.Done():
		t.Resign(context.WithoutCancel(ctx))
		return fmt.Errorf("election: the term ended during the lock-delay: %w", t.Err())
	case <-ctx.Done():
		t.Resign(context.WithoutCancel(ctx))
		return ctx.Err()
	}
}

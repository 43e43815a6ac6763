package election

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"reflect"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cenkalti/backoff/v4"
	"github.com/sqlelect/election/internal/failpoint"
)

// Elector is one candidate in one election. It is safe for concurrent use;
// at most one Campaign, Run or TryRun is under way at a time. To read or
// steer an election without campaigning, use an Operator.
type Elector struct {
	st   *store
	log  *slog.Logger
	side strategy // chosen at the first campaign

	mu        sync.Mutex
	busy      bool      // a campaign or a term is under way
	campaigns uint64    // counts them, so that a late keeper frees the Elector only for its own
	term      *Term     // the current term, if any
	running   *Term     // the term whose function Run is running
	told      time.Time // when that function's context was cancelled
	toldWhy   error     // and why
	stopped   error     // why the last Run returned, if retrying could not fix it

	stats counters
}

// strategy is how a candidate wins an election: GetLock (getlock.go) or
// LeaseRow (lease.go). What follows the win is the Term's.
type strategy interface {
	// acquire waits under ctx until this candidate has won the election
	// (the lock name given) and opened a term in the record; with try it
	// does not wait, and returns ErrHeld if another candidate leads.
	acquire(ctx context.Context, lock string, try bool) (won, error)
}

// elect wins the election through the candidate's strategy, which is
// settled at its first campaign, once the server is known (see prepare).
// It first writes the ends of this candidate's earlier terms that could
// not be written when they ended (payOwed).
func (e *Elector) elect(ctx context.Context, try bool) (won, error) {
	lock, err := e.st.prepare(ctx, e.log)
	if err != nil {
		return won{}, err
	}
	e.st.payOwed(ctx, lock)
	if e.side == nil { // only campaigns use it, one at a time
		switch server, strategy := e.st.settled(); strategy {
		case LeaseRow:
			e.side = newLeaseRow(e.st, e.log)
		case GetLock:
			e.side = &getLock{st: e.st, server: server, log: e.log}
		default:
			panic(fmt.Sprintf("election: strategy %v not settled by prepare", strategy))
		}
	}
	return e.side.acquire(ctx, lock, try)
}

// counters back Stats.
type counters struct{ terms, kills, killsDenied atomic.Uint64 }

// observing returns the Observer the Elector reports to: it counts what
// Stats shows, from the same events, and passes every event on to user's.
func (c *counters) observing(user *Observer) *Observer {
	o := *user
	started, killed := o.TermStarted, o.Killed
	o.TermStarted = func(election, identity string, token uint64) {
		c.terms.Add(1)
		if started != nil {
			started(election, identity, token)
		}
	}
	o.Killed = func(election, reason string, err error) {
		if err == nil {
			c.kills.Add(1)
		} else {
			c.killsDenied.Add(1)
		}
		if killed != nil {
			killed(election, reason, err)
		}
	}
	return &o
}

// Stats counts what an Elector has done since New.
type Stats struct {
	Terms       uint64 // terms this candidate started
	Kills       uint64 // sessions of stuck or disobedient leaders it killed
	KillsDenied uint64 // kills the server refused (see ErrKillDenied)
}

// Stats returns the Elector's counters.
func (e *Elector) Stats() Stats {
	return Stats{
		Terms:       e.stats.terms.Load(),
		Kills:       e.stats.kills.Load(),
		KillsDenied: e.stats.killsDenied.Load(),
	}
}

// New returns a candidate for the election called name on db. It validates
// its input but does no I/O; the tables are created, and the server
// checked, on first use. Names may be any printable UTF-8 string (no
// control or format characters) of up to 65,535 bytes.
// db must allow at least two open connections: a candidate pins one.
func New(db *sql.DB, name string, cfg Config) (*Elector, error) {
	cfg, err := checked(db, name, cfg)
	if err != nil {
		return nil, err
	}
	if err := oneConnection(db); err != nil {
		return nil, err
	}
	e := &Elector{log: cfg.Logger.With("election", name, "identity", cfg.Identity)}
	cfg.Observer = e.stats.observing(cfg.Observer)
	e.st = newStore(db, name, cfg)
	return e, nil
}

// Name returns the election's name.
func (e *Elector) Name() string { return e.st.name }

// Identity returns this candidate's identity.
func (e *Elector) Identity() string { return e.st.cfg.Identity }

// IsLeader reports whether this candidate holds a term whose local lease is
// still valid.
func (e *Elector) IsLeader() bool {
	e.mu.Lock()
	t := e.term
	e.mu.Unlock()
	return t != nil && t.IsLeader()
}

// Campaign blocks until this candidate leads, ctx ends, or the attempt
// fails, and returns the new term. The term is bound to ctx: when ctx ends
// the term ends at once (its lock is released, as by Resign), so cancel ctx
// only once the leader's work has stopped, or call Resign instead. A failed
// attempt returns an error and may be retried; Run does that with backoff.
// A term whose lease ran out before it began (this process was paused
// while it claimed the election) is never returned: Campaign gives it up
// and returns ErrLeaseExpired.
func (e *Elector) Campaign(ctx context.Context) (*Term, error) {
	return e.campaign(ctx, ctx, false)
}

// oneConnection refuses a pool bounded to one connection, which the
// candidate pins, so that fenced transactions would wait for the whole
// term. New checks it, and so do each campaign and each fenced
// transaction: the program may bound the pool after New.
func oneConnection(db *sql.DB) error {
	if db.Stats().MaxOpenConnections == 1 {
		return fmt.Errorf("%w: db allows only one open connection (db.SetMaxOpenConns(1)), which the candidate pins, so fenced transactions would wait for the whole term: call db.SetMaxOpenConns(2) or more", ErrInvalidConfig)
	}
	return nil
}

// campaign waits under waitCtx and binds the term to termCtx. With try it
// does not wait: it returns ErrHeld if another candidate leads.
func (e *Elector) campaign(waitCtx, termCtx context.Context, try bool) (*Term, error) {
	if err := oneConnection(e.st.db); err != nil {
		return nil, err
	}
	n, err := e.occupy()
	if err != nil {
		return nil, err
	}
	w, err := e.elect(waitCtx, try)
	if err != nil {
		if permanent(err) {
			// Retrying cannot help: a candidate row left behind would list,
			// and offer for a hand-over, a candidate that does not campaign.
			// Before vacate: a campaign begun after it writes a row of its own.
			e.withdraw(waitCtx)
		}
		e.vacate(n)
		return nil, refusal(err) // whichever statement opened the refused session
	}
	failpoint.Hit(waitCtx, failpoint.Claimed)
	t := newTerm(e.st, e.log, w, termCtx, func() { e.vacate(n) })
	if err := t.waitLockDelay(waitCtx, w.delay); err != nil {
		return nil, err // the term ended early; its keeper vacated the Elector
	}
	if !t.IsLeader() {
		// The lease ran out before the term could begin (this process was
		// paused, or the claim was slow): another candidate may lead by now,
		// so the term is not handed out for anyone to act in.
		t.Resign(context.WithoutCancel(waitCtx))
		return nil, fmt.Errorf("%w: the term's lease ran out before the term began (was this process paused, or did claiming the election take longer than Lease?)", ErrLeaseExpired)
	}
	e.mu.Lock()
	if e.campaigns == n && e.busy { // not if the term has already ended
		e.term = t
	}
	e.mu.Unlock()
	return t, nil
}

// occupy marks the Elector busy for one campaign and its term, the n-th.
func (e *Elector) occupy() (n uint64, err error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.busy || e.running != nil { // a term, or the function of one resigned without it (runTerm)
		return 0, ErrCampaigning
	}
	e.busy = true
	e.campaigns++
	return e.campaigns, nil
}

// vacate frees the Elector from its n-th campaign, unless a later one
// holds it.
func (e *Elector) vacate(n uint64) {
	e.mu.Lock()
	if e.campaigns == n {
		e.busy, e.term = false, nil
	}
	e.mu.Unlock()
}

// Leader reads who leads the election, in one read of its record, as
// Operator.Leader does: a follower that needs the leader's identity or
// host asks its own Elector. When nobody leads it returns ErrNoLeader,
// with the record of the last term if there was one; also before the
// tables exist, when the first campaign is to create them.
func (e *Elector) Leader(ctx context.Context) (Record, error) {
	r, err := e.st.leader(ctx)
	if !e.st.cfg.SkipCreateTables && serverError(err, 1146) { // no such table
		return Record{}, ErrNoLeader
	}
	return r, err
}

// Run campaigns, runs fn while this candidate leads, and campaigns again
// when the term ends, until ctx ends or fn returns ErrStop.
//
// fn's context is cancelled when the term ends or ctx ends; fn must stop
// acting then and return, within Margin. Run releases the election only
// after fn has returned, so after a Resign or a demotion the next leader
// starts once fn has stopped, at the latest when the lease ends. After ctx
// ends, fn has Margin to return; if it has not, the term is resigned
// without it and a WARN names it, so that the next leader starts at most
// Margin after ctx ended (plus one CheckInterval under LeaseRow), however fn
// behaves; Run itself returns only once fn has returned. When the term ends
// without this candidate's say, the next leader may start while fn still
// runs: at once when the server ended the session (a KILL, a restart, a
// proxy reset), Margin after the lease when this process was cut off or
// stuck, and after the lease when fn ignored a demotion. Writes checked
// with the term's fencing token (Term.Fenced, Fence) are refused from then
// on; other writes are not. HealthHandler answers 503 while fn runs more
// than Margin after its context was cancelled, for a supervisor to restart
// the process.
//
// fn's return ends the term, never the campaign: Run resigns the term and
// campaigns again, after a backoff pause that lets another candidate lead
// and keeps a function that returns at once from spinning (the pause is
// reset by a term that lasted longer than Lease); so does a function that
// resigns its term itself. An error fn returns while its term lasts is
// logged at WARN. To end Run from fn (the work is done for good), return
// an error wrapping ErrStop: Run resigns and returns that error.
//
// With Config.Health, Run campaigns only while the candidate is healthy:
// from the first check that passes, until HealthFailures fail in a row,
// which also end its term (see Config.Health).
//
// Run returns ctx's error once ctx ends. A failed campaign (the server
// unreachable or restarting, a session lost) is logged, reported to
// Observer.CampaignFailed and retried with backoff, except for errors that
// retrying with the same DSN and Config cannot fix, which Run returns at
// once: ErrAccessDenied (a wrong password, a database that is missing or
// not the user's), ErrSchema (tables missing, a grant missing),
// ErrInvalidConfig, ErrStrategy, ErrUnsupported and ErrCampaigning. A DBA
// may fix the first two while the process runs; Run leaves it to the
// caller to call it again later, or to exit for its supervisor to restart
// it (HealthHandler answers 503 naming the error until Run is called
// again).
func (e *Elector) Run(ctx context.Context, fn func(ctx context.Context, t *Term) error) (err error) {
	e.st.cfg.Observer.running(e.st.name, true, nil)
	defer func() {
		// Asked to stop, or another Run of this Elector goes on.
		if ctx.Err() != nil || errors.Is(err, ErrStop) || errors.Is(err, ErrCampaigning) {
			e.st.cfg.Observer.running(e.st.name, false, nil)
		} else {
			e.st.cfg.Observer.running(e.st.name, false, err)
		}
	}()
	defer e.withdraw(ctx)
	var h *health
	if e.st.cfg.Health != nil {
		var stop func()
		h, stop = e.watchHealth(ctx)
		defer stop()
	}
	e.setStopped(nil)
	b := backoff.NewExponentialBackOff()
	b.InitialInterval = e.st.cfg.Interval
	b.MaxInterval = e.st.cfg.Lease
	b.MaxElapsedTime = 0
	for {
		// An unhealthy candidate waits, and its campaign ends when it turns so.
		waitCtx, cancel := ctx, context.CancelFunc(func() {})
		if h != nil {
			var err error
			if waitCtx, cancel, err = h.campaignable(ctx); err != nil {
				return err
			}
		}
		// The term outlives ctx so that it is released only after fn returns.
		t, err := e.campaign(waitCtx, context.WithoutCancel(ctx), false)
		cancel()
		if err == nil && h != nil && !h.isHealthy() {
			t.cancel(ErrUnhealthy) // turned unhealthy as the term began
			t.Resign(context.WithoutCancel(ctx))
			continue
		}
		if err != nil {
			if ctx.Err() == nil && waitCtx.Err() != nil {
				continue // turned unhealthy: wait until healthy
			}
			if err := e.retry(ctx, b, err); err != nil {
				return err
			}
			continue
		}
		fnErr := e.runTerm(ctx, t, fn)
		lost := t.Err()
		t.Resign(context.WithoutCancel(ctx))
		// The function gave the term up: it returned while the term lasted,
		// or resigned it itself.
		gaveUp := lost == nil || errors.Is(lost, ErrResigned)
		switch {
		case ctx.Err() != nil:
			return ctx.Err()
		case errors.Is(fnErr, ErrStop):
			e.log.Info("the leader's function returned ErrStop: Run returns and this candidate no longer campaigns", "err", fnErr)
			return fnErr
		case gaveUp && fnErr != nil:
			e.log.Warn("the leader's function failed: its term is resigned; campaigning again after a pause", "err", fnErr, "func", funcName(fn))
		case gaveUp:
			e.log.Info("the leader's function returned while it led: its term is resigned; campaigning again after a pause", "func", funcName(fn))
		case fnErr != nil:
			e.log.Debug("the leader's function returned after its term ended", "err", fnErr, "reason", t.Reason())
		}
		// A candidate that lost its term campaigns again at once: when every
		// candidate has just lost a term (faults in a row), a pause here
		// would leave nobody to take over. One that gave its term up, or
		// was demoted, steps aside for a backoff, so that another leads; the
		// backoff grows while its terms keep ending sooner than Lease. One
		// that handed its term over needs none: while the hand-over holds,
		// the lock is the target's (a winner gives it back), and after it,
		// should the target be gone, this one may take it at once.
		if time.Since(t.start) > e.st.cfg.Lease {
			b.Reset()
		}
		if gaveUp || errors.Is(lost, ErrDemoted) && !errors.Is(lost, errHandedOver) {
			if err := pause(ctx, b); err != nil {
				return err
			}
		} else {
			b.Reset()
		}
	}
}

// retry decides after a failed campaign: nil to campaign again after a
// backoff, or the error Run returns.
func (e *Elector) retry(ctx context.Context, b backoff.BackOff, err error) error {
	if ctx.Err() != nil {
		return ctx.Err()
	}
	if conflict(err) || errors.Is(err, ErrHeld) {
		// Two candidates wrote the election's rows at once (a brand-new
		// election, or Galera's certification): the other one won.
		e.log.Debug("campaign lost a race; retrying", "err", err)
		return pause(ctx, b)
	}
	e.st.cfg.Observer.campaignFailed(e.st.name, err)
	if permanent(err) {
		if !errors.Is(err, ErrCampaigning) { // the campaign under way goes on
			e.log.Error("campaign failed, and retrying cannot fix it: Run returns, and this candidate campaigns no more until Run is called again", "err", err)
			e.setStopped(err)
		}
		return err
	}
	e.log.Warn("campaign failed; retrying", "err", err)
	return pause(ctx, b)
}

// pause waits for b's next backoff, or returns ctx's error.
func pause(ctx context.Context, b backoff.BackOff) error {
	select {
	case <-time.After(b.NextBackOff()):
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// permanent reports whether a campaign's error is one retrying cannot fix.
func permanent(err error) bool {
	for _, p := range []error{ErrAccessDenied, ErrInvalidConfig, ErrSchema, ErrCampaigning, ErrStrategy, ErrUnsupported} {
		if errors.Is(err, p) {
			return true
		}
	}
	return false
}

// withdraw removes this candidate's row once Run or TryRun stops
// campaigning, so that it is neither listed nor offered as a hand-over
// target.
func (e *Elector) withdraw(ctx context.Context) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), e.st.cfg.Interval)
	defer cancel()
	if err := e.st.deleteCandidate(ctx); err != nil {
		e.log.Warn("could not remove this candidate's row", "err", err)
	}
}

// runTerm runs fn for term t, with a context cancelled when t ends or ctx
// ends, and tracks it for HealthHandler. Once ctx has ended, fn has Margin
// to return, as after the end of a term; a function that has not returned
// by then is left running and the term is resigned without it, so that a
// leader stuck through a shutdown cannot hold the election: its fenced
// writes are refused from then on, its other writes are not.
func (e *Elector) runTerm(ctx context.Context, t *Term, fn func(ctx context.Context, t *Term) error) error {
	fnCtx, cancel := context.WithCancelCause(t.Context())
	defer cancel(nil)
	returned := make(chan struct{})
	defer close(returned)
	stop := context.AfterFunc(ctx, func() {
		cancel(context.Cause(ctx))
		select {
		case <-returned:
		case <-time.After(e.st.cfg.Margin):
			e.log.Warn("the leader's function did not return within Margin after Run's context ended: the term is resigned without it; "+
				"its fenced writes are refused from now on, its other writes are not", "func", funcName(fn), "margin", e.st.cfg.Margin.String())
			t.quit()
		}
	})
	defer stop()
	e.setRunning(t, fnCtx)
	defer e.setRunning(nil, nil)
	return fn(fnCtx, t)
}

// funcName names fn as its stack frames do, for a log that must say which
// function misbehaved.
func funcName(fn any) string {
	if f := runtime.FuncForPC(reflect.ValueOf(fn).Pointer()); f != nil {
		return f.Name()
	}
	return "unknown"
}

// setRunning tracks term t, whose function runs under fnCtx, for
// HealthHandler: it notes when and why fnCtx is cancelled.
func (e *Elector) setRunning(t *Term, fnCtx context.Context) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.running, e.told, e.toldWhy = t, time.Time{}, nil
	if t == nil {
		return
	}
	context.AfterFunc(fnCtx, func() {
		now := time.Now()
		e.mu.Lock()
		if e.running == t {
			e.told, e.toldWhy = now, context.Cause(fnCtx)
		}
		e.mu.Unlock()
	})
}

func (e *Elector) setStopped(err error) {
	e.mu.Lock()
	e.stopped = err
	e.mu.Unlock()
}

// TryRun is the cluster lock for a task scheduled on every instance (as
// ShedLock provides): if this candidate can lead at once it runs fn once,
// in a term of its own with its fencing token, and returns fn's result;
// if another candidate leads it returns ErrHeld at once and fn does not
// run. fn's context is cancelled if the term ends or ctx ends; after ctx
// ends fn has Margin to return, then the term is resigned without it, as
// under Run. After fn
// returns, the term is held until atLeast has passed since it began, so
// that instances whose schedule fires a little later (clock jitter) find
// the task held and skip it; then it is resigned. This candidate is listed
// (Operator.Candidates) only while TryRun runs.
//
// Nothing runs the task again after a crash. If the winner dies, or loses
// its term, while fn runs, TryRun does not re-run fn anywhere: the other
// instances whose TryRun came while the election was held got ErrHeld and
// do not retry, so the task is not done for that slot, and nothing says
// so. (Under GetLock the election is free again as soon as the winner's
// process dies, so an instance whose schedule fires after that runs fn;
// under LeaseRow it stays held until the lease runs out. A lease the
// database clock shows run out, which this process has not watched, is
// watched for up to its lease and margin before TryRun answers: a process
// that has just started cannot tell such a lease from a healthy one read
// just after a step of that clock, see docs/protocol.md, "Clocks".) A task that must
// be done once per slot has to record it: write the slot's key (its
// period) in the same fenced transaction as the task's work (Term.Fenced),
// and have each run first do the slots since the last one recorded.
// examples/cron does that under Run, which suits a schedule better: the
// leader keeps the schedule and catches up after a failover.
func (e *Elector) TryRun(ctx context.Context, atLeast time.Duration, fn func(ctx context.Context, t *Term) error) error {
	t, err := e.campaign(ctx, context.WithoutCancel(ctx), true)
	if errors.Is(err, ErrCampaigning) || errors.Is(err, ErrIdentityInUse) {
		return err // the candidate row is another campaign's
	}
	// The try wrote this candidate's row; it campaigns only during the
	// call, so the row goes when the call ends, as Run's does. That is one
	// DELETE more than the four to six statements of a try that finds the
	// election held; not writing the row at all would hide a running task
	// from Candidates and skip the check that all candidates share a
	// strategy.
	defer e.withdraw(ctx)
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

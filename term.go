package election

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"sync"
	"time"
)

// errTransient marks a renewal that failed but may succeed if tried again
// within the lease (a lease row reached through the pool).
var errTransient = errors.New("transient")

// errResigning is a keepalive given up because the term is resigning.
var errResigning = errors.New("election: the term is resigning")

// holder is a strategy's hold on a won election, as a Term drives it.
type holder interface {
	// begin is what the term does once it has begun, off the path to the
	// caller (the keepalive loop runs it first): it writes the history,
	// with the moment the term started, of the term and the predecessor it
	// followed.
	begin(ctx context.Context, started time.Time, p predecessor) error
	// renew confirms, within ctx, that the hold is still ours and extends it.
	// An error wrapping errTransient leaves the term to its lease. A
	// keepalive that waits for a batch's round (LeaseRow, a shared
	// session) stops waiting when quit closes, with errResigning: the term
	// is resigning, and its end must not wait up to an Interval for it.
	renew(ctx context.Context, quit <-chan struct{}) error
	// release records how the leader chose to end the term and gives the
	// election up for the next candidate.
	release(ctx context.Context, end ending) error
	// lost records how a term ended that the leader did not choose to end.
	lost(ctx context.Context, end ending) error
	// close frees every resource; the hold is gone for sure afterwards.
	close()
}

// won is a strategy's hold on an election it has just won.
type won struct {
	h     holder
	token uint64
	sent  time.Time     // when the statement that won was sent: the lease counts from there
	delay time.Duration // the lock-delay owed to a predecessor that was killed
	p     predecessor   // the last term, as the start read it
	// shared: the hold is on a shared session, whose terms keep no
	// session for Fenced (keptSession.none).
	shared bool
}

// Term is one period of leadership: it starts when Campaign returns and ends
// when its context is cancelled. Its token is higher than that of every
// earlier term of the election.
//
// When a term ends because an operator demoted it (Err is ErrDemoted), or
// Run found it unhealthy (ErrUnhealthy), its context is cancelled at once
// but the lock is kept until Resign is called,
// or the lease runs out, so that the next leader starts only after this
// one's code has stopped: call Resign when the work has stopped (Run does).
type Term struct {
	st    *store // the election's rows and this candidate's configuration
	log   *slog.Logger
	h     holder
	token uint64
	start time.Time     // local, when the term began
	delay time.Duration // the lock-delay it waits out before it acts
	onEnd func()        // called once the hold is gone for sure

	p    predecessor // the last term, as the start read it, for begin
	kept keptSession // for Fenced; dropped when the keepalive loop ends

	parent context.Context // the campaign's: its end is a resignation
	ctx    context.Context
	cancel context.CancelCauseFunc
	resign chan struct{} // closed by the first Resign
	once   sync.Once
	done   chan struct{} // closed when the hold is released and dropped

	mu    sync.Mutex
	until time.Time   // end of the local lease (monotonic)
	timer *time.Timer // cancels ctx at until
}

// newTerm starts the keepalive loop of a term won with w; the term ends
// with parent.
func newTerm(st *store, log *slog.Logger, w won, parent context.Context, onEnd func()) *Term {
	ctx, cancel := context.WithCancelCause(parent)
	t := &Term{
		st: st, h: w.h, token: w.token, start: time.Now(), delay: w.delay, onEnd: onEnd, p: w.p, kept: keptSession{st: st, none: w.shared},
		log:    log.With("token", w.token),
		parent: parent, ctx: ctx, cancel: cancel,
		resign: make(chan struct{}), done: make(chan struct{}),
		until: w.sent.Add(st.cfg.Lease),
	}
	t.timer = time.AfterFunc(time.Until(t.until), func() { cancel(ErrLeaseExpired) })
	// Before the caller's code can run: a log read in order tells who led first.
	t.log.Info("term started")
	st.cfg.Observer.termStarted(st.name, st.cfg.Identity, t.token)
	if d, ok := w.p.leaderless(); ok {
		st.cfg.Observer.failover(st.name, d)
	}
	go t.keep()
	return t
}

// leaderless is how long the election had no leader when this read was
// made, at most: since p's last sign of life (its recorded end, else its
// last renewal: a leader that crashed died after it), on the database
// clock, so a step of that clock in between is in it (and logged, see
// store.vouch). The watch, which decisions go by, would make it shorter:
// it takes a stamp from before its run of reads as made at the run's first
// read, and a deputy that waited in GET_LOCK longer than a run starts a
// new one. ok is false for an election's first term.
func (p predecessor) leaderless() (d time.Duration, ok bool) {
	if !p.exists {
		return 0, false
	}
	seen := p.rec.Renewed
	if !p.rec.Ended.IsZero() {
		seen = p.rec.Ended
	}
	return max(p.now().Sub(seen), 0), true
}

// Token returns the term's fencing token: the election's epoch for this
// term, higher than that of every earlier term. It is also at least the
// database server's clock when the term started, in microseconds since the
// Unix epoch, so that a replica promoted after its primary died does not
// hand out the lost terms' tokens again (docs/protocol.md, "Replicas and a
// failover of the database"). It fits in an int64 and, until the year
// 2255, exactly in a float64.
func (t *Term) Token() uint64 { return t.token }

// Context returns a context that is cancelled when the term ends or may have
// ended. The leader must stop acting when it is done.
func (t *Term) Context() context.Context { return t.ctx }

// Done returns a channel that is closed when the term ends.
func (t *Term) Done() <-chan struct{} { return t.ctx.Done() }

// Err returns nil while the term lasts and why it ended afterwards:
// ErrResigned, ErrDemoted, ErrUnhealthy, ErrLeaseExpired, ErrSessionLost,
// ErrLockLost, or the cause of the Campaign context's end.
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

// Resign ends the term, if it lasts, and gives the election up so that the
// next candidate leads at once. It cancels the term's context first, so call
// it once the leader's work has stopped. It returns when the lock is
// released and the session dropped, or when ctx ends; the release itself
// never waits past the local lease.
func (t *Term) Resign(ctx context.Context) error {
	t.quit()
	select {
	case <-t.done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// quit asks the keepalive loop to resign the term, and does not wait.
func (t *Term) quit() { t.once.Do(func() { close(t.resign) }) }

// endCause says why IsLeader is false: the term's end, or a lapsed lease
// whose timer has not fired yet.
func (t *Term) endCause() error {
	if err := t.Err(); err != nil {
		return err
	}
	return ErrLeaseExpired
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
	t.until = sent.Add(t.st.cfg.Lease)
	t.timer.Reset(time.Until(t.until))
}

// keep renews the term every Interval until it ends, then ends it: see
// finish.
func (t *Term) keep() {
	defer close(t.done)
	defer t.onEnd()
	defer t.h.close()
	defer t.timer.Stop()
	// begin runs beside the keepalives, which a slow begin (a history write
	// waiting for a pool session) must not delay; the end waits for it.
	tick := time.NewTicker(t.st.cfg.Interval)
	defer tick.Stop()
	began := make(chan struct{})
	go func() {
		defer close(began)
		t.begin()
	}()
	preferCtx, stopPrefer := context.WithCancel(context.Background())
	preferred := make(chan struct{})
	go func() {
		defer close(preferred)
		if t.st.cfg.PreferAfter > 0 {
			t.prefer(preferCtx)
		}
	}()
	for {
		select {
		case <-t.resign:
			t.cancel(ErrResigned)
		case <-t.ctx.Done():
		case <-tick.C:
			t.renew()
			t.kept.spare()
			continue
		}
		break
	}
	stopPrefer()
	<-preferred
	<-began // its history row, before the end is written into it
	// Before finish, whose record of a lost term goes through the pool.
	t.kept.close()
	t.finish()
}

// begin runs the hold's begin, bounded by the lease as a keepalive is. A
// failure is logged: the history serves operators, and the successor's
// start writes a row that is missing; a session that failed fails the next
// keepalive.
func (t *Term) begin() {
	ctx, cancel := context.WithDeadline(context.Background(), t.deadline())
	defer cancel()
	if err := t.h.begin(ctx, t.start, t.p); err != nil {
		t.log.Warn("could not complete the term's start", "err", err)
	}
}

// renew runs one keepalive: it extends the lease when confirmed, and ends
// the term when it fails for good.
func (t *Term) renew() {
	sent := time.Now()
	ctx, cancel := context.WithDeadline(context.Background(), t.deadline())
	err := t.h.renew(ctx, t.resign)
	cancel()
	if errors.Is(err, errResigning) {
		return // the loop ends the term now
	}
	t.st.cfg.Observer.renewed(t.st.name, time.Since(sent), err)
	switch {
	case err == nil:
		t.extend(sent)
	case errors.Is(err, errTransient) && time.Now().Before(t.deadline()):
		t.log.Warn("keepalive failed; retrying within the lease", "err", err)
	case !time.Now().Before(t.deadline()):
		t.cancel(ErrLeaseExpired) // the keepalive was cut off by the lease
	default:
		t.cancel(err)
	}
}

// finish records how the term ended. An end the leader chose (Resign, the
// campaign's context) or was asked for (demote, hand-over) releases the
// election so the next candidate need not wait; other ends are recorded
// through the pool, since the session may be gone. An end that cannot be
// written now is owed, and written when this candidate next campaigns.
func (t *Term) finish() {
	reason := context.Cause(t.ctx)
	end := ending{why: t.why(reason), at: time.Now()}
	var err error
	if slices.Contains(gracefulEnds, end.why) {
		if end.why != stateResigned {
			// The leader did not choose this end: its code gets until Resign
			// (Run calls it once fn has returned), within the lease, to stop
			// before the next leader can start.
			t.log.Info("asked to step down: the election is released once the leader's code has stopped (Resign), at the latest when the lease ends",
				"reason", end.why, "lease_left", time.Until(t.deadline()).Round(time.Millisecond).String())
			select {
			case <-t.resign:
			case <-time.After(time.Until(t.deadline())):
				t.log.Warn("the leader's code did not stop within the lease after it was asked to step down: the election is released; "+
					"its fenced writes are refused from now on, other writes are not", "reason", end.why)
			}
		}
		// It stopped acting when it released, or at its lease's end if its
		// code outlived that. Writing the end after the lease is harmless:
		// the lock is still this session's until it is released or dropped.
		end.at = earlier(time.Now(), t.deadline())
		end.lasted = end.at.Sub(t.start)
		bound := t.deadline()
		if soon := time.Now().Add(t.st.cfg.Interval); bound.Before(soon) {
			bound = soon
		}
		ctx, cancel := context.WithDeadline(context.Background(), bound)
		if err = t.h.release(ctx, end); err != nil {
			t.log.Warn("releasing the election or recording the term's end failed; the session is dropped, which frees the lock", "err", err)
		}
		cancel()
	} else {
		// A leader cut off or paused stopped acting at its lease's end at
		// the latest.
		end.at = earlier(end.at, t.deadline())
		end.lasted = end.at.Sub(t.start)
		ctx, cancel := context.WithTimeout(context.Background(), t.st.cfg.Interval)
		if err = t.h.lost(ctx, end); err != nil {
			t.log.Warn("could not record why the term ended; it will be recorded when the server answers", "reason", end.why, "err", err)
		}
		cancel()
	}
	if err != nil {
		t.st.owe(t.token, end)
	}
	// The reason as history, watch and metrics name it; the error as Err.
	t.log.Info("term ended", "reason", end.why, "err", reason)
	t.st.cfg.Observer.termEnded(t.st.name, t.st.cfg.Identity, t.token, end.why)
}

// Reason returns why the term ended, in the words of the history
// (TermRecord.Reason), the leader's "term ended" log, Watch and the
// Observer: resigned, demoted, handed-over, unhealthy, lease-expired,
// lock-lost or session-lost; empty while the term lasts.
func (t *Term) Reason() string {
	if err := t.Err(); err != nil {
		return t.why(err)
	}
	return ""
}

// why names a term's end, caused by reason, for the record and the history.
func (t *Term) why(reason error) string {
	switch {
	case errors.Is(reason, ErrResigned), t.parent.Err() != nil && errors.Is(reason, context.Cause(t.parent)):
		return stateResigned
	case errors.Is(reason, errHandedOver):
		return stateHandedOver
	case errors.Is(reason, ErrDemoted):
		return stateDemoted
	case errors.Is(reason, ErrUnhealthy):
		return stateUnhealthy
	case errors.Is(reason, ErrLeaseExpired):
		return stateLeaseExpired
	case errors.Is(reason, ErrLockLost):
		return stateLockLost
	}
	return stateSessionLost
}

// waitLockDelay holds a new term back for delay, keeping it renewed, when a
// leader was forced out (asked to step down and killed, or killed as hung)
// by this term's start or an earlier one's: that leader's lease may still
// run. It returns the term's end if it ends first.
func (t *Term) waitLockDelay(ctx context.Context, delay time.Duration) error {
	if delay <= 0 {
		return nil
	}
	t.log.Info("waiting out the lock-delay: a leader forced out may still hold its lease", "delay", delay.String())
	select {
	case <-time.After(delay):
		return nil
	case <-t.Done():
		t.Resign(context.WithoutCancel(ctx))
		return during("the term ended during the lock-delay", t.Err())
	case <-ctx.Done():
		t.Resign(context.WithoutCancel(ctx))
		return ctx.Err()
	}
}

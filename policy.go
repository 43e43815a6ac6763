package election

// The leader policies: the value a leader proclaims, the hand-over to a
// preferred candidate (Config.PreferAfter), and leadership tied to a health
// check (Config.Health). None of them starts or keeps a term by itself:
// they write the value, ask for a hand-over through the record as an
// operator does (store.request), and end a term or a campaign, so the
// record's rule and its safety argument hold as they are (docs/protocol.md,
// "Leader policies").

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync"
	"time"
)

// Proclaim changes the value this term proclaims (Config.Value), and the
// one this candidate's later terms start with, as etcd's Proclaim does.
// The value is validated as Config.Value is. It returns the term's end
// (see Err) if the term has ended; the record is then left as it is.
func (t *Term) Proclaim(ctx context.Context, value string) error {
	if err := validValue(value); err != nil {
		return err
	}
	if !t.IsLeader() {
		return t.endCause()
	}
	st := t.st
	st.proclaiming.Lock()
	defer st.proclaiming.Unlock()
	st.mu.Lock()
	st.value = value
	st.mu.Unlock()
	lock, err := st.resolveLock(ctx)
	if err != nil {
		return err
	}
	changed, err := st.proclaim(ctx, lock, t.token, value)
	if err != nil || changed {
		return err
	}
	// Nothing changed: the value was already this one, or the term is over.
	rec, err := st.record(ctx, st.db, lock)
	if err != nil && !errors.Is(err, ErrNoLeader) {
		return err
	}
	if rec.Token != t.token || rec.State != stateLeading {
		return fmt.Errorf("%w: term %d is no longer the election's", ErrLockLost, t.token)
	}
	return nil
}

// prefer hands term t over to a preferred candidate (Config.PreferAfter)
// once the term has acted for PreferAfter (after its lock-delay), looking
// every PreferAfter/2, until ctx ends or it has asked once. The hand-over
// then ends the term at its next keepalive, as an operator's does.
func (t *Term) prefer(ctx context.Context) {
	cfg := t.st.cfg
	tick := time.NewTicker(cfg.PreferAfter / 2)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		if time.Since(t.start) < t.delay+cfg.PreferAfter || !t.IsLeader() {
			continue
		}
		read, cancel := context.WithDeadline(ctx, t.deadline())
		to, err := t.preferred(read)
		cancel()
		switch {
		case errors.Is(err, ErrNoLeader): // the term ended meanwhile
			return
		case err != nil:
			t.log.Warn("could not look for a preferred candidate; trying again", "err", err)
		case to != "":
			t.log.Info("handing over to a candidate of higher priority", "to", to, "priority", cfg.Priority)
			t.st.cfg.Observer.preempted(t.st.name, to)
			return
		}
	}
}

// preferred asks for the hand-over of term t to the live, healthy candidate
// of the highest priority above this one's that has campaigned for
// PreferAfter, if there is one, and returns its identity; the longest
// waiting first among equals.
func (t *Term) preferred(ctx context.Context) (string, error) {
	st := t.st
	lock, err := st.resolveLock(ctx)
	if err != nil {
		return "", err
	}
	to, err := st.preferred(ctx, lock)
	if to == "" || err != nil {
		return "", err
	}
	if err := st.request(ctx, lock, t.token, to, 0, false); err != nil {
		return "", err
	}
	return to, nil
}

// health is Run's view of Config.Health: whether the candidate may
// campaign and lead.
type health struct {
	e       *Elector
	mu      sync.Mutex
	healthy bool          // a check has passed, and fewer than HealthFailures have failed since
	fails   int           // checks failed in a row
	changed chan struct{} // closed when healthy changes
	stop    func()        // cancels the campaign under way when it turns unhealthy
}

// watchHealth runs the health check every Interval until ctx ends, and
// returns Run's view of it and a function that waits for the checks to
// stop (a check that ignores its context is waited for Margin at most). A
// check still running after Interval fails, and again every Interval
// while it runs; its late result is not counted, and a new one starts
// only once it has returned. A check that panics fails.
func (e *Elector) watchHealth(ctx context.Context) (*health, func()) {
	h := &health{e: e, changed: make(chan struct{})}
	cfg := e.st.cfg
	ctx, cancel := context.WithCancel(ctx)
	var checks sync.WaitGroup
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		tick := time.NewTicker(cfg.Interval)
		defer tick.Stop()
		var pending chan error // the check under way
		var began time.Time    // when it began
		late := false          // it has failed for not returning
		for {
			if pending == nil {
				pending, began, late = make(chan error, 1), time.Now(), false
				checks.Add(1)
				go func(done chan<- error) {
					defer checks.Done()
					defer func() {
						if p := recover(); p != nil {
							done <- fmt.Errorf("the health check panicked: %v", p)
						}
					}()
					cctx, ccancel := context.WithTimeout(ctx, cfg.Interval)
					defer ccancel()
					done <- cfg.Health(cctx)
				}(pending)
			}
			select {
			case <-ctx.Done():
				return
			case err := <-pending:
				pending = nil
				if ctx.Err() != nil {
					return // cut short by Run's end: no verdict
				}
				switch {
				case late:
				case time.Since(began) >= cfg.Interval:
					h.checked(fmt.Errorf("the health check returned after Interval (%v)", cfg.Interval))
				default:
					h.checked(err)
				}
				select {
				case <-ctx.Done():
					return
				case <-tick.C:
				}
			case <-tick.C:
				late = true
				h.checked(fmt.Errorf("the health check has not returned within Interval (%v)", cfg.Interval))
			}
		}
	}()
	return h, func() {
		cancel()
		<-stopped
		e.st.mu.Lock()
		e.st.healthy = sql.NullBool{} // a later Campaign or TryRun runs no check
		e.st.mu.Unlock()
		waited := make(chan struct{})
		go func() { checks.Wait(); close(waited) }()
		select {
		case <-waited:
		case <-time.After(cfg.Margin):
			e.log.Warn("the health check did not return within Margin after Run returned: it is left running", "margin", cfg.Margin.String())
		}
	}
}

// checked counts one check's outcome and acts on a change: an unhealthy
// candidate's campaign and term end, and its row says so.
func (h *health) checked(err error) {
	e := h.e
	h.mu.Lock()
	was := h.healthy
	if err == nil {
		h.fails, h.healthy = 0, true
	} else if h.fails++; h.fails >= e.st.cfg.HealthFailures {
		h.healthy = false
	}
	now, stop, fails := h.healthy, h.stop, h.fails
	if now != was {
		close(h.changed)
		h.changed = make(chan struct{})
	}
	h.mu.Unlock()
	e.st.cfg.Observer.healthChecked(e.st.name, now, err)
	if now == was {
		switch {
		case err != nil && !now && fails == e.st.cfg.HealthFailures:
			// Never healthy yet: say why it does not campaign, once.
			e.log.Warn("health check failed: not campaigning until a check passes", "err", err, "failures", fails)
		case err != nil:
			e.log.Debug("health check failed", "err", err, "in_a_row", fails)
		}
		return
	}
	e.st.mu.Lock()
	e.st.healthy = sql.NullBool{Bool: now, Valid: true}
	e.st.mu.Unlock()
	if now {
		e.log.Info("health check passed: campaigning")
		return
	}
	e.log.Warn("health check failed: not campaigning, and a term is resigned, until a check passes", "err", err, "failures", e.st.cfg.HealthFailures)
	if stop != nil {
		stop()
	}
	e.mu.Lock()
	t := e.term
	e.mu.Unlock()
	if t != nil {
		t.cancel(fmt.Errorf("%w: %w", ErrUnhealthy, err))
	}
	ctx, cancel := context.WithTimeout(context.Background(), e.st.cfg.Interval)
	defer cancel()
	if err := e.st.unhealthy(ctx); err != nil {
		e.log.Warn("could not mark this candidate unhealthy in its row", "err", err)
	}
}

// campaignable waits until the candidate is healthy, then returns a
// context for one campaign that ends when it turns unhealthy.
func (h *health) campaignable(ctx context.Context) (context.Context, context.CancelFunc, error) {
	for {
		h.mu.Lock()
		ok, changed := h.healthy, h.changed
		if ok {
			cctx, cancel := context.WithCancel(ctx)
			h.stop = cancel
			h.mu.Unlock()
			return cctx, cancel, nil
		}
		h.mu.Unlock()
		select {
		case <-changed:
		case <-ctx.Done():
			return nil, nil, ctx.Err()
		}
	}
}

// isHealthy reports whether the candidate may lead now.
func (h *health) isHealthy() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.healthy
}

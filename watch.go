package election

import (
	"context"
	"errors"
	"time"
)

// Event is one change of an election's leadership as Watch sees it.
type Event struct {
	// Token is the term the event is about; 0 when the election has had no
	// term yet.
	Token    uint64
	Identity string
	// Leading is true when term Token has started; false when it has ended,
	// after which nobody leads until the next event with Leading set.
	Leading bool
	// Reason says why the term ended (see TermRecord.Reason); "stale" when
	// the leader stopped renewing and its end is not recorded yet.
	Reason string
	// At is when the term started or ended, on the database clock; zero
	// when not known.
	At time.Time
}

// Watch reports every change of leadership of the election, to anyone with
// SELECT on the tables, participant or not. It first sends the current
// state (a Leading event, or one saying nobody leads), then a Leading and an
// ended event for every term, in order, including terms that began and ended
// between two of its reads (it reads the term history, every Interval). The
// channel is closed when ctx ends; read errors are logged and retried.
func (o *Operator) Watch(ctx context.Context) <-chan Event {
	ch := make(chan Event)
	go func() {
		defer close(ch)
		w := watcher{st: o.st, ch: ch}
		tick := time.NewTicker(o.st.cfg.Interval)
		defer tick.Stop()
		for {
			if err := w.poll(ctx); err != nil && ctx.Err() == nil {
				o.log.Warn("watch: reading the election failed; retrying", "err", err)
			}
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
		}
	}()
	return ch
}

// watcher turns reads of the record and the history into events.
type watcher struct {
	st      *store
	ch      chan<- Event
	started bool   // the first state has been sent
	last    uint64 // the newest term a Leading event was sent for
	who     string // its holder
	open    bool   // term last has not been reported ended
}

func (w *watcher) send(ctx context.Context, ev Event) error {
	select {
	case w.ch <- ev:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// poll reads the record and the history once and sends what changed.
func (w *watcher) poll(ctx context.Context) error {
	lock, err := w.st.lockName(ctx)
	if err != nil {
		return err
	}
	rec, err := w.st.record(ctx, w.st.db, lock)
	if err != nil && !errors.Is(err, ErrNoLeader) {
		return err
	}
	if !w.started {
		w.started = true
		ev := Event{Token: rec.Token, Identity: rec.Identity, Leading: rec.Leading(), At: rec.Since}
		if !ev.Leading {
			ev.Reason, ev.At = rec.State, rec.Ended
		}
		w.last, w.who, w.open = rec.Token, rec.Identity, ev.Leading
		return w.send(ctx, ev)
	}
	from := w.last + 1
	if w.open {
		from = w.last
	}
	terms, err := w.st.terms(ctx, lock, "epoch >= ? ORDER BY epoch", from)
	if err != nil {
		return err
	}
	for _, t := range terms {
		if err := w.term(ctx, t, rec); err != nil {
			return err
		}
	}
	return nil
}

// term sends the start of history row t if it is new, and its end once
// known: from the history, from a newer term in the record, or from the
// record no longer showing it leading.
func (w *watcher) term(ctx context.Context, t TermRecord, rec Record) error {
	if t.Token > w.last {
		if w.open { // ended unseen: its row was pruned or not yet closed
			if err := w.send(ctx, Event{Token: w.last, Identity: w.who, Reason: stateLost}); err != nil {
				return err
			}
		}
		if err := w.send(ctx, Event{Token: t.Token, Identity: t.Identity, Leading: true, At: t.Started}); err != nil {
			return err
		}
		w.last, w.who, w.open = t.Token, t.Identity, true
	}
	if !w.open || t.Token != w.last {
		return nil
	}
	reason, at := t.Reason, t.Ended
	switch {
	case !t.Ended.IsZero():
	case rec.Token > t.Token:
		reason = stateLost
	case rec.Token == t.Token && !rec.Leading():
		reason, at = rec.State, rec.Ended
		if reason == stateLeading {
			reason = "stale"
		}
	default:
		return nil
	}
	if err := w.send(ctx, Event{Token: t.Token, Identity: t.Identity, Reason: reason, At: at}); err != nil {
		return err
	}
	w.open = false
	return nil
}

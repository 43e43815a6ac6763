package election

import (
	"context"
	"errors"
	"maps"
	"slices"
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
	// Reason says why the term ended (see TermRecord.Reason).
	Reason string
	// At is when the term started or ended (see TermRecord.Ended), on the
	// database clock; zero when the election has had no term.
	At time.Time
	// Value is what the leader proclaims (Config.Value), in Leading
	// events; empty for a term that had ended before Watch read it, and
	// for one whose start Watch read before its record (another Leading
	// event of the term then brings the value).
	Value string
}

// Watch reports every change of leadership of the election, to anyone with
// SELECT on the tables, participant or not. It first sends the current
// state (a Leading event, or one saying nobody leads), then a Leading and an
// ended event for every term, in order, including terms that began and ended
// between two of its reads (it reads the term history, every Interval). The
// ends are those History shows. A term whose leader could not say why it
// ended is reported "lost"; if that leader tells its own reason later (it
// was paused, or cut off from the server), its end is sent again with that
// reason and time. The channel is closed when ctx ends. Failed reads are
// retried: the Operator's logger gets a WARN, with the error, when reads
// start to fail, and an INFO when they work again; the changes made
// meanwhile then follow. A leader that proclaims another value
// (Term.Proclaim) is reported by another Leading event of its term, with
// the new Value.
func (o *Operator) Watch(ctx context.Context) <-chan Event {
	ch := make(chan Event)
	go func() {
		defer close(ch)
		w := watcher{st: o.st, ch: ch, sent: map[uint64]Event{}}
		tick := time.NewTicker(o.st.cfg.Interval)
		defer tick.Stop()
		var failing time.Time // when reads started to fail; zero while they work
		for {
			err := w.poll(ctx)
			switch {
			case ctx.Err() != nil:
			case err != nil && failing.IsZero():
				failing = time.Now()
				o.log.Warn("watch: reading the election failed; retrying every Interval", "err", err, "interval", o.st.cfg.Interval.String())
			case err == nil && !failing.IsZero():
				o.log.Info("watch: reading the election works again", "failed_for", time.Since(failing).Round(time.Millisecond).String())
				failing = time.Time{}
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

// revisable is how many of the last terms Watch rereads for a late report
// of their end.
const revisable = 16

// watcher turns reads of the record and the history into events.
type watcher struct {
	st      *store
	ch      chan<- Event
	started bool             // the first state has been sent
	last    uint64           // the newest term an event was sent for
	who     string           // its holder
	open    bool             // term last has not been reported ended
	value   string           // the value last sent for it
	sent    map[uint64]Event // the ends sent for the last terms
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
	lock, err := w.st.resolveLock(ctx)
	if err != nil {
		return err
	}
	rec, err := w.st.record(ctx, w.st.db, lock)
	if err != nil && !errors.Is(err, ErrNoLeader) {
		return err
	}
	var terms []TermRecord
	if !w.started {
		terms, err = w.st.lastTerms(ctx, lock, 1)
	} else {
		from := w.last + 1
		if w.open {
			from = w.last
		}
		for token := range w.sent {
			from = min(from, token)
		}
		terms, err = w.st.termsFrom(ctx, lock, from)
	}
	if err != nil {
		return err
	}
	if !w.started && len(terms) == 0 {
		w.started = true
		return w.send(ctx, Event{})
	}
	for i, t := range terms {
		var next *TermRecord
		if i+1 < len(terms) {
			next = &terms[i+1]
		}
		var value string
		if rec.Token == t.Token {
			value = rec.Value
		}
		if err := w.term(ctx, settle(t, next, rec), value); err != nil {
			return err
		}
	}
	if w.open && rec.Token == w.last && rec.State == stateLeading && rec.Value != w.value {
		w.value = rec.Value
		if err := w.send(ctx, Event{Token: rec.Token, Identity: w.who, Leading: true, At: rec.Since, Value: rec.Value}); err != nil {
			return err
		}
	}
	if len(w.sent) > revisable { // keep the newest
		tokens := slices.Sorted(maps.Keys(w.sent))
		for _, token := range tokens[:len(tokens)-revisable] {
			delete(w.sent, token)
		}
	}
	return nil
}

// term sends what history row t adds, with value the one its leader
// proclaims: its start if it is new (but the
// first state sent is just the end of a term that has ended), its end once
// known, and its end again if it changed.
func (w *watcher) term(ctx context.Context, t TermRecord, value string) error {
	ended := !t.Ended.IsZero()
	if t.Token > w.last {
		if w.open { // ended unseen: its row was pruned
			if err := w.end(ctx, Event{Token: w.last, Identity: w.who, Reason: stateLost, At: t.Started}); err != nil {
				return err
			}
		}
		first := !w.started
		w.started, w.last, w.who, w.open, w.value = true, t.Token, t.Identity, true, value
		if !first || !ended {
			if err := w.send(ctx, Event{Token: t.Token, Identity: t.Identity, Leading: true, At: t.Started, Value: value}); err != nil {
				return err
			}
		}
	}
	if !ended {
		return nil
	}
	ev := Event{Token: t.Token, Identity: t.Identity, Reason: t.Reason, At: t.Ended}
	if t.Token == w.last && w.open {
		w.open = false
		return w.end(ctx, ev)
	}
	if sent, ok := w.sent[t.Token]; ok && (sent.Reason != ev.Reason || !sent.At.Equal(ev.At)) {
		return w.end(ctx, ev)
	}
	return nil
}

// end sends the end of a term and remembers it, to send it again if it is
// revised.
func (w *watcher) end(ctx context.Context, ev Event) error {
	w.sent[ev.Token] = ev
	return w.send(ctx, ev)
}

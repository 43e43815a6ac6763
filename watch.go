package election

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"
)

// TermRecord is one term of an election's history.
type TermRecord struct {
	Token    uint64
	Identity string
	Host     string
	PID      int
	Started  time.Time // database clock
	Ended    time.Time // zero while the term lasts (or its end is not known yet)
	// Reason says why the term ended: resigned, demoted, handed-over,
	// hang-killed, demote-killed, lease-expired, session-lost, lock-lost, or
	// lost when the leader vanished without saying why (a crash, a kill from
	// outside the election).
	Reason string
}

// History returns the election's last terms, newest first, at most limit
// (all that are kept if limit <= 0). It needs only SELECT.
func (e *Elector) History(ctx context.Context, limit int) ([]TermRecord, error) {
	lock, err := e.lockNameFor(ctx)
	if err != nil {
		return nil, err
	}
	if limit <= 0 {
		limit = e.cfg.HistoryLimit
	}
	return e.readTerms(ctx, lock, "epoch >= 0 ORDER BY epoch DESC LIMIT ?", limit)
}

func (e *Elector) readTerms(ctx context.Context, lock, cond string, args ...any) ([]TermRecord, error) {
	rows, err := e.db.QueryContext(ctx, "SELECT epoch, holder, host, pid, "+utcMicros("started_at")+", "+utcMicros("ended_at")+
		", reason FROM `"+e.tbl.term+"` WHERE lock_name = ? AND "+cond, append([]any{lock}, args...)...)
	if err != nil {
		return nil, fmt.Errorf("election: reading the history: %w", schemaError(e.tbl, err))
	}
	defer rows.Close()
	var ts []TermRecord
	for rows.Next() {
		var (
			t              TermRecord
			started, ended sql.NullInt64
			reason         sql.NullString
		)
		if err := rows.Scan(&t.Token, &t.Identity, &t.Host, &t.PID, &started, &ended, &reason); err != nil {
			return nil, fmt.Errorf("election: reading the history: %w", err)
		}
		t.Started, t.Ended, t.Reason = fromMicros(started), fromMicros(ended), reason.String
		ts = append(ts, t)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("election: reading the history: %w", err)
	}
	return ts, nil
}

// Candidate is one participant of an election, from its heartbeat row.
type Candidate struct {
	Identity string
	Host     string
	PID      int
	Since    time.Time     // first heartbeat of this process, database clock
	SeenAgo  time.Duration // age of its last heartbeat
	Alive    bool          // its last heartbeat is within its own expiry
	Leader   bool          // it leads now
}

// Candidates lists the election's participants, the leader among them, as
// their heartbeats show them. Rows of dead candidates are listed (Alive
// false) until a campaigning candidate cleans them up.
func (e *Elector) Candidates(ctx context.Context) ([]Candidate, error) {
	lock, err := e.lockNameFor(ctx)
	if err != nil {
		return nil, err
	}
	leader, err := readRecord(ctx, e.db, e.tbl, lock)
	if err != nil && !errors.Is(err, ErrNoLeader) {
		return nil, err
	}
	rows, err := e.db.QueryContext(ctx, "SELECT identity, host, pid, "+utcMicros("since")+", "+ageMicros("seen_at")+
		", "+ageMicros("seen_at")+" <= expiry_us FROM `"+e.tbl.candidate+"` WHERE lock_name = ? ORDER BY identity", lock)
	if err != nil {
		return nil, fmt.Errorf("election: reading the candidates: %w", schemaError(e.tbl, err))
	}
	defer rows.Close()
	var cs []Candidate
	for rows.Next() {
		var (
			c          Candidate
			since, ago sql.NullInt64
		)
		if err := rows.Scan(&c.Identity, &c.Host, &c.PID, &since, &ago, &c.Alive); err != nil {
			return nil, fmt.Errorf("election: reading the candidates: %w", err)
		}
		c.Since, c.SeenAgo = fromMicros(since), micros(ago)
		c.Leader = leader.Leading() && leader.Identity == c.Identity
		cs = append(cs, c)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("election: reading the candidates: %w", err)
	}
	return cs, nil
}

// leave deletes this candidate's heartbeat row, so that it is not offered
// as a hand-over target once it has stopped campaigning.
func (e *Elector) leave(ctx context.Context) {
	lock, err := e.lockNameFor(ctx)
	if err == nil {
		_, err = e.db.ExecContext(ctx, "DELETE FROM `"+e.tbl.candidate+"` WHERE lock_name = ? AND identity = ?", lock, e.cfg.Identity)
	}
	if err != nil {
		e.log.Warn("could not remove this candidate's row", "err", err)
	}
}

// Elections reads the records of every election whose tables have the
// given prefix (empty means DefaultTablePrefix), for dashboards. It needs
// only SELECT.
func Elections(ctx context.Context, db *sql.DB, prefix string) ([]Record, error) {
	if prefix == "" {
		prefix = DefaultTablePrefix
	}
	if err := validatePrefix(prefix); err != nil {
		return nil, err
	}
	return readRecords(ctx, db, tablesFor(prefix), "")
}

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
func (e *Elector) Watch(ctx context.Context) <-chan Event {
	ch := make(chan Event)
	go func() {
		defer close(ch)
		w := watcher{e: e, ch: ch}
		tick := time.NewTicker(e.cfg.Interval)
		defer tick.Stop()
		for {
			if err := w.poll(ctx); err != nil && ctx.Err() == nil {
				e.log.Warn("watch: reading the election failed; retrying", "err", err)
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

type watcher struct {
	e       *Elector
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

func (w *watcher) poll(ctx context.Context) error {
	lock, err := w.e.lockNameFor(ctx)
	if err != nil {
		return err
	}
	rec, err := readRecord(ctx, w.e.db, w.e.tbl, lock)
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
	terms, err := w.e.readTerms(ctx, lock, "epoch >= ? ORDER BY epoch", from)
	if err != nil {
		return err
	}
	for _, t := range terms {
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
			continue
		}
		// The newest term has ended if the history says so, if a newer term
		// exists, or if the record no longer shows it leading.
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
			continue
		}
		if err := w.send(ctx, Event{Token: t.Token, Identity: t.Identity, Reason: reason, At: at}); err != nil {
			return err
		}
		w.open = false
	}
	return nil
}

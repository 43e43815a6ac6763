package election

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"
)

// Operator reads an election and steers it, without campaigning: who leads,
// the history of terms, the candidates, a watch of every change, and the
// operator actions Demote and Handover. Reads need only SELECT on the
// tables; Demote and Handover need UPDATE, and the right to kill a leader
// that ignores them (see ErrKillDenied). It is safe for concurrent use.
type Operator struct {
	st  *store
	log *slog.Logger
}

// NewOperator returns an Operator of the election called name on db. Of
// cfg it uses TablePrefix, Interval (how often Watch reads), HistoryLimit
// (History's default), Logger and Observer (Killed: an Operator's kills are
// reported there and in Demote's result, not in any Stats). It validates
// cfg as New does, so candidates and operators of one election can share
// one Config, and does no I/O.
func NewOperator(db *sql.DB, name string, cfg Config) (*Operator, error) {
	cfg, err := checked(db, name, cfg)
	if err != nil {
		return nil, err
	}
	return &Operator{st: newStore(db, name, cfg), log: cfg.Logger.With("election", name)}, nil
}

// Name returns the election's name.
func (o *Operator) Name() string { return o.st.name }

// Leader reads who leads the election, in one read of its record. When
// nobody leads it returns ErrNoLeader, with the record of the last term if
// there was one.
func (o *Operator) Leader(ctx context.Context) (Record, error) { return o.st.leader(ctx) }

// Token returns the newest fencing token the election has issued: the
// current term's, or the last one's; 0 before the first term. A Fence uses
// it (Fence.Issued) to refuse tokens no term holds.
func (o *Operator) Token(ctx context.Context) (uint64, error) {
	lock, err := o.st.resolveLock(ctx)
	if err != nil {
		return 0, err
	}
	return o.st.epoch(ctx, lock)
}

// History returns the election's last terms, newest first, at most limit
// (all that are kept if limit <= 0).
func (o *Operator) History(ctx context.Context, limit int) ([]TermRecord, error) {
	lock, err := o.st.resolveLock(ctx)
	if err != nil {
		return nil, err
	}
	if limit <= 0 {
		limit = o.st.cfg.HistoryLimit
	}
	rec, err := o.st.record(ctx, o.st.db, lock)
	if err != nil && !errors.Is(err, ErrNoLeader) {
		return nil, err
	}
	terms, err := o.st.lastTerms(ctx, lock, limit)
	if err == nil && rec.Token != 0 && (len(terms) == 0 || terms[0].Token < rec.Token) {
		// The record's term has no history row yet: a leader writes its
		// own once the term has begun, and one that failed to (its session
		// cut, its pool exhausted) leaves it to its successor.
		terms = slices.Insert(terms, 0, TermRecord{Token: rec.Token, Identity: rec.Identity, Host: rec.Host, PID: rec.PID, Started: rec.Since})
		terms = terms[:min(len(terms), limit)]
	}
	for i := range terms {
		var next *TermRecord
		if i > 0 {
			next = &terms[i-1]
		}
		terms[i] = settle(terms[i], next, rec)
	}
	return terms, err
}

// Candidates lists the election's participants, the leader among them, as
// their rows and liveness show them. Rows of dead candidates are listed (Alive
// false) until a campaigning candidate cleans them up.
func (o *Operator) Candidates(ctx context.Context) ([]Candidate, error) {
	lock, err := o.st.resolveLock(ctx)
	if err != nil {
		return nil, err
	}
	leader, err := o.st.record(ctx, o.st.db, lock)
	if err != nil && !errors.Is(err, ErrNoLeader) {
		return nil, err
	}
	return o.st.candidates(ctx, lock, leader)
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
	return records(ctx, db, tablesFor(prefix))
}

// Remove deletes the election (its record, fencing epoch, history and
// candidate rows) so that it is listed no more, as after tests or when a
// job is retired. It is refused with ErrInUse, nothing changed, while a
// candidate campaigns or a term may act; removing an election that does
// not exist does nothing. A candidate that campaigns again later starts
// the election anew; its tokens still exceed the removed election's, being
// at least the server's clock in microseconds (see Term.Token), unless that
// clock was set back.
func (o *Operator) Remove(ctx context.Context) error {
	lock, err := o.st.resolveLock(ctx)
	if err != nil {
		return err
	}
	err = o.st.removeRows(ctx, lock)
	if conflict(err) { // a term start's transaction met this one
		err = fmt.Errorf("%w: a candidate of election %q campaigned while it was being removed: %w", ErrInUse, o.st.name, err)
	}
	return err
}

// Demote forces a re-election: it asks the current leader to step down,
// which it does at its next keepalive (its term's context is cancelled and,
// under Run, its function returns before the lock is released). If the
// leader has not stepped down within its lease plus margin, Demote kills its
// session; the next term then waits until that leader's lease has certainly
// expired before it starts. Demote returns once the term has ended (or,
// under LeaseRow, can no longer act: it ignored the demotion past its
// lease plus margin), reporting whether a kill was needed. Without a leader it returns
// ErrNoLeader.
func (o *Operator) Demote(ctx context.Context) (killed bool, err error) {
	return o.demote(ctx, "")
}

// Handover asks the current leader to step down for the live candidate
// named identity: other candidates that win the lock while the hand-over is
// pending give it back. It refuses with ErrNotCandidate, changing nothing,
// unless identity is a live candidate: one that campaigns now (under Run, a
// candidate that was just demoted steps aside for a moment first). It returns as Demote does; the
// target then leads as soon as it wins the lock.
func (o *Operator) Handover(ctx context.Context, identity string) (killed bool, err error) {
	if err := validIdentity(identity); err != nil {
		// No candidate can have it, and the tables would match another
		// (trailing spaces).
		return false, fmt.Errorf("%w: %w", ErrNotCandidate, err)
	}
	lock, err := o.st.resolveLock(ctx)
	if err != nil {
		return false, err
	}
	alive, err := o.st.isCandidate(ctx, lock, identity)
	if err != nil {
		return false, err
	}
	if !alive {
		return false, fmt.Errorf("%w: no candidate %q of election %q is campaigning now; list them with Candidates (electctl candidates)", ErrNotCandidate, identity, o.st.name)
	}
	return o.demote(ctx, identity)
}

// demote asks the leader to step down (for the candidate to, if named),
// then watches the record until its term has ended, killing it once it is
// overdue.
func (o *Operator) demote(ctx context.Context, to string) (bool, error) {
	lock, err := o.st.resolveLock(ctx)
	if err != nil {
		return false, err
	}
	rec, err := o.st.record(ctx, o.st.db, lock)
	if err != nil {
		return false, err
	}
	if !rec.Leading() {
		return false, ErrNoLeader
	}
	if to != "" && rec.Identity == to {
		return false, nil // already leads
	}
	if err := o.st.request(ctx, lock, rec.Token, to, 0, true); err != nil {
		return false, err
	}
	poll := time.NewTicker(min(o.st.cfg.Interval, 50*time.Millisecond))
	defer poll.Stop()
	for {
		select {
		case <-ctx.Done():
			return false, ctx.Err()
		case <-poll.C:
		}
		cur, err := o.st.watched(ctx, o.st.db, lock)
		if err != nil {
			return false, err
		}
		if cur.Token != rec.Token || cur.State != stateLeading || !cur.holds() {
			return false, nil // the term has ended
		}
		if why := cur.overdue(); why != "" {
			return true, o.st.kill(ctx, o.st.db, lock, cur, why, o.log)
		}
	}
}

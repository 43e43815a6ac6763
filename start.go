package election

// The term start: a read of the record, then the claim of it together with
// the epoch bump, two statements after the candidate has won, or three for
// the many starts a process makes at once (starter); and the history,
// which the term writes once it has begun. Here is what decides between
// them; the statements are claim.go's, and batch.go's for a batch. See
// docs/protocol.md, "Campaign" and "Shared sessions".

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"
)

// readAndClaim starts the term through q in two statements: a read of the record
// (read), from which decide tells whether the term may start and after
// what lock-delay; then the claim of the record, a compare-and-set on that
// read, which bumps the epoch in the same statement: its new value is the
// token. (The first term of an election,
// which has no rows yet, claims and bumps in two statements.) The history
// is written afterwards (writeHistory), off the path to the caller. A claim
// that loses a race is tried again once.
func (s termStart) readAndClaim(ctx context.Context, q querier) (token uint64, delay time.Duration, p predecessor, err error) {
	for try := 0; ; try++ {
		if p, err = s.read(ctx, q); err != nil {
			return 0, 0, p, err
		}
		if delay, err = s.decide(p); err != nil {
			return 0, 0, p, err
		}
		token, err = s.claim(ctx, q, p, delay)
		if conflict(err) { // the claim's transaction lost to another's
			err = errRaced
		}
		if errors.Is(err, errRaced) && try == 0 {
			continue
		}
		if errors.Is(err, errRaced) {
			err = ErrHeld
		}
		if err != nil {
			return 0, 0, p, err
		}
		return token, delay, p, nil
	}
}

// delayLeft is the lock-delay still owed at the read, carried over in the
// record (delay_until): counted from the claim that wrote it, which stamped
// both, on the reader's watch (so that no step of the database clock since
// shortens it). Every read a term start follows is vouched for.
func (p predecessor) delayLeft() time.Duration {
	if !p.delayUntilUS.Valid {
		return 0
	}
	owed := micros(sql.NullInt64{Int64: p.delayUntilUS.Int64 - p.rec.Since.UnixMicro()})
	return max(p.rec.claimedBy.Add(owed).Sub(p.rec.read), 0)
}

// decide decides, by the record's rule, whether a new term may follow p,
// and after what
// lock-delay:
//   - it refuses (ErrStrategy) while a term of the other strategy still acts;
//   - under LeaseRow, it returns ErrHeld unless the last term has ended, gone
//     stale (no renewal for its lease plus margin, by the reader's watch), or
//     ignored a demotion for as long;
//   - it yields (errYield) while a hand-over to another live candidate is
//     pending, and while a candidate of a higher priority waits, for
//     targetHold after it first found one (store.outrankedFor);
//   - when the last term was asked to step down (or was killed as stuck)
//     and did not end gracefully, the new term must not act before that
//     leader's lease has certainly expired: the lock-delay. A lock-delay
//     still running is owed too, whoever owed it first: the term that owed
//     it may have ended before it was over (it crashed, or its Campaign's
//     context ended), and ended gracefully, and so owes nothing itself.
func (s termStart) decide(p predecessor) (time.Duration, error) {
	_, strategy := s.st.settled()
	switch acting := p.rec.Leading(); {
	case acting && p.rec.Strategy != strategy.String():
		return 0, fmt.Errorf("%w: election %q is led under strategy %s; every candidate must use the same (Config.Strategy)", ErrStrategy, s.st.name, p.rec.Strategy)
	case acting && strategy == LeaseRow:
		return 0, ErrHeld
	case p.handing:
		return 0, errHandover
	case p.outranked && s.st.outrankedFor(p.rec.Token):
		return 0, errOutranked
	}
	return max(p.delayLeft(), p.rec.lockDelay()), nil
}

// claimOnLook starts the term in one statement, the claim with the bump, on p:
// the deputy's last look at the leader (pinned.contend), age ago on the
// same session, instead of a read after the lock was won. It applies when
// p's term was a GetLock term leading, not asked to step down, and owed
// and carried no lock-delay, so that decide gave (0, nil), and p's hint
// allowed no candidate of a higher priority (mayBeOutranked); the claim
// (continued) then takes the record only if that term is still there,
// under GetLock, and either still leading, not asked to step down and
// renewed within its lease plus margin, or ended gracefully with its
// history row ended, and no delay is carried and no hand-over asked for
// (to anyone: a hand-over is not the path to make fast, and the check of
// its target's life is not cheap), and the hint no higher than it was
// (claimContinued): a record on which decide gives (0, nil)
// again, and a read now would show the term acting until now. Otherwise,
// or if the claim could not read the history (not granted, missing,
// locked), it returns errRaced, and the caller reads (open), which does
// not need the history. The clock the token must reach (next) is p's,
// moved on by age.
//
// The last term's session had ended when the lock was won, just before
// the claim: the returned predecessor was last seen then, and read when
// the claim returned, so that its history ends at the claim (lastActed)
// and Observer.Failover counts the claim's round trip (not the server's
// noticing that session's end, which the deputy cannot see).
func (s termStart) claimOnLook(ctx context.Context, q querier, p predecessor, age time.Duration) (uint64, predecessor, error) {
	if s.st.mayBeOutranked(p) {
		return 0, p, errRaced
	}
	if delay, err := s.decide(p); err != nil || delay > 0 || !p.exists || p.rec.Strategy != GetLock.String() || p.rec.State != stateLeading || p.rec.demoted {
		return 0, p, errRaced
	}
	p.rec.nowUS += age.Microseconds()
	p.rec.Renewed = p.now()
	claimed := p.next()
	sent := time.Now()
	token, ok, err := s.claimContinued(ctx, q, p, claimed)
	p.rec.nowUS += time.Since(sent).Microseconds()
	p.rec.read, p.rec.renewedBy = time.Now(), sent
	if conflict(err) || denied(err) || serverError(err, 1146, 1205) || err == nil && !ok {
		err = errRaced
	}
	return token, p, err
}

// starter opens the terms of a share's candidates (shared GetLock
// sessions, batched leases) that win at once in a few statements for all
// of them, through at most spareSessions pool sessions: the first
// candidate to get one opens every start queued by then (claimBatch), as a
// group commit does. A process whose session took a thousand locks in one
// poll starts those terms in a few round trips, not two thousand.
type starter struct {
	spare spare
	db    *sql.DB
	limit time.Duration // bounds a batch, as tryLimit bounds one start

	mu    sync.Mutex
	queue []*opening
}

// opening is one term start in a starter's queue, and its outcome.
type opening struct {
	s     termStart
	taken bool          // in a batch; guarded by the starter's mu
	alone bool          // to be opened alone (see claimBatch)
	done  chan struct{} // closed when the outcome is in

	since func() time.Time // what the lease counts from, read just before the start's read
	sent  time.Time        // since's answer
	token uint64
	delay time.Duration
	p     predecessor
	err   error
}

// startBatch and startBytes bound a batch (startBatch: but for MySQL before
// 8.0.31, platform.startBatch), and so its statements' size,
// well below the smallest max_allowed_packet a server here starts with
// (4 MiB, MySQL 5.7): an election's row is a few hundred bytes, plus its
// name, identity and value, which may be long.
const (
	startBatch = 1000
	startBytes = 1 << 20
)

// startBatched opens s's term as termStart.readAndClaim does, in a batch with the
// others queued, and returns its outcome (an empty one with an error when
// ctx ended before a batch took it). A start taken into a batch is waited
// for, even after ctx ends: the batch is bounded by the starter's limit,
// and a term it started is the caller's to end. One the batch leaves alone
// is opened alone, a few at a time, as before batches: a thousand first
// terms must not wait for each other.
//
// The term's lease counts from since, taken just before the read the term
// follows (opening.sent), or from that moment if since is nil.
func (b *starter) startBatched(ctx context.Context, s termStart, since func() time.Time) (*opening, error) {
	if since == nil {
		since = time.Now
	}
	o := &opening{s: s, since: since, done: make(chan struct{})}
	b.mu.Lock()
	b.queue = append(b.queue, o)
	b.mu.Unlock()
	err := b.spare.run(ctx, func() error {
		b.flush(ctx, o)
		return nil
	})
	if err != nil {
		b.mu.Lock()
		taken := o.taken
		if !taken {
			b.queue = slices.DeleteFunc(b.queue, func(q *opening) bool { return q == o })
		}
		b.mu.Unlock()
		if !taken {
			return o, err
		}
	}
	<-o.done
	if o.alone {
		ctx, cancel := context.WithTimeout(ctx, b.limit)
		defer cancel()
		if err := b.spare.run(ctx, func() error {
			o.sent = o.since()
			o.err = onConn(ctx, b.db, func(q querier) (err error) {
				o.token, o.delay, o.p, err = o.s.readAndClaim(ctx, q)
				return err
			})
			return nil
		}); err != nil {
			return o, err
		}
	}
	return o, o.err
}

// flush opens the queued starts in batches until o's has been taken into
// one. A batch holds one start of an election at most (two candidates of
// a process may wait in one): another waits for the next. Its statements
// run on one session, which sees its own claims on a cluster too; they
// keep ctx's values, not its end.
func (b *starter) flush(ctx context.Context, o *opening) {
	for {
		b.mu.Lock()
		if o.taken {
			b.mu.Unlock()
			return
		}
		var batch []*opening
		in, size := map[string]bool{}, 0
		for _, q := range b.queue {
			n := 300 + 2*(len(q.s.st.name)+len(q.s.st.cfg.Identity)+len(q.s.st.proclaimed())) // hex
			server, _ := q.s.st.settled()
			if in[q.s.lock] || len(batch) >= server.startBatch() || len(batch) > 0 && size+n > startBytes {
				continue
			}
			q.taken, in[q.s.lock], size = true, true, size+n
			batch = append(batch, q)
		}
		b.queue = slices.DeleteFunc(b.queue, func(q *opening) bool { return q.taken })
		b.mu.Unlock()
		// In one order, so that two processes' batches lock the rows they
		// share in one order.
		slices.SortFunc(batch, func(x, y *opening) int { return strings.Compare(x.s.lock, y.s.lock) })
		bctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), b.limit)
		conn, err := b.db.Conn(bctx)
		var refused error // by a read-only server: the session is dropped (release)
		for try := 0; len(batch) > 0; try++ {
			if err != nil {
				for _, q := range batch {
					q.err = during("reading the record", refusal(err))
					close(q.done)
				}
				break
			}
			batch = claimBatch(bctx, conn, batch, try, &refused)
		}
		if conn != nil {
			release(conn, refused)
		}
		cancel()
	}
}

// claimBatch opens the starts of batch, of distinct elections that share
// the tables, as open does each, in three statements for all of them: a
// read of their records (readPredecessors), their claims, each a
// compare-and-set on its read that bumps its epoch row (claimBatched), and
// a read of the records and epoch rows, which tells whose claim landed and
// its token (readLandings). It returns the starts whose claims lost a race
// on the first try, to be tried again; on the second they are ErrHeld, as
// open's are. Every other start is done
// when it returns, or left to be opened alone: one whose election has no
// record yet, or no epoch row, and every claim of a batch whose UPDATE
// lost to another transaction or waited too long for a row (a leader
// stopped inside a fenced transaction holds its epoch row): one election's
// wait or conflict must not become every other's. A start the server
// refused as read-only is noted in refused, before its caller may see it.
func claimBatch(ctx context.Context, conn *sql.Conn, batch []*opening, try int, refused *error) (raced []*opening) {
	defer func() {
		again := map[*opening]bool{}
		for _, o := range raced {
			again[o] = true
		}
		for _, o := range batch {
			if readOnly(o.err) {
				*refused = o.err
			}
			if !again[o] {
				close(o.done)
			}
		}
	}()
	tbl := batch[0].s.st.tbl
	byLock := make(map[string]*opening, len(batch))
	terms := make([]termStart, len(batch))
	for i, o := range batch {
		byLock[o.s.lock] = o
		terms[i] = o.s
	}
	fail := func(starts []*opening, err error) {
		for _, o := range starts {
			o.err = err
		}
	}
	for _, o := range batch {
		o.sent = o.since()
	}
	reads, err := readPredecessors(ctx, conn, terms)
	if err != nil {
		fail(batch, err)
		return nil
	}
	found := map[*opening]bool{}
	for _, r := range reads {
		o := byLock[r.lock]
		o.p, found[o] = r.p, r.epochExists
	}
	var (
		claims  []*opening
		claimed = map[*opening]uint64{}
		made    []batchClaim
	)
	for _, o := range batch {
		if !found[o] {
			o.alone = true
			continue
		}
		if o.delay, o.err = o.s.decide(o.p); o.err != nil {
			continue
		}
		claimed[o] = o.p.next()
		claims, made = append(claims, o), append(made, batchClaim{o.s, o.p, claimed[o], o.delay})
	}
	if len(claims) == 0 {
		return nil
	}
	err = claimBatched(ctx, conn, made)
	if conflict(err) || serverError(err, 1205) { // lost to another transaction, or a lock wait timed out: nothing was claimed
		for _, o := range claims {
			o.alone = true
		}
		return nil
	}
	if err != nil {
		fail(claims, during("starting the term", schemaError(tbl, err)))
		return nil
	}
	locks := make([]string, len(claims))
	for i, o := range claims {
		locks[i] = o.s.lock
	}
	landings, err := readLandings(ctx, conn, tbl, locks)
	if err != nil {
		// The claims may have landed: give them up, as a start whose bump
		// failed does, so that no one waits for them to go stale.
		for _, o := range claims {
			o.s.endClaim(ctx, conn, claimed[o])
		}
		fail(claims, err)
		return nil
	}
	got := map[string]landing{}
	for _, l := range landings {
		got[l.lock] = l
	}
	var lost []*opening
	for _, o := range claims {
		l := got[o.s.lock]
		switch {
		case l.session != o.s.session || l.claimed != claimed[o]:
			lost = append(lost, o)
			continue
		case l.token < claimed[o]:
			o.err = fmt.Errorf("election: starting the term: the epoch is %d, below the claimed %d", l.token, claimed[o])
			continue
		}
		if o.token, o.err = o.s.follow(ctx, conn, claimed[o], l.token); errors.Is(o.err, errRaced) {
			o.err = nil
			lost = append(lost, o)
		}
	}
	if len(lost) == 0 {
		return nil
	}
	if try == 0 {
		return lost
	}
	fail(lost, ErrHeld)
	return nil
}

package election

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"
)

// A process in many LeaseRow elections batches its statements, as a
// shared session does for GetLock (shared.go), through the pool: every
// Interval one statement renews every lease its candidates hold, and every
// CheckInterval one statement reads the records of every election its
// candidates wait for, and one stamps the rows of those whose heartbeat is
// due. A waiting candidate tries the lease itself (termStart.readAndClaim) only when
// the read shows it may be free. See docs/protocol.md, "Shared sessions".
type leaseShare struct {
	key    shareKey
	spare  spare    // bounds the pool sessions its candidates join and write on at once
	starts *starter // opens its candidates' terms, through a spare of its own

	mu      sync.Mutex
	holding map[*leaseHold]bool
	waiting map[*leaseHold]chan Record // each gets the record of its election, or a zero one if it has none
	next    *renewal                   // results by holdKey
	stop    chan struct{}              // closed when the loop is to end
	gone    chan struct{}              // closed when it has
}

var leaseShares = newRegistry[leaseShare]()

// leaseShareOf returns the share of st's LeaseRow candidates, counted as
// one more user, and starts its loop for the first.
func leaseShareOf(st *store) *leaseShare {
	k := shareKeyOf(st)
	return leaseShares.use(k, func() *leaseShare {
		ls := &leaseShare{key: k, spare: newSpare(), starts: &starter{spare: newSpare(), db: st.db, limit: st.cfg.tryLimit()}, holding: map[*leaseHold]bool{}, waiting: map[*leaseHold]chan Record{},
			next: &renewal{done: make(chan struct{})}, stop: make(chan struct{}), gone: make(chan struct{})}
		go ls.run(st.cfg.heartbeatPeriod(), st.cfg.tryLimit())
		return ls
	})
}

// done counts one user less; the last stops the loop.
func (ls *leaseShare) done() {
	if leaseShares.done(ls.key) {
		close(ls.stop)
		<-ls.gone
	}
}

// holdKey names a hold in a renewal's results.
func holdKey(h *leaseHold) string { return fmt.Sprintf("%p", h) }

// run renews every Interval and reads every CheckInterval until the last
// user is done; limit bounds each statement.
func (ls *leaseShare) run(beatEvery, limit time.Duration) {
	defer close(ls.gone)
	renew := time.NewTicker(ls.key.interval)
	defer renew.Stop()
	read := time.NewTicker(ls.key.checkPeriod)
	defer read.Stop()
	for {
		select {
		case <-ls.stop:
			return
		case <-renew.C:
			ls.renewAll(limit)
		case <-read.C:
			ls.poll(beatEvery, limit)
		}
	}
}

// renewAll renews, in a statement per lockBatch, the leases of every term its
// candidates hold: the statement matches a record only while it names the
// term (its election, epoch and
// candidate id; ids are drawn at random per candidate, so one names the
// election and the term it holds) in state leading, with no demotion
// pending. A read of a batch's records follows only when fewer matched
// than were named, to tell which did not and why.
func (ls *leaseShare) renewAll(limit time.Duration) {
	ls.mu.Lock()
	r := ls.next
	ls.next = &renewal{done: make(chan struct{})}
	var holds []*leaseHold
	for h := range ls.holding {
		holds = append(holds, h)
	}
	ls.mu.Unlock()
	defer close(r.done)
	r.results = make(map[string]error, len(holds))
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	for len(holds) > 0 {
		batch := holds[:min(len(holds), lockBatch)]
		holds = holds[len(batch):]
		held := make([]heldTerm, len(batch))
		for i, h := range batch {
			held[i] = heldTerm{h.lock, h.token, h.id}
		}
		outcomes, err := renewLeases(ctx, ls.key.db, ls.key.tbl, held)
		for i, o := range outcomes {
			r.results[holdKey(batch[i])] = o
		}
		if err != nil {
			if !errors.Is(err, ErrSessionLost) { // a read-only server ends the terms at once (refusal)
				err = fmt.Errorf("%w: renewing the lease: %w", errTransient, err)
			}
			for _, h := range batch {
				r.results[holdKey(h)] = err
			}
		}
	}
}

// poll reads, in a statement per lockBatch, the records of the elections
// its candidates wait for, and hands each its record; and stamps, in a
// statement per identity, the rows of those candidates, waiting or
// leading, whose heartbeat is due.
func (ls *leaseShare) poll(beatEvery, limit time.Duration) {
	ls.mu.Lock()
	var holds, all []*leaseHold
	for h := range ls.waiting {
		holds = append(holds, h)
	}
	all = append(all, holds...)
	for h := range ls.holding {
		all = append(all, h)
	}
	ls.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	recs := map[string]Record{}
	reads := map[string]reading{}
	for rest := holds; len(rest) > 0; {
		batch := rest[:min(len(rest), lockBatch)]
		rest = rest[len(batch):]
		locks := make([]string, len(batch))
		for i, h := range batch {
			locks[i] = h.lock
		}
		// A read takes no lock, so nothing but a server that stopped or was
		// cut off holds it past a lease: given up then, its session is
		// closed, and the next read dials the DSN's address again (a
		// promoted replica, in an unplanned failover).
		readCtx, cancelRead := context.WithTimeout(ctx, ls.key.lease)
		sent := time.Now()
		rs, err := recordsOf(readCtx, ls.key.db, ls.key.tbl, locks)
		cancelRead()
		if err != nil {
			return // the candidates wait for the next read; their own tries are bounded
		}
		recv := time.Now()
		for _, r := range rs {
			// One share, one database and prefix: a name is one election.
			recs[r.Name], reads[r.Name] = r, reading{r.nowUS, sent, recv}
		}
	}
	// The heartbeats first, while the waiting candidates wait for their
	// records and touch nothing of theirs (a leader's row is the share's
	// alone).
	due := map[string][]*leaseHold{} // by identity
	for _, h := range all {
		if time.Since(h.row.seen) >= beatEvery {
			due[h.st.cfg.Identity] = append(due[h.st.cfg.Identity], h)
		}
	}
	for identity, hs := range due {
		locks := make([]string, len(hs))
		for i, h := range hs {
			locks[i] = h.lock
		}
		err := beatCandidates(ctx, ls.key.db, ls.key.tbl, identity, locks)
		for _, h := range hs {
			if err != nil {
				h.row.beat(ctx, ls.key.db) // a row gone, or the statement refused: each writes its own
			} else {
				h.row.seen = time.Now()
			}
		}
	}
	type handing struct {
		h  *leaseHold
		ch chan Record
	}
	var hand []handing
	ls.mu.Lock()
	for _, h := range holds {
		if ch, ok := ls.waiting[h]; ok {
			delete(ls.waiting, h)
			hand = append(hand, handing{h, ch})
		}
	}
	ls.mu.Unlock()
	for _, w := range hand { // each channel holds one record: no send waits
		rec, found := recs[w.h.st.name]
		if found {
			w.h.st.vouch(&rec, reads[w.h.st.name])
		}
		w.ch <- rec
	}
}

// awaitFree waits, under ctx, until the share's read shows that the lease
// of h's election may be free (no term of LeaseRow may still act in it, as
// the record's rule says): only then does h try it, in statements of its
// own. seen logs whom it waits for.
func (ls *leaseShare) awaitFree(ctx context.Context, h *leaseHold, seen *leaderSeen, log *slog.Logger) error {
	for {
		ch := make(chan Record, 1)
		ls.mu.Lock()
		ls.waiting[h] = ch
		ls.mu.Unlock()
		select {
		case rec := <-ch:
			if !rec.Leading() || rec.Strategy != LeaseRow.String() {
				return nil
			}
			seen.see(log, rec.Identity, rec.Token)
		case <-ctx.Done():
			ls.mu.Lock()
			delete(ls.waiting, h)
			ls.mu.Unlock()
			return ctx.Err()
		}
	}
}

// hold renews h's term from the next renewal on, until unhold.
func (ls *leaseShare) hold(h *leaseHold) {
	ls.mu.Lock()
	ls.holding[h] = true
	ls.mu.Unlock()
}

func (ls *leaseShare) unhold(h *leaseHold) {
	ls.mu.Lock()
	delete(ls.holding, h)
	ls.mu.Unlock()
}

// renewed waits for the next renewal, which is sent after this call, and
// returns its outcome for h; errResigning if quit closes first.
func (ls *leaseShare) renewed(ctx context.Context, h *leaseHold, quit <-chan struct{}) error {
	ls.mu.Lock()
	r := ls.next
	ls.mu.Unlock()
	select {
	case <-r.done:
		if err, ok := r.results[holdKey(h)]; ok {
			return err
		}
		return fmt.Errorf("%w: renewing the lease: the renewal left this term out", errTransient)
	case <-quit:
		return errResigning
	case <-ctx.Done():
		return fmt.Errorf("%w: renewing the lease: %w", errTransient, ctx.Err())
	}
}

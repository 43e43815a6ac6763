package election

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"log/slog"
	"time"
)

// leaseRow is the LeaseRow strategy: the election is held by a lease in
// the record row, renewed through the pool.
type leaseRow struct {
	st  *store
	log *slog.Logger
	id  uint64 // stands in the record where GetLock puts the connection id
}

// newLeaseRow draws the candidate's id once: a claim left behind by a
// failed start is then still recognised as its own.
func newLeaseRow(st *store, log *slog.Logger) *leaseRow {
	return &leaseRow{st: st, log: log, id: randomID()}
}

// randomID draws an id below 2^63 (anyHolder is above).
func randomID() uint64 {
	var b [8]byte
	rand.Read(b[:])
	return binary.BigEndian.Uint64(b[:]) >> 1
}

// leaseHold is a candidate of the LeaseRow strategy. It pins no session:
// every statement goes through the pool, and a random id stands in the
// record where GetLock puts the connection id.
type leaseHold struct {
	st    *store
	share *leaseShare // renews the lease, with every other the process holds
	lock  string
	id    uint64
	token uint64
	row   presence
}

// acquire tries to take the lease until it gets it or ctx ends: at once,
// then whenever the read of the process's share (leaseShare.awaitFree, one
// statement per CheckInterval for all its waiting candidates) shows the
// lease may be free. A try is a read of the record, and the claim and the
// bump (termStart.readAndClaim) only when it is free.
func (l *leaseRow) acquire(ctx context.Context, lock string, try bool) (won, error) {
	share := leaseShareOf(l.st)
	h := &leaseHold{st: l.st, share: share, lock: lock, id: l.id, row: presence{st: l.st, lock: lock, session: SessionPool}}
	w, err := l.win(ctx, h, try)
	if err != nil {
		share.done()
		return w, err
	}
	share.hold(h)
	return w, nil
}

// win is acquire's loop.
func (l *leaseRow) win(ctx context.Context, h *leaseHold, try bool) (won, error) {
	// The join and each try are bounded by 2W, as a pinned session's lock
	// waits are (the tries by the starter's limit): one stuck in a network
	// partition gives up, so that the candidate soon tries again, yet one
	// blocked behind the epoch row of a leader stopped inside a fenced
	// transaction outlasts it (the server ends that one after W). A few at
	// a time (spare): a process that joins a thousand elections at once
	// must not send a thousand statements at once.
	joinCtx, cancel := context.WithTimeout(ctx, l.st.cfg.tryLimit())
	err := h.share.spare.run(joinCtx, func() error { return h.row.join(joinCtx, l.st.db) })
	cancel()
	if err != nil {
		return won{}, err
	}
	if !try {
		l.log.Debug("waiting: the lease is read every CheckInterval, for every election this process waits in at once", "check_interval", l.st.cfg.CheckInterval.String())
	}
	var seen leaderSeen
	for {
		o, err := h.take(ctx)
		switch {
		case err == nil:
			return won{h: h, token: h.token, sent: o.sent, delay: o.delay, p: o.p}, nil
		case !errors.Is(err, ErrHeld) && !errors.Is(err, errYield):
			return won{}, err
		case try && errors.Is(err, ErrHeld) && !o.p.rec.onServer().Leading():
			return l.watchOnce(ctx, h, o.p.rec)
		case try:
			return won{}, ErrHeld
		case errors.Is(err, ErrHeld):
			seen.see(l.log, o.p.rec.Identity, o.p.rec.Token)
		}
		if err := h.share.awaitFree(ctx, h, &seen, l.log); err != nil {
			return won{}, err
		}
	}
}

// watchOnce is a try's answer when the database clock says the lease rec
// names is over, but this process's watch cannot vouch for that yet: it
// has not watched that renewal (a process just started, as a cron job's
// is, or the server's clock just stepped). Held for good, the election of
// a leader that crashed would stay refused to every later try; taken on
// the server's clock, a step forward would depose a healthy leader. So
// the try watches it, as a waiting candidate would, for up to the lease
// and margin it shows, and tries once more when its watch says it is over
// (a live leader renews meanwhile: held).
func (l *leaseRow) watchOnce(ctx context.Context, h *leaseHold, rec Record) (won, error) {
	l.log.Debug("the database clock says the lease is over, which this process has not watched: watching it before the answer",
		"leader", rec.Identity, "token", rec.Token, "for", (rec.Expiry + 2*l.st.cfg.CheckInterval).String())
	// From the try's read, where the watch first saw the renewal, to the
	// share's read after the lease and margin: two check intervals.
	wctx, cancel := context.WithTimeout(ctx, rec.Expiry+2*l.st.cfg.CheckInterval)
	defer cancel()
	var seen leaderSeen
	if err := h.share.awaitFree(wctx, h, &seen, l.log); err != nil {
		if ctx.Err() != nil {
			return won{}, ctx.Err()
		}
		return won{}, ErrHeld
	}
	o, err := h.take(ctx)
	if err != nil {
		if errors.Is(err, errYield) {
			err = ErrHeld
		}
		return won{}, err
	}
	return won{h: h, token: h.token, sent: o.sent, delay: o.delay, p: o.p}, nil
}

// take takes the lease if the election is free, or returns ErrHeld or
// errYield, in a batch with the other leases its share tries at once
// (starter).
//
// While the lease is held that is one plain read (termStart.read):
// waiters take no row locks.
func (h *leaseHold) take(ctx context.Context) (*opening, error) {
	o, err := h.share.starts.startBatched(ctx, termStart{h.st, h.lock, h.id, 0}, nil)
	if err == nil {
		h.token = o.token
	}
	return o, err
}

// begin writes the term's history once it has begun, through the pool a
// few terms at a time (spare).
func (h *leaseHold) begin(ctx context.Context, started time.Time, p predecessor) error {
	return h.share.spare.run(ctx, func() error {
		return termStart{h.st, h.lock, h.id, 0}.writeHistory(ctx, h.st.db, h.token, p, started)
	})
}

// renew extends the lease in the share's next renewal (leaseShare.renewAll).
// It fails only when the record names another term or asks this one to
// step down; a failed statement is transient, retried until the local
// lease runs out.
func (h *leaseHold) renew(ctx context.Context, quit <-chan struct{}) error {
	return h.share.renewed(ctx, h, quit)
}

// release records why the term ended, a few terms at a time (spare: a
// stopped process's leases run out at once); a lease ended as anything but
// "leading" is free for the next candidate's next try.
func (h *leaseHold) release(ctx context.Context, end ending) error {
	h.share.unhold(h)
	return h.share.spare.run(ctx, func() error { return h.st.endTerm(ctx, h.st.db, h.lock, h.token, end) })
}

func (h *leaseHold) lost(ctx context.Context, end ending) error { return h.release(ctx, end) }

// close ends the hold's use of its share.
func (h *leaseHold) close() {
	h.share.unhold(h)
	h.share.done()
}

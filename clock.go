package election

// The database server's clock as a candidate watches it. The record's
// times are stamped on the server's wall clock, which may be stepped (NTP
// at boot, a VM resumed, a hand-set date): an age read on it alone could
// make a healthy leader look overdue (a step forward) or a dead one fresh
// (a step back). So a waiter decides by what it can vouch for on its own
// monotonic clock: it trusts the server's clock only across runs of its
// reads in which that clock moved as its own, and a value of the record,
// once seen, only ages. See docs/protocol.md, "Clocks".

import (
	"sync"
	"time"
)

// reading is the server's clock, in µs since the Unix epoch, as one
// statement read it (UTC_TIMESTAMP(6): the statement's start), between the
// statement's send and the receipt of its answer on the local monotonic
// clock.
type reading struct {
	serverUS   int64
	sent, recv time.Time
}

// stepSlack is what a comparison of the server's clock with the local one
// allows beyond the round trips that bound it: the clocks' rates may
// differ (NTP slews by at most 500 ppm) and the server rounds to µs. A
// step smaller than this and the round trips goes unseen, and moves a
// decision by at most that much.
func stepSlack(span time.Duration) time.Duration {
	return time.Millisecond + span/1000
}

// noticedStep is the least step worth a WARN: NTP steps a clock by
// 128 ms or more (ntpd's threshold; chrony's is a second), while the
// clocks of a cluster's nodes, which a pool may reach in turn, differ by a
// few ms, each seen as a step, at Debug.
const noticedStep = 100 * time.Millisecond

// serverClock is what one process has seen of a server's clock through
// one pool: the latest reading, and the first reading of the current run,
// in which the server's clock moved between any two readings as the local
// monotonic clock did. A step starts a new run; so does a read that
// reaches another server whose clock differs by more than stepSlack (a
// failover of the database, a cluster's other node).
type serverClock struct {
	mu     sync.Mutex
	last   reading
	anchor reading // the run's first reading; zero before the first
}

// see takes reading r into the watch, and returns how far the server's
// clock stepped since the last reading (0: no step seen; a new run starts
// at r otherwise) and the run's first reading.
func (c *serverClock) see(r reading) (step time.Duration, anchor reading) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.anchor.recv.IsZero() {
		c.last, c.anchor = r, r
		return 0, r
	}
	l := c.last
	// Each reading was taken between its send and its receipt, so without
	// a step the server's clock moved between them by no less than the
	// time from l's receipt to r's send, and no more than from l's send to
	// r's receipt.
	moved := time.Duration(r.serverUS-l.serverUS) * time.Microsecond
	lo, hi := r.sent.Sub(l.recv), r.recv.Sub(l.sent)
	slack := stepSlack(hi)
	switch {
	case moved < lo-slack:
		step = moved - lo
	case moved > hi+slack:
		step = moved - hi
	}
	if step != 0 {
		c.anchor = r
	}
	if r.recv.After(l.recv) {
		c.last = r
	}
	return step, c.anchor
}

// stampedBy returns the latest local instant at which the server can have
// stamped us, by reading r in a run that began at anchor: us moved back
// from r's receipt by its age on the server's clock, but not later than
// the receipt (a stamp ahead of the reading: the clock went back since),
// and not earlier than the run's first receipt (a stamp from before the
// run may have been made on a clock since stepped: it was made before
// that receipt, which is all that is known).
func stampedBy(us int64, r, anchor reading) time.Time {
	at := r.recv.Add(-time.Duration(r.serverUS-us) * time.Microsecond)
	if at.After(r.recv) {
		at = r.recv
	}
	if at.Before(anchor.recv) {
		at = anchor.recv
	}
	return at
}

// sighting is one value of a stamp of the record, as one reader first
// vouched for it: the term it belongs to, the stamp, and the latest local
// instant at which it can have been made. A value seen again keeps the
// earliest such instant: it only ages, whatever the server's clock does.
type sighting struct {
	epoch uint64
	us    int64
	by    time.Time
}

// see returns the latest local instant at which the stamp us of term epoch
// can have been made: by, or what an earlier sighting of the same value
// vouched for, if earlier.
func (s *sighting) see(epoch uint64, us int64, by time.Time) time.Time {
	if s.by.IsZero() || s.epoch != epoch || s.us != us {
		*s = sighting{epoch, us, by}
		return by
	}
	if by.Before(s.by) {
		s.by = by
	}
	return s.by
}

// sightings is what one reader (a candidate, or an Operator that waits
// for a demotion) has seen of one election's record: the last renewal, the
// last demotion and the start of the term it names.
type sightings struct {
	mu                         sync.Mutex
	renewal, demotion, claimed sighting
}

// vouch makes rec, read by r, a record its reader can decide by: the
// latest local instants at which its renewal, its demotion and its claim
// can have been stamped, by this reader's watch of the server's clock and
// its earlier sightings. Record's rule reads its ages from there (see
// Record.renewalAge). A step of the server's clock seen by this read is
// logged.
func (s *store) vouch(rec *Record, r reading) {
	step, anchor := s.first.clock.see(r)
	switch {
	case step.Abs() >= noticedStep:
		s.cfg.Logger.Warn("the database server's clock stepped: ages of the election's rows are judged from this candidate's own clock "+
			"until it has watched the server's for a while (no leader is deposed by a step, and none is waited for longer)",
			"election", s.name, "step", step.Round(time.Millisecond).String())
	case step != 0:
		s.cfg.Logger.Debug("the database server's clock moved apart from this candidate's (another node of a cluster, or a small step): a new run of the watch",
			"election", s.name, "step", step.String())
	}
	seen := &s.seen
	seen.mu.Lock()
	defer seen.mu.Unlock()
	rec.read = r.recv
	rec.renewedBy = seen.renewal.see(rec.Token, rec.Renewed.UnixMicro(), stampedBy(rec.Renewed.UnixMicro(), r, anchor))
	rec.claimedBy = seen.claimed.see(rec.Token, rec.Since.UnixMicro(), stampedBy(rec.Since.UnixMicro(), r, anchor))
	if !rec.Ended.IsZero() {
		rec.endedBy = stampedBy(rec.Ended.UnixMicro(), r, anchor)
	}
	if rec.demoteAt.Valid {
		rec.demotedBy = seen.demotion.see(rec.Token, rec.demoteAt.Int64, stampedBy(rec.demoteAt.Int64, r, anchor))
	}
}

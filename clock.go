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

// The server's clock runs at its own offset from the local monotonic
// clock: a reading taken between a statement's send and its receipt puts
// that offset (the server's µs minus the local instant) in an interval as
// wide as the round trip. Across a run of readings with no step, every
// reading's interval holds the offset, so the run keeps their intersection,
// as tight as its quickest round trip. A reading whose interval misses it
// was taken after a step. The clocks' rates may differ (NTP slews by at
// most 500 ppm): the intersection widens by rateSlack of the time since it
// was last narrowed, and a reading more than runGap after that starts a new
// run, so that a step never hides in the slack of a long pause. A step
// smaller than the tolerance goes unseen, and moves a decision by at most
// that much.
const runGap = 10 * time.Second

func rateSlack(since time.Duration) time.Duration { return time.Millisecond + since/1000 }

// noticedStep is the least step worth a WARN: NTP steps a clock by
// 128 ms or more (ntpd's threshold; chrony's is a second), while the
// clocks of a cluster's nodes, which a pool may reach in turn, differ by a
// few ms, each seen as a step, at Debug.
const noticedStep = 100 * time.Millisecond

// serverClock is what one process has seen of a server's clock through
// one pool: the current run of its readings, in which the server's clock
// moved as the local monotonic clock did. A step starts a new run; so does
// a read that reaches another server whose clock differs by more than the
// tolerance (a failover of the database, a cluster's other node).
type serverClock struct {
	mu     sync.Mutex
	origin time.Time // the first reading's receipt: offsets are counted from it, in µs
	run    run
}

// run is a run of readings: its first receipt, and the interval that
// holds the server's offset from the local clock, as narrowed at at.
type run struct {
	first, at time.Time
	lo, hi    int64 // µs: the server's clock minus (the local instant - origin)
}

// offsets is the interval of the server's offset that reading r puts it in.
func (c *serverClock) offsets(r reading) (lo, hi int64) {
	return r.serverUS - r.recv.Sub(c.origin).Microseconds(), r.serverUS - r.sent.Sub(c.origin).Microseconds()
}

// see takes reading r into the watch. It returns how far the server's
// clock stepped since the run's readings (0: no step seen, or a new run
// after a long pause), and what r lets a reader place stamps by.
func (c *serverClock) see(r reading) (step time.Duration, p placing) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.origin.IsZero() {
		c.origin = r.recv
	}
	lo, hi := c.offsets(r)
	cur := c.run
	switch slack := rateSlack(r.recv.Sub(cur.at)).Microseconds(); {
	case cur.first.IsZero() || r.recv.Sub(cur.at) > runGap:
		c.run = run{first: r.recv, at: r.recv, lo: lo, hi: hi}
	case hi < cur.lo-slack || lo > cur.hi+slack:
		step = time.Duration((lo+hi)/2-(cur.lo+cur.hi)/2) * time.Microsecond
		c.run = run{first: r.recv, at: r.recv, lo: lo, hi: hi}
	case r.recv.After(cur.at):
		c.run = run{first: cur.first, at: r.recv, lo: max(cur.lo-slack, lo), hi: min(cur.hi+slack, hi)}
	default: // a reading that overlapped a later one: it narrows, and ages nothing
		c.run.lo, c.run.hi = max(cur.lo, lo), min(cur.hi, hi)
	}
	return step, placing{origin: c.origin, first: c.run.first, lo: c.run.lo, recv: r.recv}
}

// placing is what one reading lets a reader place the server's stamps by:
// the run's least offset and first receipt, and the reading's receipt.
type placing struct {
	origin, first, recv time.Time
	lo                  int64
}

// stampedBy returns the latest local instant at which the server can have
// stamped us: us moved back by the least offset the run allows, but not
// later than the reading's receipt (a stamp ahead of the reading: the
// clock went back since) and not earlier than the run's first receipt (a
// stamp from before the run may have been made on a clock since stepped:
// it was made before that receipt, which is all that is known).
func (p placing) stampedBy(us int64) time.Time {
	at := p.origin.Add(time.Duration(us-p.lo) * time.Microsecond)
	if at.After(p.recv) {
		at = p.recv
	}
	if at.Before(p.first) {
		at = p.first
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

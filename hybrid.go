package election

// The record beside the lock, as a reader takes it: who leads, the term
// history's rows and the candidates'; and the record's rule, which
// decides from one read of it whether the term it names may still act.
// The statements that read and write these rows are the store's
// (store.go).

import (
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"
)

// errHandedOver marks a demotion that names a successor.
var errHandedOver = errors.New("handing over")

// errYield: the election was won while it is meant for another
// candidate; the term is not started, and the lock is given back. Its
// causes: a hand-over to another live candidate is pending, or a candidate
// of a higher priority waits (Config.Priority).
var (
	errYield     = errors.New("election: yielding the election")
	errHandover  = fmt.Errorf("%w to the target of a pending hand-over", errYield)
	errOutranked = fmt.Errorf("%w to a waiting candidate of higher priority", errYield)
)

// demotion is the error that ends a term whose record asks it to step down.
func demotion(handTo sql.NullString) error {
	if handTo.Valid {
		return fmt.Errorf("%w: %w to %q", ErrDemoted, errHandedOver, handTo.String)
	}
	return ErrDemoted
}

// Record is the keepalive row of an election as anyone with SELECT on the
// tables can read it, together with who holds the lock now. Times come from
// the database clock.
type Record struct {
	Name     string // the election's name
	Strategy string // "get_lock" or "lease"
	State    string // "leading", or why the last term ended (see History)
	Token    uint64 // the epoch of the term the record describes
	Identity string // the holder's identity
	Host     string // the holder's host name
	PID      int    // the holder's process id
	ConnID   uint64 // the holder's pinned session
	Since    time.Time
	Renewed  time.Time
	Ended    time.Time // zero while leading
	// RenewedAgo is the age of the last renewal when the record was read,
	// on the database clock; negative when the renewal was stamped ahead
	// of that clock, which was stepped back since (by at least as much):
	// its age cannot be read off it then. A waiting candidate does not
	// decide by it (see Leading).
	RenewedAgo time.Duration
	// Expiry is Lease+Margin of the holder: a renewal older than this means
	// the holder no longer acts, whatever the lock says.
	Expiry time.Duration
	// LockConnID is the session that holds the lock now, 0 if none.
	LockConnID uint64
	// DemotedAgo is how long ago a demotion of this term was requested; 0
	// if none was.
	DemotedAgo time.Duration
	// HandoverTo is the candidate a pending hand-over prefers.
	HandoverTo string
	// Value is what the holder proclaims (Config.Value, Term.Proclaim).
	// It is written by the leader's code: print it quoted.
	Value string

	demoted   bool          // a demotion of this term was requested (DemotedAgo counts from it)
	demoteAt  sql.NullInt64 // the last request's time as stored, µs, for the claim's compare-and-set
	renewedUS sql.NullInt64 // the record's own renewed_at, µs, for the same (Renewed may be its session's lease's)
	nowUS     int64         // the database clock when the record was read, µs since the Unix epoch

	// The reader's watch (store.vouch), for a record a candidate decides
	// by: when the read returned, on the local monotonic clock, and the
	// latest local instants at which the renewal, the demotion and the
	// claim can have been stamped. Zero for a record read once (an
	// Operator's Leader, History): its ages are the database clock's.
	read, renewedBy, demotedBy, claimedBy time.Time
}

// The record's rule: what one read of the record says of the term it
// names. Every decision about that term comes from here: whether a new
// term may start and after what lock-delay (termStart.decide), whether its
// session must be killed (pinned.contend, Operator.demote), whether
// Operator.Leader reports it, and how the history ends it (settle,
// termStart.history). The claim of a new term only checks that the record is
// unchanged since the read (termStart.claim). TestRecordRule has the table.

// Leading reports whether the term the record names may still act: it is
// in state leading and has renewed within its lease plus margin (Expiry);
// under GetLock its recorded session holds the lock (LockConnID), and
// under LeaseRow it has not ignored a demotion for longer than Expiry. On a
// record read once, as Operator.Leader reads it, ages are the database
// clock's; a waiting candidate, which reads the record again and again,
// decides by the ages its watch of that clock vouches for (clock.go), so
// that a step of the database clock neither deposes a healthy leader nor
// holds the next one back.
func (r Record) Leading() bool {
	return r.State == stateLeading && !r.stale() && r.holds()
}

// holds reports whether the recorded holder still holds what its strategy
// holds the election with: under GetLock the lock, which its session must
// hold (cross-checked with IS_USED_LOCK); under LeaseRow the row, unless
// it has ignored a demotion for longer than its lease plus margin.
func (r Record) holds() bool {
	if r.Strategy == LeaseRow.String() {
		return !r.defied()
	}
	return r.LockConnID != 0 && r.LockConnID == r.ConnID
}

// stale: no renewal for longer than the lease plus margin.
func (r Record) stale() bool { return r.renewalAge() > r.Expiry }

// defied: asked to step down longer than its lease plus margin ago.
func (r Record) defied() bool { return r.demoted && r.demotionAge() > r.Expiry }

// onServer is r as a one-shot reader sees it: with the database clock's
// ages, not the reader's watch's.
func (r Record) onServer() Record {
	r.read = time.Time{}
	return r
}

// renewalAge and demotionAge are how long before the read the last
// renewal and the demotion were stamped: at least as long as the reader's
// watch vouches for (store.vouch), or on the database clock for a record
// read once.
func (r Record) renewalAge() time.Duration {
	if r.read.IsZero() {
		return r.RenewedAgo
	}
	return r.read.Sub(r.renewedBy)
}

func (r Record) demotionAge() time.Duration {
	if r.read.IsZero() {
		return r.DemotedAgo
	}
	return r.read.Sub(r.demotedBy)
}

// overdue says why the recorded holder's session must be killed, or "":
// it holds the lock (cross-checked with IS_USED_LOCK) yet has not renewed
// for longer than its lease plus margin, so it is stuck inside a query (an
// idle one would have been dropped by wait_timeout); or it was asked to
// step down longer than that ago and has not. A lease holds no session.
func (r Record) overdue() string {
	if r.State != stateLeading || r.Strategy != GetLock.String() || !r.holds() {
		return ""
	}
	switch {
	case r.stale():
		return stateHangKilled
	case r.defied():
		return stateDemoteKilled
	}
	return ""
}

// lockDelay is how long a term that follows this one must wait before it
// acts, owed besides any delay carried over from earlier terms: a term
// forced out (asked to step down, or killed as stuck) that did not end
// gracefully may act until its lease has certainly expired.
func (r Record) lockDelay() time.Duration {
	switch {
	case slices.Contains(gracefulEnds, r.State):
		return 0
	case r.State == stateHangKilled, r.State == stateDemoteKilled:
	case !r.demoted:
		return 0
	}
	return max(r.Expiry-r.renewalAge(), 0)
}

// lastActed is when the term could act no longer, as far as the read
// tells, on the database clock: its recorded end, else the end of its
// lease, or the read itself (now) if that came first.
func (r Record) lastActed(now time.Time) time.Time {
	if !r.Ended.IsZero() {
		return r.Ended
	}
	return earlier(now, r.Renewed.Add(r.Expiry))
}

// TermRecord is one term of an election's history.
type TermRecord struct {
	Token    uint64
	Identity string
	Host     string
	PID      int
	// Server is the database server that granted the term, as it names
	// itself: host:port/server_id. A change between two terms is a
	// failover of the database (or, on Galera, a leader on another node).
	// Empty when the term's leader did not write its own row.
	Server  string
	Started time.Time // database clock
	// Ended is when the leader stopped acting, on the database clock, zero
	// while the term may still act: when it released the election, or
	// when it saw its term end (a paused or cut-off leader: its lease's end
	// at the latest), even if it could write that only later. For a "lost"
	// term, when it could act no longer as far as anyone could tell: the
	// next term's start or its lease's end, whichever came first, and not
	// before its last renewal. Never before Started, nor after the next
	// term's Started, whatever the database clock did (see Lasted).
	Ended time.Time
	// Reason says why the term ended, in the words the leader's log ("term
	// ended", reason=...), its Observer and Watch use: resigned, demoted,
	// handed-over, unhealthy, hang-killed, demote-killed, lease-expired,
	// session-lost, lock-lost, or lost when the leader has not said why (a
	// crash; a leader still paused or cut off, which records its own reason
	// when it is back).
	Reason string
	// Lasted is how long the term lasted by its leader's own clock, from
	// its start to its end; 0 when its leader did not record its end (a
	// crash, a kill). Started and Ended are on the database clock, and
	// kept in order (no term starts before the one it followed ended, none
	// ends before it started) by holding a time still while that clock
	// went back: where Ended − Started and Lasted differ by more than the
	// round trips between them, the database clock was stepped during the
	// term.
	Lasted time.Duration
}

// Candidate is one participant of an election, from its row.
type Candidate struct {
	Identity string
	Host     string
	PID      int
	Since    time.Time // when this process joined, database clock
	// SeenAgo is how long ago the candidate was last known to campaign: 0
	// for a live GetLock candidate, whose session's lock shows it at every
	// read; the age of its last heartbeat for a LeaseRow candidate. For a
	// GetLock candidate that is gone (not Alive, and not withdrawn as
	// unhealthy) the server does not say when its session ended: SeenAgo is
	// then only the age of its row's last write, an upper bound.
	SeenAgo time.Duration
	Alive   bool // it campaigns now
	Leader  bool // it leads now
	// Value, Priority and Version are the candidate's Config.Value (or
	// what it last proclaimed), Config.Priority and Config.Version.
	Value    string
	Priority int32
	Version  string
	// Health is "healthy" or "unhealthy" (see Config.Health), and empty
	// for a candidate that runs no check. An unhealthy one does not
	// campaign.
	Health string
	// Session is how the candidate reaches the server (see "Sessions" in
	// the package doc): SessionOwn, SessionShared or SessionPool; empty
	// for a candidate of a version that did not record it.
	Session string
}

// The ways a candidate reaches the server (Candidate.Session). Which of
// SessionOwn and SessionShared a GetLock campaign takes is decided in one
// place, sessionShare.takeOwn.
const (
	// SessionOwn: a server session pinned for this election alone
	// (GetLock), whose end the server turns into a failover in
	// milliseconds.
	SessionOwn = "own"
	// SessionShared: a server session this election shares with the
	// process's other GetLock elections on the same *sql.DB, whose
	// waiters try the locks every CheckInterval: its failover follows
	// those tries, not the server's end of a session.
	SessionShared = "shared"
	// SessionPool: no session of its own; its statements go through the
	// pool, batched with the process's other LeaseRow elections.
	SessionPool = "pool"
)

// candidateLock is the lock a GetLock candidate's session holds while it
// campaigns: its liveness, which IS_USED_LOCK shows to every reader without
// a statement from the candidate, and which the server frees when the
// session ends, however it ends. candidateLockSQL names the same lock in
// SQL, from a candidate row c.
func candidateLock(lock, identity string) string {
	sum := sha256.Sum256([]byte(lock + "/" + identity))
	return candidateLockHead + hex.EncodeToString(sum[:20])
}

const candidateLockHead = "election-candidate/"

// leaderSeen is whom a waiting candidate last saw lead. It logs, at Debug,
// each leader it sees once, not each check, so that a follower's log shows
// whom it waits for without a line per CheckInterval.
type leaderSeen struct {
	identity string
	token    uint64
}

func (l *leaderSeen) see(log *slog.Logger, identity string, token uint64) {
	if l.identity == identity && l.token == token {
		return
	}
	l.identity, l.token = identity, token
	log.Debug("waiting: another candidate leads", "leader", identity, "token", token)
}

// later returns the later of a and b.
func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// earlier returns the earlier of a and b.
func earlier(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

// settle fills in the end of history row t, which has none yet, from what
// the record and the next row (if any) show, exactly as the next term will
// write it: so that History and Watch tell the same story before and after
// that write. A term followed by another ended, "lost", when the next
// began; a term the record shows ended gets the record's reason and time;
// a term whose holder has gone silent for longer than its lease plus
// margin, and holds no lock a deputy will kill it for, ended, "lost", at
// that moment, since it can no longer act. A term that may still act stays
// open.
func settle(t TermRecord, next *TermRecord, rec Record) TermRecord {
	switch {
	case !t.Ended.IsZero():
	case next != nil:
		t.Reason, t.Ended = stateLost, next.Started
	case rec.Token != t.Token:
	case rec.State != stateLeading:
		t.Reason, t.Ended = rec.State, rec.Ended
	case rec.stale() && rec.overdue() == "":
		t.Reason, t.Ended = stateLost, rec.Renewed.Add(rec.Expiry)
	}
	return t
}

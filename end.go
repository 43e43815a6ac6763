package election

// The end of a term as the record and the history keep it: one vocabulary
// of reasons for the leader's logs, its metrics, History and Watch; the
// time the leader stopped acting, not the time the row was written; and
// the leader's own account, written late if the server was out of reach,
// in place of the "lost" its successor wrote meanwhile. See
// docs/protocol.md, "The end of a term".

import (
	"time"
)

// States of the record, and reasons in the term history.
const (
	stateLeading      = "leading"
	stateResigned     = "resigned"      // Resign, or the campaign's context ended
	stateDemoted      = "demoted"       // stepped down when asked (Demote)
	stateHandedOver   = "handed-over"   // stepped down for a named successor (Handover)
	stateUnhealthy    = "unhealthy"     // stepped down when its health check failed (Config.Health)
	stateHangKilled   = "hang-killed"   // stuck inside a query; its session was killed
	stateDemoteKilled = "demote-killed" // did not step down when asked; its session was killed
	stateLeaseExpired = "lease-expired" // no keepalive confirmed within the lease
	stateSessionLost  = "session-lost"  // the pinned session failed
	stateLockLost     = "lock-lost"     // the session lives but the lock or record moved on
	stateLost         = "lost"          // ended without saying why (crash, outside kill)
)

// gracefulEnds are the ends a leader chose or was asked for and made
// itself, its code stopped before it released the election: they owe the
// next term no lock-delay (Record.lockDelay).
var gracefulEnds = []string{stateResigned, stateDemoted, stateHandedOver, stateUnhealthy}

// ending is how a term ended: why, and when it stopped acting, on the local
// monotonic clock. The row gets that moment on the database clock, however
// late it is written.
type ending struct {
	why string
	at  time.Time
	// serverUS is at on the database clock (Unix microseconds), once a
	// statement has taken it there; 0 until then.
	serverUS int64
	// lasted is how long the term lasted by its leader's own clock, from
	// its start to at; 0 where the writer is not its leader (a kill).
	lasted time.Duration
}

package election

import (
	"errors"
	"strings"
)

// Errors callers branch on. Errors the package returns wrap them; use
// errors.Is.
var (
	// ErrInvalidConfig: New or NewOperator was given input it cannot use;
	// the message says which and how to fix it.
	ErrInvalidConfig = errors.New("election: invalid configuration")
	// ErrSchema: the tables are missing or the user may not use them; the
	// message carries the DDL to run.
	ErrSchema = errors.New("election: tables missing or not usable")
	// ErrAccessDenied: the server refused the DSN's login: a wrong user or
	// password (MySQL error 1045), no access to the DSN's database (1044),
	// or no such database (1049). The message names the fix. Retrying with
	// the same DSN fails the same way until a DBA acts, so Run returns it.
	ErrAccessDenied = errors.New("election: the server refused the login")
	// ErrCampaigning: this Elector already campaigns or leads, or the
	// function of its last term still runs (see Run); one Elector is one
	// candidate.
	ErrCampaigning = errors.New("election: this elector is already campaigning or leading")
	// ErrHeld: TryRun found the election led by another candidate.
	ErrHeld = errors.New("election: held by another candidate")
	// ErrNoLeader: nobody leads the election now.
	ErrNoLeader = errors.New("election: no leader")
	// ErrFenced: a write was refused because its term is no longer the
	// newest; nothing was written.
	ErrFenced = errors.New("election: stale fencing token")
	// ErrInUse: Operator.Remove found a candidate campaigning, or a term
	// that may still act; nothing was removed.
	ErrInUse = errors.New("election: the election is in use")
	// ErrStop: returned by Run's function, or wrapped in its error, it ends
	// Run: the term is resigned and Run returns the function's error. Any
	// other return of the function ends only the term (see Run).
	ErrStop = errors.New("election: stop campaigning")
	// ErrUnissuedToken: a token is higher than every token the election has
	// issued, so no term holds it (a forged or corrupted token); nothing
	// was written.
	ErrUnissuedToken = errors.New("election: fencing token never issued")

	// Why a term ended (Term.Err). A term also ends when the context given
	// to Campaign ends; Term.Err then returns that context's cause.

	// ErrResigned: Resign was called.
	ErrResigned = errors.New("election: resigned")
	// ErrLeaseExpired: no keepalive was confirmed within the lease, or the
	// lease ran out before the term began (Campaign).
	ErrLeaseExpired = errors.New("election: lease expired")
	// ErrSessionLost: the pinned session failed: killed, timed out, its
	// network dropped or the server restarted.
	ErrSessionLost = errors.New("election: database session lost")
	// ErrLockLost: the session is alive but no longer holds the election,
	// or the record names another term.
	ErrLockLost = errors.New("election: lock no longer held")
	// ErrDemoted: an operator asked the leader to step down (Demote,
	// Handover) and it did.
	ErrDemoted = errors.New("election: demoted")
	// ErrUnhealthy: the leader's health check (Config.Health) failed
	// HealthFailures times in a row, and Run ended its term.
	ErrUnhealthy = errors.New("election: unhealthy")

	// ErrIdentityInUse: another live session campaigns in the election under
	// this candidate's identity; give every candidate its own
	// Config.Identity. (Run retries: the other may be this candidate's own
	// session of a moment ago, cut off and about to be dropped.)
	ErrIdentityInUse = errors.New("election: identity in use by another candidate")
	// ErrNotCandidate: a hand-over named a candidate that is not alive.
	ErrNotCandidate = errors.New("election: not a live candidate")
	// ErrKillDenied: the server refused to kill a stuck leader's session;
	// the message names the privilege to grant.
	ErrKillDenied = errors.New("election: not allowed to kill the leader's session")
	// ErrStrategy: candidates of another strategy run this election.
	ErrStrategy = errors.New("election: the election runs with another strategy")
	// ErrUnsupported: the server cannot give what was asked: a strategy's
	// guarantees (GetLock on Galera, multi-primary Group Replication or
	// TiDB; the message names the strategy to use), or a read-only fenced
	// transaction where the fence must write (FencedTx).
	ErrUnsupported = errors.New("election: not supported by this server")
)

// stepError names the step that failed in front of its cause, with the
// package's prefix once: "election: reading the record: tables missing or
// not usable: Error 1146 …", not "election: reading the record: election:
// tables missing …".
type stepError struct {
	step string
	err  error
}

func (e *stepError) Error() string {
	return "election: " + e.step + ": " + strings.TrimPrefix(e.err.Error(), "election: ")
}

func (e *stepError) Unwrap() error { return e.err }

// during wraps err as the failure of step.
func during(step string, err error) error { return &stepError{step, err} }

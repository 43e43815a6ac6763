// Package failpoint marks the moments of the protocol where a fault does
// the most harm, so that a test can stop or kill a real process exactly
// there. The library calls Hit at each point with the context it was
// given; only a context made by With carries a function, so production
// code pays one context lookup and nothing else.
package failpoint

import "context"

// Points, as passed to the function given to With.
const (
	// Locked: a GetLock candidate was granted the lock and has not yet
	// begun its term (no claim, no token).
	Locked = "locked"
	// Claimed: a candidate of either strategy claimed the election (its
	// token is committed) and its term has not yet begun: no lease, no
	// keepalive, nothing returned to the caller.
	Claimed = "claimed"
	// Committing: Term.Fenced has run its check and the caller's function
	// and seen its lease valid; the COMMIT is about to be sent.
	Committing = "committing"
)

type key struct{}

// With returns a context whose points call f with their name.
func With(ctx context.Context, f func(point string)) context.Context {
	return context.WithValue(ctx, key{}, f)
}

// Hit calls the function ctx carries, if any, with point.
func Hit(ctx context.Context, point string) {
	if f, ok := ctx.Value(key{}).(func(string)); ok {
		f(point)
	}
}

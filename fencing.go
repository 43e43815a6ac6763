package election

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"fmt"
	"net/http"
	"strconv"
)

// StaleTokenError reports a write refused because a newer term exists (or
// the writer's own term has ended). It wraps ErrFenced.
type StaleTokenError struct {
	Resource string // what was written, where the checker knows it
	Token    uint64 // the token the write carried
	Current  uint64 // the newest token known; 0 if the term ended locally
	Cause    error  // why the term ended, for a locally ended term
}

// Error says which token was refused, and what superseded it.
func (e *StaleTokenError) Error() string {
	switch {
	case e.Cause != nil:
		return fmt.Sprintf("election: stale fencing token %d: the term has ended: %v", e.Token, e.Cause)
	case e.Resource != "":
		return fmt.Sprintf("election: stale fencing token %d for %q: %d has been seen", e.Token, e.Resource, e.Current)
	}
	return fmt.Sprintf("election: stale fencing token %d: the election is at %d", e.Token, e.Current)
}

// Unwrap returns ErrFenced.
func (e *StaleTokenError) Unwrap() error { return ErrFenced }

// Fenced runs fn in a transaction on the elector's database that commits
// only while this term is the election's newest. It first takes a shared
// lock on the election's epoch row and checks that it still equals the
// term's token; a new term must bump that row, so it starts only after this
// transaction ends, and every write fn makes commits before any write of a
// later term. If the term has ended locally, or a newer term exists, Fenced
// returns a *StaleTokenError (errors.Is(err, ErrFenced)) and fn does not run.
// If fn returns an error the transaction is rolled back and the error is
// returned.
//
// The transaction runs on a session of the pool, not on the pinned one, so
// a long one does not delay keepalives; it does delay the next term's
// start. Its session has the candidates' wait_timeout (Lease+Margin) while
// it runs, so that a leader that stops inside it cannot block the election:
// fn must not leave the transaction idle for that long.
func (t *Term) Fenced(ctx context.Context, fn func(tx *sql.Tx) error) error {
	if !t.IsLeader() {
		return &StaleTokenError{Token: t.token, Cause: t.endCause()}
	}
	lock, err := t.st.lockName(ctx)
	if err != nil {
		return err
	}
	// The transaction holds a shared lock on the epoch row that the next
	// term must bump. If this leader stops in the middle of it (paused, cut
	// off), only the server can end it: its session gets the candidates'
	// short wait_timeout, which it keeps until the transaction is over.
	conn, err := t.st.db.Conn(ctx)
	if err != nil {
		return fmt.Errorf("election: fenced transaction: %w", err)
	}
	defer conn.Close()
	if _, err := conn.ExecContext(ctx, fmt.Sprintf("SET SESSION wait_timeout = %d", t.st.cfg.waitTimeout())); err != nil {
		return fmt.Errorf("election: fenced transaction: %w", err)
	}
	defer func() {
		// Back to the pool with the server's default; a session that cannot
		// be reset is dropped instead.
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), t.st.cfg.Interval)
		defer cancel()
		if _, err := conn.ExecContext(ctx, "SET SESSION wait_timeout = DEFAULT"); err != nil {
			conn.Raw(func(any) error { return driver.ErrBadConn })
		}
	}()
	tx, err := conn.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("election: fenced transaction: %w", err)
	}
	defer tx.Rollback()
	var current uint64
	err = tx.QueryRowContext(ctx, text("SELECT epoch FROM `"+t.st.tbl.epoch+"` WHERE lock_name = ? LOCK IN SHARE MODE", lock)).Scan(&current)
	if err != nil {
		return fmt.Errorf("election: fenced transaction: reading the epoch: %w", err)
	}
	if current != t.token {
		return &StaleTokenError{Token: t.token, Current: current}
	}
	if err := fn(tx); err != nil {
		return err
	}
	return tx.Commit()
}

// TokenHeader is the HTTP header that carries a fencing token from a
// leader to a downstream store.
const TokenHeader = "Fencing-Token"

// SetToken puts the term's token in h, for a request to a downstream store
// that checks it (see Fence.Handler).
func (t *Term) SetToken(h http.Header) { h.Set(TokenHeader, strconv.FormatUint(t.token, 10)) }

// TokenFrom reads the fencing token of a request's headers. More than one
// token header is refused: a proxy in front might read another one than
// the store.
func TokenFrom(h http.Header) (uint64, error) {
	vs := h.Values(TokenHeader)
	if len(vs) > 1 {
		return 0, fmt.Errorf("election: %d %s headers; send one", len(vs), TokenHeader)
	}
	v := h.Get(TokenHeader)
	if v == "" {
		return 0, fmt.Errorf("election: no %s header", TokenHeader)
	}
	token, err := strconv.ParseUint(v, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("election: %s header %q is not a token", TokenHeader, v)
	}
	return token, nil
}

package election

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"
)

// Limits that keep a Fence's memory bounded whatever keys its clients
// choose; see Fence.
const (
	fenceMaxResources = 1 << 16
	fenceMaxKeyBytes  = 16 << 20
)

// DefaultMaxBody is how large a request body Fence.Handler reads by
// default.
const DefaultMaxBody = 1 << 20

// Fence is the checker a downstream store embeds to refuse writes of stale
// leaders: it remembers the highest token admitted per resource and refuses
// any lower one. Equal tokens pass: a term writes many times. The zero value
// is ready to use; it is safe for concurrent use. One Fence serves one
// election: tokens of two elections do not compare.
//
// Tokens are not secrets, and a Fence cannot tell who sends one. What it
// guarantees: a write carrying a token below one it admitted is refused, so
// a stale leader cannot overwrite a newer one. With Issued set, it also
// refuses a token above every token the election has issued, so a buggy or
// hostile client cannot push a resource past every real leader. It does not
// authenticate: a client that learns the current token (from a 409, or by
// reading the election) can write with it. Put authentication in front of
// it.
//
// Memory is bounded whatever resource names clients send: a write that
// raises nothing is not remembered, and past 65,536 resources (or 16 MiB of
// their names) the per-resource tokens fold into one floor for all
// resources, the highest of them. Folding only refuses more: a stale token
// is refused everywhere instead of per resource; the current leader's token
// is never below the floor.
//
// It is in memory only: a store that restarts must restore it from its
// data, or keep the token in the same row it guards, as in
//
//	UPDATE t SET ..., fence_token = ? WHERE id = ? AND fence_token <= ?
type Fence struct {
	// Issued, if set, returns the newest token the election has issued
	// (Operator.Token). A token above the newest one known makes the Fence
	// read it again, once per such token: authentication in front of the
	// store keeps strangers from making it read often.
	Issued func(ctx context.Context) (uint64, error)
	// MaxBody bounds the request body Handler reads before it waits for the
	// resource; default DefaultMaxBody. A larger body gets 413.
	MaxBody int64

	mu      sync.Mutex
	issued  uint64            // the newest token Issued has reported
	highest map[string]uint64 // per resource, only above floor
	floor   uint64            // the lowest token admitted for every resource
	keys    int               // bytes of the names in highest
	turns   map[string]*turn  // per resource, while Handler serves it
}

// turn serializes Handler's requests for one resource; users counts the
// requests holding or awaiting it, so that it is dropped when idle.
type turn struct {
	held  chan struct{}
	users int
}

// Check admits a write to resource with token, or refuses it: a
// *StaleTokenError (errors.Is(err, ErrFenced)) if a higher token has been
// admitted for resource, ErrUnissuedToken if Issued says the election never
// issued token. An admitted token becomes the resource's highest, so call
// Check only for a write that is made when admitted; Handler does that for
// HTTP. ctx bounds the read of Issued.
func (f *Fence) Check(ctx context.Context, resource string, token uint64) error {
	if err := f.verify(ctx, token); err != nil {
		return err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.stale(resource, token); err != nil {
		return err
	}
	f.admit(resource, token)
	return nil
}

// verify refuses a token above every token the election has issued, asking
// Issued again only when token is above the newest it last reported.
func (f *Fence) verify(ctx context.Context, token uint64) error {
	if f.Issued == nil {
		return nil
	}
	f.mu.Lock()
	known := f.issued
	f.mu.Unlock()
	if token <= known {
		return nil
	}
	newest, err := f.Issued(ctx)
	if err != nil {
		return fmt.Errorf("election: fence: reading the newest token: %w", err)
	}
	f.mu.Lock()
	f.issued = max(f.issued, newest)
	f.mu.Unlock()
	if token > newest {
		return fmt.Errorf("%w: token %d is above the newest the election has issued (%d)", ErrUnissuedToken, token, newest)
	}
	return nil
}

// stale refuses token if a higher one was admitted for resource. f.mu is
// held.
func (f *Fence) stale(resource string, token uint64) error {
	if h := max(f.floor, f.highest[resource]); token < h {
		return &StaleTokenError{Resource: resource, Token: token, Current: h}
	}
	return nil
}

// admit makes token the highest of resource, folding the table into the
// floor when it is full. f.mu is held.
func (f *Fence) admit(resource string, token uint64) {
	h, known := f.highest[resource]
	if token <= f.floor || token <= h {
		return // nothing it refuses changes
	}
	if f.highest == nil {
		f.highest = make(map[string]uint64)
	}
	if !known {
		f.keys += len(resource)
	}
	f.highest[resource] = token
	if len(f.highest) > fenceMaxResources || f.keys > fenceMaxKeyBytes {
		for _, h := range f.highest {
			f.floor = max(f.floor, h)
		}
		clear(f.highest)
		f.keys = 0
	}
}

// Handler admits a request to next only if its fencing token (TokenHeader)
// is not lower than the highest admitted for its resource (resource(r); nil
// means one resource for all) and, with Issued set, was issued by the
// election. A missing or malformed token gets 400, a stale one 409 Conflict
// (its body names the highest token admitted: tokens are not secrets, and
// the stale leader learns why), an unissued one 403; none reaches next.
//
// Requests for one resource reach next one at a time, so that the check and
// next's write are atomic: a stale request never writes after a newer one.
// A token counts only when next admits the write: it is admitted once next
// answers 2xx, so a request that next refuses (401, a bad body) raises
// nothing. The body is read (up to MaxBody) before the request waits for its
// resource, so a slow client delays only itself, and a request whose
// context ends while it waits gives up.
func (f *Fence) Handler(resource func(*http.Request) string, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		token, err := TokenFrom(r.Header)
		if err != nil {
			reply(w, http.StatusBadRequest, err.Error())
			return
		}
		res := ""
		if resource != nil {
			res = resource(r)
		}
		if code, err := f.precheck(r.Context(), res, token); err != nil {
			reply(w, code, err.Error())
			return
		}
		if code, err := f.buffer(w, r); err != nil {
			reply(w, code, err.Error())
			return
		}
		leave, err := f.enter(r.Context(), res)
		if err != nil {
			return // the client is gone
		}
		defer leave()
		f.mu.Lock()
		err = f.stale(res, token)
		f.mu.Unlock()
		if err != nil {
			reply(w, http.StatusConflict, err.Error())
			return
		}
		sw := &statusWriter{ResponseWriter: w}
		next.ServeHTTP(sw, r)
		if sw.status == 0 || sw.status/100 == 2 {
			f.mu.Lock()
			f.admit(res, token)
			f.mu.Unlock()
		}
	})
}

// precheck refuses, before the request reads its body or waits, a token
// that is unissued or already stale, with the status code to answer.
func (f *Fence) precheck(ctx context.Context, res string, token uint64) (int, error) {
	if err := f.verify(ctx, token); err != nil {
		if errors.Is(err, ErrUnissuedToken) {
			return http.StatusForbidden, err
		}
		return http.StatusServiceUnavailable, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.stale(res, token); err != nil {
		return http.StatusConflict, err
	}
	return 0, nil
}

// buffer reads r's body into memory, at most MaxBody bytes, and gives r
// the copy.
func (f *Fence) buffer(w http.ResponseWriter, r *http.Request) (int, error) {
	limit := f.MaxBody
	if limit <= 0 {
		limit = DefaultMaxBody
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, limit))
	if err != nil {
		if errors.As(err, new(*http.MaxBytesError)) {
			return http.StatusRequestEntityTooLarge, fmt.Errorf("election: the body is larger than the fence's MaxBody (%d bytes)", limit)
		}
		return http.StatusBadRequest, fmt.Errorf("election: reading the body: %w", err)
	}
	r.Body = io.NopCloser(bytes.NewReader(body))
	return 0, nil
}

// enter waits for resource's turn, or for ctx to end, and returns the
// function that ends the turn.
func (f *Fence) enter(ctx context.Context, resource string) (func(), error) {
	f.mu.Lock()
	if f.turns == nil {
		f.turns = make(map[string]*turn)
	}
	t := f.turns[resource]
	if t == nil {
		t = &turn{held: make(chan struct{}, 1)}
		f.turns[resource] = t
	}
	t.users++
	f.mu.Unlock()
	leave := func() {
		f.mu.Lock()
		if t.users--; t.users == 0 {
			delete(f.turns, resource)
		}
		f.mu.Unlock()
	}
	select {
	case t.held <- struct{}{}:
		return func() { <-t.held; leave() }, nil
	case <-ctx.Done():
		leave()
		return nil, ctx.Err()
	}
}

// statusWriter remembers the status code a handler answered.
type statusWriter struct {
	http.ResponseWriter
	status int
}

func (w *statusWriter) WriteHeader(code int) {
	if w.status == 0 && code >= 200 { // not an informational 1xx
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

// Unwrap lets http.ResponseController reach the underlying writer.
func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

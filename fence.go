package election

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
)

// Limits that keep a Fence's memory bounded whatever keys its clients
// choose; see Fence.
const (
	fenceMaxResources = 1 << 16
	fenceMaxKeyBytes  = 16 << 20
)

// DefaultMaxBody is how large a request body, and a response body,
// Fence.Handler holds in memory by default.
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
// hostile client cannot push a resource past every real leader; without
// Issued, one request with a huge token does exactly that. It does not
// authenticate: a client that learns the current token (from a 409, or by
// reading the election) can write with it. Put authentication in front of
// it.
//
// Memory is bounded whatever resource names clients send: a write that
// raises nothing is not remembered, and past 65,536 resources (or 16 MiB of
// their names) the per-resource tokens fold into one floor for all
// resources, the highest of them. Folding only refuses more: a stale token
// is refused everywhere instead of per resource. With Issued set the floor
// is never above the newest token issued, so the current leader is never
// refused.
//
// It is in memory only: a store that restarts must restore it from its
// data, or keep the token in the same row it guards, as in
//
//	UPDATE t SET ..., fence_token = ? WHERE id = ? AND fence_token <= ?
type Fence struct {
	// Issued, if set, returns the newest token the election has issued
	// (Operator.Token). It must read the election's primary: a replica that
	// lags would make a new term's first write look unissued. A token above
	// the newest one known makes the Fence read it again; such reads run
	// one at a time, and authentication in front of the store keeps
	// strangers from making it read at all.
	Issued func(ctx context.Context) (uint64, error)
	// MaxBody bounds the request body Handler reads before it waits for the
	// resource (a larger one gets 413), and the response it holds back
	// until the resource is free again; default DefaultMaxBody.
	MaxBody int64

	mu      sync.Mutex
	reading chan struct{}     // held while Issued is read; made once
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

// verify refuses a token above every token the election has issued. It
// reads Issued only when token is above the newest it knows, one read at a
// time; a read that ends while this one waits may answer for it.
func (f *Fence) verify(ctx context.Context, token uint64) error {
	if f.Issued == nil || token <= f.knownIssued() {
		return nil
	}
	f.mu.Lock()
	if f.reading == nil {
		f.reading = make(chan struct{}, 1)
	}
	reading := f.reading
	f.mu.Unlock()
	select {
	case reading <- struct{}{}:
		defer func() { <-reading }()
	case <-ctx.Done():
		return ctx.Err()
	}
	if token <= f.knownIssued() {
		return nil // a read that started after this token's term began
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

func (f *Fence) knownIssued() uint64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.issued
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
		// A copy: the name may share memory with a whole request line.
		resource = strings.Clone(resource)
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
// A request's token counts unless next answers 4xx (it refused the
// request): a write that then redirects, fails with 5xx or panics may have
// been made, so it counts. The request body (up to MaxBody) is read before
// the request waits for its resource, and the response (up to MaxBody) is
// sent after the resource is free again, so a client that sends or reads
// slowly delays only itself; a request whose context ends while it waits
// gets 503. resource(r) may read the body: next gets it whole.
func (f *Fence) Handler(resource func(*http.Request) string, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		token, err := TokenFrom(r.Header)
		if err != nil {
			reply(w, http.StatusBadRequest, err.Error())
			return
		}
		body, code, err := f.buffer(w, r)
		if err != nil {
			reply(w, code, err.Error())
			return
		}
		res := ""
		if resource != nil {
			res = resource(r)
			r.Body = io.NopCloser(bytes.NewReader(body))
		}
		if code, err := f.precheck(r.Context(), res, token); err != nil {
			reply(w, code, err.Error())
			return
		}
		rw := &heldResponse{w: w, limit: f.maxBody()}
		if code, err := f.serve(rw, r, res, token, next); err != nil {
			reply(w, code, err.Error())
			return
		}
		rw.release()
	})
}

// serve runs next for a request in its resource's turn, after checking the
// token again, and admits the token unless next refused the request.
func (f *Fence) serve(rw *heldResponse, r *http.Request, res string, token uint64, next http.Handler) (int, error) {
	leave, err := f.enter(r.Context(), res)
	if err != nil {
		return http.StatusServiceUnavailable, fmt.Errorf("election: gave up waiting for %q: %w", res, err)
	}
	defer leave()
	f.mu.Lock()
	err = f.stale(res, token)
	f.mu.Unlock()
	if err != nil {
		return http.StatusConflict, err
	}
	defer func() { // deferred: a panic after the write counts too
		if rw.status/100 != 4 {
			f.mu.Lock()
			f.admit(res, token)
			f.mu.Unlock()
		}
	}()
	next.ServeHTTP(rw, r)
	return 0, nil
}

// precheck refuses, before the request waits, a token that is unissued or
// already stale, with the status code to answer.
func (f *Fence) precheck(ctx context.Context, res string, token uint64) (int, error) {
	if err := f.verify(ctx, token); err != nil {
		if errors.Is(err, ErrUnissuedToken) {
			return http.StatusForbidden, err
		}
		// The cause (a driver error) is the store's to log, not the client's
		// to read.
		return http.StatusServiceUnavailable, errors.New("election: the fence cannot check tokens now; try again")
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.stale(res, token); err != nil {
		return http.StatusConflict, err
	}
	return 0, nil
}

func (f *Fence) maxBody() int64 {
	if f.MaxBody <= 0 {
		return DefaultMaxBody
	}
	return f.MaxBody
}

// buffer reads r's body into memory, at most MaxBody bytes, and gives r
// the copy.
func (f *Fence) buffer(w http.ResponseWriter, r *http.Request) ([]byte, int, error) {
	limit := f.maxBody()
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, limit))
	if err != nil {
		if errors.As(err, new(*http.MaxBytesError)) {
			return nil, http.StatusRequestEntityTooLarge, fmt.Errorf("election: the body is larger than the fence's MaxBody (%d bytes)", limit)
		}
		return nil, http.StatusBadRequest, fmt.Errorf("election: reading the body: %w", err)
	}
	r.Body = io.NopCloser(bytes.NewReader(body))
	return body, 0, nil
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
		f.turns[strings.Clone(resource)] = t
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

// heldResponse holds next's response back (up to limit bytes) while the
// resource's turn lasts, so that a client that reads slowly does not hold
// the turn; a larger response, or a Flush, goes through at once. It
// remembers the status next answered.
type heldResponse struct {
	w       http.ResponseWriter
	limit   int64
	status  int
	body    bytes.Buffer
	through bool // the response goes straight to w
}

// Header returns the response's header map.
func (h *heldResponse) Header() http.Header { return h.w.Header() }

// WriteHeader records the status; informational ones go out at once.
func (h *heldResponse) WriteHeader(code int) {
	switch {
	case code < 200:
		h.w.WriteHeader(code)
	case h.status == 0:
		h.status = code
		if h.through {
			h.w.WriteHeader(code)
		}
	}
}

// Write holds b back, or sends it once the response is too large to hold.
func (h *heldResponse) Write(b []byte) (int, error) {
	if h.status == 0 {
		h.WriteHeader(http.StatusOK)
	}
	if !h.through && int64(h.body.Len()+len(b)) > h.limit {
		h.release()
	}
	if h.through {
		return h.w.Write(b)
	}
	return h.body.Write(b)
}

// Flush sends what is held and all that follows at once.
func (h *heldResponse) Flush() {
	h.release()
	http.NewResponseController(h.w).Flush()
}

// release sends the held response; afterwards writes go straight through.
func (h *heldResponse) release() {
	if h.through {
		return
	}
	h.through = true
	if h.status != 0 {
		h.w.WriteHeader(h.status)
	}
	h.w.Write(h.body.Bytes())
	h.body = bytes.Buffer{}
}

// Unwrap lets http.ResponseController reach the underlying writer.
func (h *heldResponse) Unwrap() http.ResponseWriter { return h.w }

package election

import (
	"fmt"
	"net/http"
	"strconv"
	"time"
)

// LeaderHandler answers 200 while this candidate leads with a valid lease,
// and 503 otherwise, so that a load balancer sends traffic only to the
// leader. It does no I/O: it reads the local lease.
func (e *Elector) LeaderHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if e.IsLeader() {
			reply(w, http.StatusOK, "leader")
			return
		}
		reply(w, http.StatusServiceUnavailable, "not leader")
	})
}

// HealthHandler answers 503 when the function Run gave a term is still
// running more than Margin after that term ended: the process no longer
// leads yet its leader code has not stopped, as a leader stuck in a deadlock
// would not. A supervisor should restart it. Otherwise it answers 200. It
// does no I/O. Terms taken with Campaign are not tracked.
func (e *Elector) HealthHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		e.mu.Lock()
		t := e.running
		e.mu.Unlock()
		if t != nil {
			if ended := t.endedAt(); !ended.IsZero() && time.Since(ended) > e.cfg.Margin {
				reply(w, http.StatusServiceUnavailable, fmt.Sprintf("the leader function of term %d still runs %v after the term ended (%v)",
					t.token, time.Since(ended).Round(time.Millisecond), t.Err()))
				return
			}
		}
		reply(w, http.StatusOK, "ok")
	})
}

func reply(w http.ResponseWriter, code int, msg string) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.WriteHeader(code)
	fmt.Fprintln(w, msg)
}

// TokenHeader is the HTTP header that carries a fencing token from a
// leader to a downstream store.
const TokenHeader = "Fencing-Token"

// SetToken puts the term's token in h, for a request to a downstream store
// that checks it (see Fence.Handler).
func (t *Term) SetToken(h http.Header) { h.Set(TokenHeader, strconv.FormatUint(t.token, 10)) }

// TokenFrom reads the fencing token of a request's headers.
func TokenFrom(h http.Header) (uint64, error) {
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

// Handler admits a request to next only if its fencing token (TokenHeader)
// is not lower than the highest seen for its resource (resource(r); nil
// means one resource for all). A missing or malformed token gets 400, a
// stale one 409 Conflict; neither reaches next. Requests for one resource
// are served one at a time, so that the check and next's write are atomic:
// a stale request never writes after a newer one.
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
		unlock := f.serialize(res)
		defer unlock()
		if err := f.Check(res, token); err != nil {
			reply(w, http.StatusConflict, err.Error())
			return
		}
		next.ServeHTTP(w, r)
	})
}

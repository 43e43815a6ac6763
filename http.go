package election

import (
	"fmt"
	"net/http"
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

// HealthHandler answers 503 when a supervisor should restart the process:
// when the function Run (or TryRun) gave a term is still running more than
// Margin after its context was cancelled, because the term ended or Run's
// context did (its leader code has not stopped, as a leader stuck in a
// deadlock would not; after a shutdown the term has been resigned without
// it), and when Run returned an error that retrying cannot fix (see Run),
// such as ErrAccessDenied, until Run is called again. Otherwise it answers
// 200. It does no I/O. Terms taken with Campaign are not tracked.
func (e *Elector) HealthHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		e.mu.Lock()
		t, told, why, stopped := e.running, e.told, e.toldWhy, e.stopped
		e.mu.Unlock()
		if stopped != nil {
			reply(w, http.StatusServiceUnavailable, fmt.Sprintf("not campaigning: Run returned: %v", stopped))
			return
		}
		if t != nil && !told.IsZero() && time.Since(told) > e.st.cfg.Margin {
			reply(w, http.StatusServiceUnavailable, fmt.Sprintf("the leader function of term %d still runs %v after its context was cancelled (%v)",
				t.token, time.Since(told).Round(time.Millisecond), why))
			return
		}
		reply(w, http.StatusOK, "ok")
	})
}

func reply(w http.ResponseWriter, code int, msg string) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.WriteHeader(code)
	fmt.Fprintln(w, msg)
}

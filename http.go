package election

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"
)

// LeaderHandler answers 200 while this candidate leads with a valid lease,
// and 503 otherwise, so that a load balancer sends traffic only to the
// leader. It does no I/O: it reads the local lease. RedirectToLeader
// sends followers' requests to the leader instead.
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
// Config.Health is another thing: a check of the leader's own
// dependencies, which ends its leadership rather than its process.
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

// RedirectToLeader serves requests with next while this candidate leads
// with a valid lease, and answers a follower's with a 307 to the leader:
// to the URL it proclaims (Config.Value, Term.Proclaim), with the
// request's path and query appended, as Vault's standby nodes do. It
// answers 503 when nobody leads, and when the leader's value is not an
// absolute http or https URL. It reads the record at most once per
// Interval for all requests (a read that fails is not kept).
func (e *Elector) RedirectToLeader(next http.Handler) http.Handler {
	var (
		mu   sync.Mutex
		rec  Record
		err  error
		read time.Time
	)
	leader := func(ctx context.Context) (Record, error) {
		mu.Lock()
		defer mu.Unlock()
		if read.IsZero() || time.Since(read) >= e.st.cfg.Interval {
			// For every request waiting: not ended by the one that reads.
			ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), e.st.cfg.Interval)
			defer cancel()
			rec, err = e.Leader(ctx)
			read = time.Time{}
			if err == nil || errors.Is(err, ErrNoLeader) {
				read = time.Now()
			}
		}
		return rec, err
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if e.IsLeader() {
			next.ServeHTTP(w, r)
			return
		}
		rec, err := leader(r.Context())
		switch {
		case errors.Is(err, ErrNoLeader), err == nil && rec.Identity == e.Identity():
			// The record may still name this candidate's term, just ended.
			reply(w, http.StatusServiceUnavailable, "no leader")
			return
		case err != nil:
			reply(w, http.StatusServiceUnavailable, "cannot read who leads")
			return
		}
		to, perr := url.Parse(rec.Value)
		if perr != nil || to.Scheme != "http" && to.Scheme != "https" || to.Host == "" {
			reply(w, http.StatusServiceUnavailable, fmt.Sprintf("the leader %q proclaims no http or https URL to redirect to: %q", rec.Identity, rec.Value))
			return
		}
		// The request's path as it came, escapes and all, after the value's.
		to.RawPath = strings.TrimSuffix(to.EscapedPath(), "/") + r.URL.EscapedPath()
		to.Path = strings.TrimSuffix(to.Path, "/") + r.URL.Path
		to.RawQuery = r.URL.RawQuery
		http.Redirect(w, r, to.String(), http.StatusTemporaryRedirect)
	})
}

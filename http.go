package election

import "net/http"

// LeaderHandler answers 200 while this candidate leads with a valid lease,
// and 503 otherwise, so that a load balancer sends traffic only to the
// leader. It does no I/O: it reads the local lease.
func (e *Elector) LeaderHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		if e.IsLeader() {
			w.Write([]byte("leader\n"))
			return
		}
		w.WriteHeader(http.StatusServiceUnavailable)
		w.Write([]byte("not leader\n"))
	})
}

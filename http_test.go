package election_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/sqlelect/election"
)

// status serves one GET request with h and returns its code and body.
func status(h http.Handler) (int, string) {
	rr := httptest.NewRecorder()
	h.ServeHTTP(rr, httptest.NewRequest("GET", "/", nil))
	return rr.Code, rr.Body.String()
}

// A leader whose function ignores the end of its term (as a deadlocked one
// would) turns unhealthy once Margin has passed, and healthy again once the
// function returns.
func TestHealthHandler(t *testing.T) {
	t.Parallel()
	db, _ := newDB(t)
	a := newElector(t, election.GetLock, db, "health", "a")
	ops := newOperator(t, db, "health")
	unblock := make(chan struct{})
	started := make(chan struct{})
	runInBackground(t, context.Background(), a, func(context.Context, *election.Term) error {
		close(started)
		<-unblock // ignores its context
		return nil
	})
	<-started
	if code, body := status(a.HealthHandler()); code != http.StatusOK {
		t.Fatalf("healthy leader: %d %s", code, body)
	}
	if _, err := ops.Demote(ctxFor(t, 20*time.Second)); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the stuck leader to turn unhealthy", 10*time.Second, func() bool {
		code, _ := status(a.HealthHandler())
		return code == http.StatusServiceUnavailable
	})
	if code, body := status(a.HealthHandler()); !strings.Contains(body, "still runs") {
		t.Fatalf("unhealthy body: %d %s", code, body)
	}
	close(unblock)
	waitFor(t, "health after the function returned", 10*time.Second, func() bool {
		code, _ := status(a.HealthHandler())
		return code == http.StatusOK
	})
}

func TestLeaderHandler(t *testing.T) {
	forEachStrategy(t, func(t *testing.T, s election.Strategy) {
		db, _ := newDB(t)
		ctx := ctxFor(t, time.Minute)
		a, b := newElector(t, s, db, "http", "a"), newElector(t, s, db, "http", "b")
		term := await(t, campaign(ctx, a), 10*time.Second).term
		for _, tc := range []struct {
			e    *election.Elector
			code int
		}{{a, http.StatusOK}, {b, http.StatusServiceUnavailable}} {
			if code, _ := status(tc.e.LeaderHandler()); code != tc.code {
				t.Fatalf("%s: %d, want %d", tc.e.Identity(), code, tc.code)
			}
		}
		resignAll(t, term)
		if code, _ := status(a.LeaderHandler()); code != http.StatusServiceUnavailable {
			t.Fatalf("after resign: %d", code)
		}
	})
}

package election_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sqlelect/election"
)

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
	ctx, cancel := context.WithCancel(context.Background())
	unblock := make(chan struct{})
	started := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		a.Run(ctx, func(context.Context, *election.Term) error {
			close(started)
			<-unblock // ignores its context
			return nil
		})
	}()
	t.Cleanup(func() { cancel(); <-done })
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

func TestFenceHandler(t *testing.T) {
	t.Parallel()
	var f election.Fence
	var mu sync.Mutex
	var written []string
	store := f.Handler(func(r *http.Request) string { return r.URL.Path }, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		written = append(written, r.URL.Path+"@"+r.Header.Get(election.TokenHeader))
		mu.Unlock()
	}))
	send := func(path, token string) int {
		req := httptest.NewRequest("PUT", path, nil)
		if token != "" {
			req.Header.Set(election.TokenHeader, token)
		}
		rr := httptest.NewRecorder()
		store.ServeHTTP(rr, req)
		return rr.Code
	}
	for _, tc := range []struct {
		path, token string
		want        int
	}{
		{"/a", "5", 200}, {"/a", "6", 200}, {"/a", "6", 200}, {"/a", "5", 409},
		{"/b", "1", 200}, // resources are fenced apart
		{"/a", "", 400}, {"/a", "x", 400},
	} {
		if got := send(tc.path, tc.token); got != tc.want {
			t.Fatalf("PUT %s with token %q: %d, want %d", tc.path, tc.token, got, tc.want)
		}
	}
	if strings.Join(written, " ") != "/a@5 /a@6 /a@6 /b@1" {
		t.Fatalf("written: %v", written)
	}
}

// The observer sees terms start and end with their reason, and keepalives.
func TestObserver(t *testing.T) {
	t.Parallel()
	db, _ := newDB(t)
	var mu sync.Mutex
	var events []string
	var renewals int
	note := func(s string) { mu.Lock(); events = append(events, s); mu.Unlock() }
	cfg := fast
	cfg.Identity = "a"
	cfg.Observer = &election.Observer{
		TermStarted: func(election, id string, token uint64) { note("start " + election + " " + id) },
		TermEnded:   func(election, id string, token uint64, reason string) { note("end " + reason) },
		Renewed: func(_ string, latency time.Duration, err error) {
			mu.Lock()
			if err == nil && latency > 0 {
				renewals++
			}
			mu.Unlock()
		},
	}
	e, err := election.New(db, "observed", cfg)
	if err != nil {
		t.Fatal(err)
	}
	term := await(t, campaign(ctxFor(t, time.Minute), e), 10*time.Second).term
	time.Sleep(350 * time.Millisecond)
	resignAll(t, term)
	mu.Lock()
	defer mu.Unlock()
	if strings.Join(events, ", ") != "start observed a, end resigned" || renewals < 2 {
		t.Fatalf("events %v, %d renewals", events, renewals)
	}
}

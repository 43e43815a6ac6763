package election_test

import (
	"database/sql"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sqlelect/election"
)

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

// A leader that stops in the middle of a fenced transaction (paused, or cut
// off) holds the shared lock on the epoch row that the next term must bump.
// The transaction's session has the short wait_timeout, so the server ends
// it and the next candidate leads; the stuck write never commits.
func TestStuckFencedTransactionDoesNotBlockTheElection(t *testing.T) {
	forEachStrategy(t, func(t *testing.T, s election.Strategy) {
		db, _ := newDB(t)
		createWrites(t, db)
		admin := server.Open(t, "")
		ctx := ctxFor(t, time.Minute)
		a := newElector(t, s, db, "stuck-tx", "a")
		b := newElector(t, s, server.Open(t, dbNameOf(t, db)), "stuck-tx", "b")
		ta := await(t, campaign(ctx, a), 10*time.Second).term
		inside, hold := make(chan struct{}), make(chan struct{})
		done := make(chan error, 1)
		go func() {
			done <- ta.Fenced(ctx, func(tx *sql.Tx) error {
				if _, err := tx.ExecContext(ctx, "INSERT INTO writes (token, holder) VALUES (?, 'stuck')", ta.Token()); err != nil {
					return err
				}
				close(inside)
				<-hold // the leader stops here, its transaction open
				return nil
			})
		}()
		<-inside
		t.Cleanup(func() { close(hold); <-done })
		// The leader loses the election: its session is killed (GetLock) or
		// its record is taken over once its lease lapses (LeaseRow).
		if s == election.GetLock {
			rec, err := newOperator(t, db, "stuck-tx").Leader(ctx)
			if err != nil {
				t.Fatal(err)
			}
			admin.Exec("KILL CONNECTION ?", rec.ConnID)
		} else {
			ta.Resign(ctx)
		}
		tb := await(t, campaign(ctx, b), 30*time.Second).term
		assertTokenAfter(t, tb.Token(), ta.Token())
		if writesBy(db, "stuck") != 0 {
			t.Fatal("the stuck leader's write committed")
		}
	})
}

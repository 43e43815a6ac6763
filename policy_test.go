package election_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/sqlelect/election"
)

// preferAfter is the child processes' Config.PreferAfter: twice fast's
// lease.
const preferAfter = 2 * time.Second

// TestProclaim: the value a leader proclaims reaches the record, its
// candidate row, Watch and both Leader reads; a new one is proclaimed
// during the term; a bad one is refused; an ended term proclaims nothing.
func TestProclaim(t *testing.T) {
	forEachStrategy(t, func(t *testing.T, s election.Strategy) {
		db, _ := newDB(t)
		ctx := ctxFor(t, time.Minute)
		cfg := fast
		cfg.Strategy, cfg.Identity, cfg.Value = s, "a", "http://a.invalid:8080"
		if s == election.GetLock {
			needGetLock(t)
		}
		leader := newElectorWith(t, db, "proclaim", cfg)
		term, err := leader.Campaign(ctx)
		if err != nil {
			t.Fatal(err)
		}
		follower := newElector(t, s, db, "proclaim", "b")
		ops := newOperator(t, db, "proclaim")
		for _, read := range []func(context.Context) (election.Record, error){follower.Leader, ops.Leader} {
			if rec, err := read(ctx); err != nil || rec.Value != cfg.Value {
				t.Fatalf("Leader: value %q, err %v; want %q", rec.Value, err, cfg.Value)
			}
		}
		wctx, stop := context.WithCancel(ctx)
		defer stop()
		events := ops.Watch(wctx)
		// The first state may precede the term's history row.
		if ev := <-events; !ev.Leading {
			ev = <-events
			if !ev.Leading || ev.Token != term.Token() || ev.Value != cfg.Value {
				t.Fatalf("Watch's event %+v, want term %d leading with %q", ev, term.Token(), cfg.Value)
			}
		} else if ev.Value != cfg.Value {
			t.Fatalf("Watch's first event %+v, want %q", ev, cfg.Value)
		}
		if err := term.Proclaim(ctx, "http://a.invalid:9090"); err != nil {
			t.Fatal(err)
		}
		if err := term.Proclaim(ctx, "http://a.invalid:9090"); err != nil { // unchanged
			t.Fatalf("proclaiming the same value again: %v", err)
		}
		if ev := <-events; !ev.Leading || ev.Token != term.Token() || ev.Value != "http://a.invalid:9090" {
			t.Fatalf("Watch after Proclaim: %+v", ev)
		}
		cands, err := ops.Candidates(ctx)
		if err != nil || len(cands) != 1 || cands[0].Value != "http://a.invalid:9090" {
			t.Fatalf("Candidates %+v, err %v: want a's new value", cands, err)
		}
		for _, bad := range []string{"\x1b[31mred", strings.Repeat("x", 1025), "a\u202eb"} {
			if err := term.Proclaim(ctx, bad); !errors.Is(err, election.ErrInvalidConfig) {
				t.Fatalf("Proclaim(%q) = %v, want ErrInvalidConfig", bad, err)
			}
		}
		if _, err := election.New(db, "proclaim", election.Config{Value: "\x00"}); !errors.Is(err, election.ErrInvalidConfig) {
			t.Fatalf("Config.Value with a NUL: %v, want ErrInvalidConfig", err)
		}
		// A claim by a version before values writes none: the last term's
		// value is not shown as this term's.
		if _, err := db.ExecContext(ctx, "UPDATE election_record SET value_epoch = value_epoch - 1"); err != nil {
			t.Fatal(err)
		}
		if rec, err := ops.Leader(ctx); err != nil || rec.Value != "" {
			t.Fatalf("a record whose value another term wrote: value %q, err %v; want none", rec.Value, err)
		}
		resignAll(t, term)
		if err := term.Proclaim(ctx, "http://late.invalid"); !errors.Is(err, election.ErrResigned) {
			t.Fatalf("Proclaim after Resign = %v, want ErrResigned", err)
		}
		// The next term starts with the value last proclaimed.
		term, err = leader.Campaign(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer resignAll(t, term)
		if rec, err := ops.Leader(ctx); err != nil || rec.Value != "http://a.invalid:9090" {
			t.Fatalf("the next term's value %q, err %v", rec.Value, err)
		}
	})
}

// TestRedirectToLeader: the leader serves; a follower answers 307 to the
// leader's value with the path and query; 503 without a leader or a URL.
func TestRedirectToLeader(t *testing.T) {
	s := strategies[0]
	db, _ := newDB(t)
	ctx := ctxFor(t, time.Minute)
	cfg := fast
	cfg.Strategy, cfg.Identity, cfg.Value = s, "a", "https://a.invalid:8443/api"
	leader := newElectorWith(t, db, "redirect", cfg)
	follower := newElector(t, s, db, "redirect", "b")
	served := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusTeapot) })
	get := func(e *election.Elector, path string) *http.Response {
		rec := httptest.NewRecorder()
		e.RedirectToLeader(served).ServeHTTP(rec, httptest.NewRequest("GET", path, nil))
		return rec.Result()
	}
	if code := get(follower, "/jobs").StatusCode; code != http.StatusServiceUnavailable {
		t.Fatalf("without a leader: %d, want 503", code)
	}
	term, err := leader.Campaign(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer resignAll(t, term)
	if code := get(leader, "/jobs").StatusCode; code != http.StatusTeapot {
		t.Fatalf("the leader's own request: %d, want next's 418", code)
	}
	time.Sleep(cfg.Interval) // the follower's cached read of "no leader" expires
	for path, want := range map[string]string{
		"/jobs/7?full=1":    "https://a.invalid:8443/api/jobs/7?full=1",
		"/jobs/a%2Fb%25c/.": "https://a.invalid:8443/api/jobs/a%2Fb%25c/.", // escapes and dots as they came
	} {
		res := get(follower, path)
		if loc := res.Header.Get("Location"); res.StatusCode != http.StatusTemporaryRedirect || loc != want {
			t.Fatalf("a follower's request for %s: %d to %q, want 307 to %s", path, res.StatusCode, loc, want)
		}
	}
	if err := term.Proclaim(ctx, "not a url"); err != nil {
		t.Fatal(err)
	}
	time.Sleep(cfg.Interval)
	if code := get(follower, "/jobs").StatusCode; code != http.StatusServiceUnavailable {
		t.Fatalf("a leader proclaiming no URL: %d, want 503", code)
	}
}

// TestPreferredLeader: a leader hands over to a candidate of higher
// priority once both have waited PreferAfter, and never to an equal.
func TestPreferredLeader(t *testing.T) {
	forEachStrategy(t, func(t *testing.T, s election.Strategy) {
		if s == election.GetLock {
			needGetLock(t)
		}
		db, _ := newDB(t)
		ctx := ctxFor(t, time.Minute)
		var preempted atomic.Int32
		candidate := func(id string, priority int32) *election.Elector {
			cfg := fast
			cfg.Strategy, cfg.Identity, cfg.Priority, cfg.PreferAfter = s, id, priority, preferAfter
			cfg.Observer = &election.Observer{Preempted: func(string, string) { preempted.Add(1) }}
			return newElectorWith(t, db, "prefer", cfg)
		}
		ops := newOperator(t, db, "prefer")
		leads := func(id string) func() bool {
			return func() bool {
				rec, err := ops.Leader(ctx)
				return err == nil && rec.Identity == id
			}
		}
		hold := func(ctx context.Context, _ *election.Term) error { <-ctx.Done(); return nil }
		runInBackground(t, ctx, candidate("low", 0), func(ctx context.Context, _ *election.Term) error { <-ctx.Done(); return nil })
		waitFor(t, "low to lead", 10*time.Second, leads("low"))
		first, _ := ops.Leader(ctx)
		runInBackground(t, ctx, candidate("equal", 0), hold)
		// An equal never moves the leader.
		time.Sleep(2 * preferAfter)
		if rec, _ := ops.Leader(ctx); rec.Token != first.Token {
			t.Fatalf("leadership moved to %q (term %d) for a candidate of equal priority", rec.Identity, rec.Token)
		}
		// A preferred candidate that comes and goes within PreferAfter
		// never moves it either.
		flapping := candidate("high", 1)
		for range 3 {
			fctx, stop := context.WithTimeout(ctx, preferAfter*3/4)
			flapping.Run(fctx, hold)
			stop()
		}
		if rec, _ := ops.Leader(ctx); rec.Token != first.Token {
			t.Fatalf("leadership moved to %q (term %d) for a candidate that came and went", rec.Identity, rec.Token)
		}
		runInBackground(t, ctx, flapping, hold)
		joined := time.Now()
		waitFor(t, "high to lead", 4*preferAfter, leads("high"))
		if waited := time.Since(joined); waited < preferAfter {
			t.Fatalf("high led %v after it joined, before PreferAfter %v", waited, preferAfter)
		}
		assertHistoryReason(t, ops, first.Token, "handed-over")
		if n := preempted.Load(); n != 1 {
			t.Fatalf("Observer.Preempted called %d times, want 1", n)
		}
		cands, err := ops.Candidates(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range cands {
			if want := map[string]int32{"low": 0, "equal": 0, "high": 1}[c.Identity]; c.Priority != want || !c.Alive {
				t.Fatalf("candidate %+v: want priority %d, alive", c, want)
			}
		}
	})
}

// TestHealthyLeaders: a leader whose check fails HealthFailures times in a
// row resigns, recorded unhealthy, its function stopped first; while
// unhealthy it does not campaign and is no hand-over target; once its check
// passes it campaigns again.
func TestHealthyLeaders(t *testing.T) {
	forEachStrategy(t, func(t *testing.T, s election.Strategy) {
		if s == election.GetLock {
			needGetLock(t)
		}
		db, _ := newDB(t)
		ctx := ctxFor(t, time.Minute)
		var failing atomic.Bool
		cfg := fast
		cfg.Strategy, cfg.Identity = s, "a"
		cfg.Health = func(ctx context.Context) error {
			if failing.Load() {
				<-ctx.Done() // passes, but too late
			}
			return nil
		}
		var running atomic.Bool
		runInBackground(t, ctx, newElectorWith(t, db, "health", cfg), func(ctx context.Context, _ *election.Term) error {
			running.Store(true)
			<-ctx.Done()
			time.Sleep(50 * time.Millisecond) // stopping takes a while
			running.Store(false)
			return nil
		})
		never := cfg
		never.Identity, never.Health = "never", func(context.Context) error { return errors.New("never healthy") }
		runInBackground(t, ctx, newElectorWith(t, db, "health", never), func(ctx context.Context, _ *election.Term) error {
			t.Errorf("a candidate whose check never passed leads")
			return nil
		})
		ops := newOperator(t, db, "health")
		waitFor(t, "a to lead", 10*time.Second, func() bool { rec, err := ops.Leader(ctx); return err == nil && rec.Identity == "a" })
		first, _ := ops.Leader(ctx)
		runInBackground(t, ctx, newElector(t, s, db, "health", "b"), func(ctx context.Context, _ *election.Term) error {
			if running.Load() {
				t.Errorf("b leads while a's function runs")
			}
			<-ctx.Done()
			return nil
		})
		failing.Store(true)
		waitFor(t, "b to lead", 10*time.Second, func() bool { rec, err := ops.Leader(ctx); return err == nil && rec.Identity == "b" })
		assertHistoryReason(t, ops, first.Token, "unhealthy")
		health := func() election.Candidate {
			cands, err := ops.Candidates(ctx)
			if err != nil {
				t.Fatal(err)
			}
			for _, c := range cands {
				if c.Identity == "a" {
					return c
				}
			}
			return election.Candidate{}
		}
		waitFor(t, "a to be listed unhealthy, not campaigning", 5*time.Second, func() bool { c := health(); return !c.Alive && c.Health == "unhealthy" })
		if _, err := ops.Handover(ctx, "a"); !errors.Is(err, election.ErrNotCandidate) {
			t.Fatalf("a hand-over to the unhealthy a: %v, want ErrNotCandidate", err)
		}
		failing.Store(false)
		waitFor(t, "a to campaign again, healthy", 10*time.Second, func() bool { c := health(); return c.Alive && c.Health == "healthy" })
	})
}

// TestRollingDeploy: three processes are replaced one by one, each by a
// new process of a higher priority that campaigns before the old one gets
// SIGTERM, with the leader's replaced first, second or last. Preferred
// leaders are off: the elections alone move leadership, once, to the new
// version, with no stale fenced write accepted.
func TestRollingDeploy(t *testing.T) {
	forEachStrategy(t, func(t *testing.T, s election.Strategy) {
		for leaderAt := range 3 {
			t.Run(fmt.Sprintf("leader-replaced-%d-of-3", leaderAt+1), func(t *testing.T) {
				name := fmt.Sprintf("deploy-%d", leaderAt)
				db, g := writingGroup(t, s, name, 0)
				noPreference := "ELECTION_CHILD_PREFER_AFTER=0"
				for i := range 3 {
					g.start(fmt.Sprintf("v1-%d", i), "ELECTION_CHILD_PRIORITY=0", "ELECTION_CHILD_VERSION=v1", noPreference)
				}
				ops := newOperator(t, db, name)
				ctx := ctxFor(t, 2*time.Minute)
				first := g.Next(is("start"), 30*time.Second)
				// Every process campaigns, so that it has taken SIGTERM into
				// its own hands, before the first is stopped.
				waitFor(t, "the three to campaign", 30*time.Second, func() bool { return len(liveCandidates(t, ops)) == 3 })
				order := slices.DeleteFunc([]string{"v1-0", "v1-1", "v1-2"}, func(id string) bool { return id == first.ID })
				order = slices.Insert(order, leaderAt, first.ID)
				for i, old := range order {
					id := fmt.Sprintf("v2-%d", i)
					g.start(id, "ELECTION_CHILD_PRIORITY=1", "ELECTION_CHILD_VERSION=v2", noPreference)
					waitFor(t, id+" to campaign", 30*time.Second, func() bool { return campaigning(ops, id) })
					g.signal(old, syscall.SIGTERM)
					g.Next(isFrom("exit", old), 30*time.Second)
				}
				var rec election.Record
				waitFor(t, "a new instance to lead", 10*time.Second, func() bool {
					var err error
					rec, err = ops.Leader(ctx)
					return err == nil && strings.HasPrefix(rec.Identity, "v2-")
				})
				var hist []election.TermRecord
				waitFor(t, "its term in the history", 10*time.Second, func() bool {
					var err error
					hist, err = ops.History(ctx, 0)
					return err == nil && slices.ContainsFunc(hist, func(h election.TermRecord) bool { return h.Token == rec.Token })
				})
				var terms []string
				moves := 0
				for _, h := range hist {
					terms = append(terms, fmt.Sprintf("%d %s %s", h.Token, h.Identity, h.Reason))
					if h.Token > first.Token {
						moves++
					}
					if h.Reason != "" && h.Reason != "resigned" {
						t.Errorf("term %d of %s ended %s in a graceful deploy", h.Token, h.Identity, h.Reason)
					}
				}
				if moves != 1 {
					t.Fatalf("leadership moved %d times from %s, replaced in place %d of 3, want once; history, newest first: %v", moves, first.ID, leaderAt+1, terms)
				}
				assertHistoryReason(t, ops, first.Token, "resigned")
				checkWrites(t, db)
			})
		}
	})
}

// campaigning reports whether ops's election lists candidate id as alive
// (false before its tables exist).
func campaigning(ops *election.Operator, id string) bool {
	cs, err := ops.Candidates(context.Background())
	return err == nil && slices.ContainsFunc(cs, func(c election.Candidate) bool { return c.Identity == id && c.Alive })
}

// TestPriorityAtEveryElection: when a term ends, the next is the term of
// the waiting candidate of the highest priority, whoever holds the
// deputy's place or reads the record first: after a SIGKILL of the leader,
// and after a SIGTERM. Preferred leaders are off.
func TestPriorityAtEveryElection(t *testing.T) {
	forEachStrategy(t, func(t *testing.T, s election.Strategy) {
		db, g := writingGroup(t, s, "rank", 0)
		ops := newOperator(t, db, "rank")
		ctx := ctxFor(t, 2*time.Minute)
		join := func(id string, priority int) {
			g.start(id, "ELECTION_CHILD_PRIORITY="+strconv.Itoa(priority), "ELECTION_CHILD_PREFER_AFTER=0")
			waitFor(t, id+" to campaign", 30*time.Second, func() bool { return campaigning(ops, id) })
		}
		// The two of priority 0 campaign first: one leads, the other waits
		// ahead of the newcomers (the deputy, under GetLock).
		join("low-0", 0)
		first := g.Next(is("start"), 30*time.Second)
		join("low-1", 0)
		join("mid", 1)
		for _, step := range []struct {
			sig  syscall.Signal
			next string
		}{{syscall.SIGKILL, "mid"}, {syscall.SIGTERM, "high"}} {
			if step.next == "high" {
				join("high", 2)
				// A record of an earlier version has no hint of the
				// priorities: the candidates read their rows.
				if _, err := db.Exec("UPDATE election_record SET top_priority = NULL"); err != nil {
					t.Fatal(err)
				}
			}
			leader := first
			g.signal(leader.ID, step.sig)
			next := g.Next(is("start"), 30*time.Second)
			if next.ID != step.next {
				t.Fatalf("after %v of %s (term %d), %s leads (term %d), want %s: the live candidate of the highest priority", step.sig, leader.ID, leader.Token, next.ID, next.Token, step.next)
			}
			hist, err := ops.History(ctx, 0)
			if err != nil {
				t.Fatal(err)
			}
			for _, h := range hist {
				if h.Token > leader.Token && h.Token < next.Token {
					t.Fatalf("term %d of %s came between %s's and %s's", h.Token, h.Identity, leader.ID, next.ID)
				}
			}
			first = next
		}
		checkWrites(t, db)
	})
}

// TestUnhealthyProcess: a leader process whose check starts failing
// resigns, recorded unhealthy; another process leads; the first campaigns
// again once its check passes, and does not take leadership back from an
// equal.
func TestUnhealthyProcess(t *testing.T) {
	forEachStrategy(t, func(t *testing.T, s election.Strategy) {
		db, g := writingGroup(t, s, "health", 0)
		flag := filepath.Join(t.TempDir(), "unhealthy")
		for _, id := range []string{"proc-0", "proc-1"} {
			g.start(id, "ELECTION_CHILD_UNHEALTHY_IF="+flag+"-"+id, "ELECTION_CHILD_PRIORITY=0") // equals, PreferAfter set
		}
		ops := newOperator(t, db, "health")
		ctx := ctxFor(t, 2*time.Minute)
		start := g.Next(is("start"), 30*time.Second)
		other := map[string]string{"proc-0": "proc-1", "proc-1": "proc-0"}[start.ID]
		if err := os.WriteFile(flag+"-"+start.ID, nil, 0o644); err != nil {
			t.Fatal(err)
		}
		g.Next(func(e event) bool {
			return e.Ev == "logged" && e.ID == start.ID && e.Token == start.Token && e.Reason == "unhealthy"
		}, 10*time.Second)
		next := g.Next(isFrom("start", other), 10*time.Second)
		assertHistoryReason(t, ops, start.Token, "unhealthy")
		if err := os.Remove(flag + "-" + start.ID); err != nil {
			t.Fatal(err)
		}
		waitFor(t, start.ID+" to campaign again", 10*time.Second, func() bool {
			cands, err := ops.Candidates(ctx)
			for _, c := range cands {
				if c.Identity == start.ID && c.Alive && c.Health == "healthy" {
					return err == nil
				}
			}
			return false
		})
		time.Sleep(time.Second)
		if rec, err := ops.Leader(ctx); err != nil || rec.Token != next.Token {
			t.Fatalf("after %s recovered the leader is %q (term %d, err %v), want %s's term %d to go on", start.ID, rec.Identity, rec.Token, err, other, next.Token)
		}
		checkWrites(t, db)
	})
}

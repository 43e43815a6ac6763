package election_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/sqlelect/election"
	"github.com/sqlelect/election/internal/failpoint"
	"github.com/sqlelect/election/internal/mysqltest"
)

func TestOneLeaderAmongGoroutines(t *testing.T) {
	forEachStrategy(t, func(t *testing.T, s election.Strategy) {
		db, _ := newDB(t)
		createWrites(t, db)
		ctx := ctxFor(t, 8*time.Second)
		var (
			acting, overlaps atomic.Int32
			mu               sync.Mutex
			lastToken        uint64
			terms            int
			wg               sync.WaitGroup
		)
		for i := range 5 {
			e := newElector(t, s, db, "goroutines", "g"+string(rune('a'+i)))
			wg.Add(1)
			go func() {
				defer wg.Done()
				for ctx.Err() == nil {
					// fn returns while leading, so Run resigns and pauses before
					// campaigning again: terms pass between the candidates.
					err := e.Run(ctx, func(ctx context.Context, term *election.Term) error {
						if acting.Add(1) != 1 {
							overlaps.Add(1)
						}
						defer acting.Add(-1)
						mu.Lock()
						if term.Token() <= lastToken {
							t.Errorf("token %d after %d", term.Token(), lastToken)
						}
						lastToken = term.Token()
						terms++
						mu.Unlock()
						for range 3 {
							if err := fencedWrite(ctx, term, e.Identity()); err != nil && ctx.Err() == nil {
								t.Errorf("fenced write of a live term: %v", err)
							}
						}
						return nil
					})
					if err != nil && ctx.Err() == nil {
						t.Errorf("run: %v", err)
					}
				}
			}()
		}
		wg.Wait()
		if n := overlaps.Load(); n != 0 {
			t.Fatalf("%d times two goroutines led at once", n)
		}
		if terms < 10 {
			t.Fatalf("only %d terms in 8s; leadership did not rotate", terms)
		}
		if n := checkWrites(t, db); n < terms {
			t.Fatalf("%d fenced writes for %d terms", n, terms)
		}
	})
}

func TestResignHandsOver(t *testing.T) {
	forEachStrategy(t, func(t *testing.T, s election.Strategy) {
		db, _ := newDB(t)
		ctx := ctxFor(t, time.Minute)
		a := newElector(t, s, db, "resign", "a")
		b := newElector(t, s, db, "resign", "b")
		ta := await(t, campaign(ctx, a), 10*time.Second).term
		rb := campaign(ctx, b)
		if err := ta.Resign(ctx); err != nil {
			t.Fatal(err)
		}
		if !errors.Is(ta.Err(), election.ErrResigned) || a.IsLeader() {
			t.Fatalf("resigned term: Err %v, IsLeader %v", ta.Err(), a.IsLeader())
		}
		tb := await(t, rb, 10*time.Second).term
		assertTokenAfter(t, tb.Token(), ta.Token())
		rec, err := newOperator(t, db, "resign").Leader(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if rec.Identity != "b" || rec.Token != tb.Token() || !rec.Leading() {
			t.Fatalf("record after hand-over: %+v", rec)
		}
		if !b.IsLeader() || !tb.IsLeader() {
			t.Fatal("new leader does not know it leads")
		}
	})
}

func TestCancelledContextResigns(t *testing.T) {
	forEachStrategy(t, func(t *testing.T, s election.Strategy) {
		db, _ := newDB(t)
		a := newElector(t, s, db, "cancel", "a")
		ctx, cancel := context.WithCancel(context.Background())
		ta, err := a.Campaign(ctx)
		if err != nil {
			t.Fatal(err)
		}
		cancel()
		<-ta.Done()
		if !errors.Is(ta.Err(), context.Canceled) {
			t.Fatalf("term ended with %v, want context.Canceled", ta.Err())
		}
		ta.Resign(ctxFor(t, 10*time.Second)) // waits until released
		rec, err := newOperator(t, db, "cancel").Leader(ctxFor(t, 10*time.Second))
		if !errors.Is(err, election.ErrNoLeader) || rec.State != "resigned" || rec.LockConnID != 0 {
			t.Fatalf("after cancel: %v, %+v; want a resigned record and a free lock", err, rec)
		}
	})
}

// Observer.Running pairs every start of Run with its end, with no error when
// Run was asked to stop: its context ended, its function returned ErrStop,
// or another Run of the Elector was under way.
func TestRunReportsRunning(t *testing.T) {
	t.Parallel()
	db, _ := newDB(t)
	var (
		mu  sync.Mutex
		ran []string
	)
	cfg := fast
	cfg.Identity = "a"
	cfg.Observer = &election.Observer{Running: func(_ string, running bool, err error) {
		mu.Lock()
		ran = append(ran, fmt.Sprint(running, " ", err))
		mu.Unlock()
	}}
	e := newElectorWith(t, db, "running", cfg)
	ctx, cancel := context.WithCancel(ctxFor(t, time.Minute))
	leading := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		done <- e.Run(ctx, func(ctx context.Context, _ *election.Term) error {
			close(leading)
			<-ctx.Done()
			return nil
		})
	}()
	<-leading
	if err := e.Run(ctx, func(context.Context, *election.Term) error { return nil }); !errors.Is(err, election.ErrCampaigning) {
		t.Fatalf("a second Run: %v, want ErrCampaigning", err)
	}
	cancel()
	<-done
	stop := fmt.Errorf("done for good: %w", election.ErrStop)
	if err := e.Run(ctxFor(t, time.Minute), func(context.Context, *election.Term) error { return stop }); !errors.Is(err, election.ErrStop) {
		t.Fatalf("Run: %v, want its function's ErrStop", err)
	}
	mu.Lock()
	defer mu.Unlock()
	if got, want := strings.Join(ran, ", "), "true <nil>, true <nil>, false <nil>, false <nil>, true <nil>, false <nil>"; got != want {
		t.Errorf("Observer.Running saw %s, want %s", got, want)
	}
}

func TestRunResignsWhenContextEnds(t *testing.T) {
	forEachStrategy(t, func(t *testing.T, s election.Strategy) {
		db, _ := newDB(t)
		a := newElector(t, s, db, "run-cancel", "a")
		b := newElector(t, s, db, "run-cancel", "b")
		ctx, cancel := context.WithCancel(context.Background())
		started := make(chan uint64, 1)
		fnReturned := make(chan time.Time, 1)
		done := make(chan error, 1)
		go func() {
			done <- a.Run(ctx, func(ctx context.Context, term *election.Term) error {
				started <- term.Token()
				<-ctx.Done()
				time.Sleep(200 * time.Millisecond) // slow clean-up: b must wait for it
				fnReturned <- time.Now()
				return nil
			})
		}()
		tokenA := <-started
		rb := campaign(ctxFor(t, time.Minute), b)
		cancel()
		r := await(t, rb, 10*time.Second)
		if err := <-done; !errors.Is(err, context.Canceled) {
			t.Fatalf("Run returned %v", err)
		}
		if ret := <-fnReturned; !ret.Before(r.at) {
			t.Fatal("the next leader started before the previous leader's function returned")
		}
		assertTokenAfter(t, r.term.Token(), tokenA)
	})
}

func TestCampaignTwiceOnOneElector(t *testing.T) {
	forEachStrategy(t, func(t *testing.T, s election.Strategy) {
		db, _ := newDB(t)
		a := newElector(t, s, db, "twice", "a")
		ctx := ctxFor(t, time.Minute)
		ta := await(t, campaign(ctx, a), 10*time.Second).term
		if _, err := a.Campaign(ctx); !errors.Is(err, election.ErrCampaigning) {
			t.Fatalf("second campaign: %v, want ErrCampaigning", err)
		}
		resignAll(t, ta)
		tb := await(t, campaign(ctx, a), 10*time.Second).term
		assertTokenAfter(t, tb.Token(), ta.Token())
	})
}

func TestTokensIncreaseOverManyTerms(t *testing.T) {
	forEachStrategy(t, func(t *testing.T, s election.Strategy) {
		db, _ := newDB(t)
		createWrites(t, db)
		ctx := ctxFor(t, 2*time.Minute)
		electors := []*election.Elector{newElector(t, s, db, "many", "a"), newElector(t, s, db, "many", "b")}
		var old []*election.Term
		var last uint64
		for i := range 120 {
			e := electors[i%2]
			term, err := e.Campaign(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if term.Token() <= last {
				t.Fatalf("term %d: token %d after %d", i, term.Token(), last)
			}
			last = term.Token()
			if err := fencedWrite(ctx, term, e.Identity()); err != nil {
				t.Fatalf("fenced write of the live term %d: %v", term.Token(), err)
			}
			for _, o := range old[max(0, len(old)-5):] {
				err := fencedWrite(ctx, o, "stale")
				var stale *election.StaleTokenError
				if !errors.As(err, &stale) || !errors.Is(err, election.ErrFenced) || stale.Token != o.Token() {
					t.Fatalf("write with stale token %d: %v", o.Token(), err)
				}
			}
			resignAll(t, term)
			old = append(old, term)
		}
		if n := checkWrites(t, db); n != 120 {
			t.Fatalf("%d writes, want 120", n)
		}
		if stale := writesBy(db, "stale"); stale != 0 {
			t.Fatalf("%d stale writes accepted", stale)
		}
	})
}

// TryRun as a cluster lock: while one instance runs the task, and for
// atLeast after it began, the others skip it with ErrHeld; afterwards the
// next one runs it under a higher token.
func TestTryRun(t *testing.T) {
	forEachStrategy(t, func(t *testing.T, s election.Strategy) {
		db, _ := newDB(t)
		ctx := ctxFor(t, time.Minute)
		a := newElector(t, s, db, "task", "a")
		b := newElector(t, s, db, "task", "b")
		release := make(chan struct{})
		running := make(chan uint64)
		done := make(chan error)
		go func() {
			done <- a.TryRun(ctx, 700*time.Millisecond, func(ctx context.Context, term *election.Term) error {
				running <- term.Token()
				<-release
				return errors.New("task result")
			})
		}()
		first := <-running
		skip := func(when string) {
			err := b.TryRun(ctx, 0, func(context.Context, *election.Term) error {
				t.Errorf("task ran twice (%s)", when)
				return nil
			})
			if !errors.Is(err, election.ErrHeld) {
				t.Fatalf("TryRun %s: %v, want ErrHeld", when, err)
			}
		}
		skip("while it runs")
		close(release)
		time.Sleep(100 * time.Millisecond)
		skip("within atLeast of its start")
		if err := <-done; err == nil || err.Error() != "task result" {
			t.Fatalf("TryRun returned %v, want the task's error", err)
		}
		var second uint64
		if err := b.TryRun(ctx, 0, func(_ context.Context, term *election.Term) error {
			second = term.Token()
			return nil
		}); err != nil || second <= first {
			t.Fatalf("TryRun after the first ended: %v, token %d after %d", err, second, first)
		}
	})
}

// A TryRun candidate is listed only while its TryRun runs: once TryRun
// returns, having run the task, with ErrHeld, or with its context
// cancelled mid-task, Candidates no longer lists it (a row left behind
// showed every stopped instance as a dead candidate).
func TestTryRunLeavesNoCandidate(t *testing.T) {
	forEachStrategy(t, func(t *testing.T, s election.Strategy) {
		db, _ := newDB(t)
		ctx := ctxFor(t, time.Minute)
		ops := newOperator(t, db, "task")
		listed := func(when, want string) {
			t.Helper()
			cs, err := ops.Candidates(ctx)
			if err != nil {
				t.Fatal(err)
			}
			var ids []string
			for _, c := range cs {
				ids = append(ids, c.Identity)
			}
			if got := strings.Join(ids, ","); got != want {
				t.Errorf("%s: candidates [%s], want [%s]", when, got, want)
			}
		}

		a := newElector(t, s, db, "task", "a")
		if err := a.TryRun(ctx, 0, func(context.Context, *election.Term) error {
			listed("while a runs the task", "a")
			return nil
		}); err != nil {
			t.Fatalf("TryRun: %v", err)
		}
		listed("after a ran the task", "")

		b := newElector(t, s, db, "task", "b")
		bctx, cancel := context.WithCancel(ctx)
		defer cancel()
		running := make(chan struct{})
		done := make(chan error)
		go func() {
			done <- b.TryRun(bctx, time.Minute, func(ctx context.Context, _ *election.Term) error {
				close(running)
				<-ctx.Done()
				return ctx.Err()
			})
		}()
		<-running
		c := newElector(t, s, db, "task", "c")
		if err := c.TryRun(ctx, 0, func(context.Context, *election.Term) error {
			t.Error("c ran the task while b held it")
			return nil
		}); !errors.Is(err, election.ErrHeld) {
			t.Fatalf("TryRun while b runs the task: %v, want ErrHeld", err)
		}
		listed("while b runs the task, after c found it held", "b")
		cancel()
		if err := <-done; !errors.Is(err, context.Canceled) {
			t.Fatalf("TryRun cancelled mid-task: %v, want the task's context.Canceled", err)
		}
		listed("after b's TryRun was cancelled mid-task", "")
	})
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
	e := newElectorWith(t, db, "observed", cfg)
	term := await(t, campaign(ctxFor(t, time.Minute), e), 10*time.Second).term
	time.Sleep(350 * time.Millisecond)
	resignAll(t, term)
	mu.Lock()
	defer mu.Unlock()
	if strings.Join(events, ", ") != "start observed a, end resigned" || renewals < 2 {
		t.Fatalf("events %v, %d renewals", events, renewals)
	}
}

// Candidates in separate processes make fenced writes while they lead; one
// leader at a time, and the fencing invariant holds over every write.
func TestOneLeaderAmongProcesses(t *testing.T) {
	forEachStrategy(t, func(t *testing.T, s election.Strategy) {
		db, g := writingGroup(t, s, "procs", 4)
		seen := map[uint64]string{}
		var last uint64
		for range 3 {
			start := g.Next(is("start"), 30*time.Second)
			assertTokenAfter(t, start.Token, last)
			seen[start.Token], last = start.ID, start.Token
			g.Next(isFrom("write", start.ID), 10*time.Second)
			g.signal(start.ID, syscall.SIGTERM) // graceful: Run resigns
			g.Next(isFrom("exit", start.ID), 10*time.Second)
		}
		if n := checkWrites(t, db); n == 0 {
			t.Fatal("no fenced writes")
		}
	})
}

func TestLeaderProcessKilled(t *testing.T) {
	forEachStrategy(t, func(t *testing.T, s election.Strategy) {
		db, g, first := leadingGroup(t, s, "sigkill", 3)
		g.signal(first.ID, syscall.SIGKILL)
		g.nextLeader(first, 10*time.Second)
		checkWrites(t, db)
	})
}

// A stopped leader loses the lock once the server drops its idle session,
// and when it resumes it knows it no longer leads; its writes are refused.
func TestLeaderProcessStopped(t *testing.T) {
	forEachStrategy(t, func(t *testing.T, s election.Strategy) {
		db, g, first := leadingGroup(t, s, "sigstop", 2)
		g.signal(first.ID, syscall.SIGSTOP)
		second := g.nextLeader(first, 30*time.Second)
		g.signal(first.ID, syscall.SIGCONT)
		end := g.Next(isFrom("end", first.ID), 10*time.Second)
		if !hasPrefix(end.Reason, election.ErrLeaseExpired, election.ErrSessionLost, election.ErrLockLost) {
			t.Fatalf("resumed leader's term ended with %q", end.Reason)
		}
		// The resumed leader campaigns again and waits; the new leader keeps
		// writing, and no write of the stale term lands after the new term's.
		g.Next(isFrom("write", second.ID), 10*time.Second)
		checkWrites(t, db)
	})
}

// leadingGroup starts n candidate processes that make fenced writes, and
// returns once one of them leads and has written.
func leadingGroup(t *testing.T, s election.Strategy, name string, n int) (*sql.DB, *group, event) {
	t.Helper()
	db, g := writingGroup(t, s, name, n)
	first := g.Next(is("start"), 30*time.Second)
	g.Next(isFrom("write", first.ID), 10*time.Second)
	return db, g, first
}

// nextLeader waits until another process than old's leads, with a higher
// token, and has written.
func (g *group) nextLeader(old event, limit time.Duration) event {
	g.t.Helper()
	next := g.Next(is("start"), limit)
	if next.ID == old.ID || next.Token <= old.Token {
		g.t.Fatalf("after the fault on %s (token %d): %s leads with token %d", old.ID, old.Token, next.ID, next.Token)
	}
	g.Next(isFrom("write", next.ID), 10*time.Second)
	return next
}

func hasPrefix(s string, errs ...error) bool {
	for _, err := range errs {
		if strings.HasPrefix(s, err.Error()) {
			return true
		}
	}
	return false
}

// A leader cut off by a network blackhole ends its term before the server
// frees the lock for the next leader.
func TestBlackholeEndsTermBeforeNextStarts(t *testing.T) {
	forEachStrategy(t, func(t *testing.T, s election.Strategy) {
		ta, rb, proxy := proxiedLeader(t, s, "blackhole")
		time.Sleep(300 * time.Millisecond) // b waits in GET_LOCK
		proxy.Blackhole()
		r := await(t, rb, 30*time.Second)
		if ta.Err() == nil {
			t.Fatal("the next leader started while the cut-off leader's term still lasted")
		}
		if !errors.Is(ta.Err(), election.ErrLeaseExpired) {
			t.Fatalf("cut-off leader's term ended with %v, want ErrLeaseExpired", ta.Err())
		}
		assertTokenAfter(t, r.term.Token(), ta.Token())
		proxy.Restore()
	})
}

// A server restart: no one leads while it is down, one leads after, and
// tokens keep increasing.
func TestServerRestart(t *testing.T) {
	forEachStrategy(t, func(t *testing.T, s election.Strategy) {
		if mysqltest.PrivateBinary() == "" {
			t.Skip("needs a mariadbd/mysqld binary to start a server of its own; only a DSN was given")
		}
		srv, err := mysqltest.StartPrivate(ctxFor(t, 2*time.Minute), mysqltest.PrivateBinary())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(srv.Close)
		dbName := srv.NewDatabase(t)
		var acting atomic.Int32
		type start struct {
			id    string
			token uint64
		}
		starts := make(chan start, 100)
		for _, id := range []string{"a", "b"} {
			e := newElector(t, s, srv.Open(t, dbName), "restart", id)
			runInBackground(t, context.Background(), e, func(ctx context.Context, term *election.Term) error {
				if acting.Add(1) != 1 {
					t.Error("two leaders at once")
				}
				defer acting.Add(-1)
				starts <- start{id, term.Token()}
				<-ctx.Done()
				return nil
			})
		}
		first := <-starts
		if err := srv.Kill(); err != nil {
			t.Fatal(err)
		}
		// The leader's term ends (session lost or lease expired) and nobody
		// leads while the server is down.
		waitFor(t, "the leader to stop acting after the server died", 10*time.Second, func() bool { return acting.Load() == 0 })
		time.Sleep(3 * time.Second)
		if acting.Load() != 0 || len(starts) != 0 {
			t.Fatal("a term started while the server was down")
		}
		if err := srv.Boot(ctxFor(t, time.Minute)); err != nil {
			t.Fatal(err)
		}
		var next start
		select {
		case next = <-starts:
			if next.token <= first.token {
				t.Fatalf("token %d after restart, %d before", next.token, first.token)
			}
		case <-time.After(30 * time.Second):
			t.Fatal("no leader within 30s of the restart")
		}
		// The old leader could not record its end while the server was down;
		// it does so once it reaches the server again, with its own reason
		// and time, in place of the "lost" the next term wrote.
		ops := newOperatorWith(t, srv.Open(t, dbName), "restart", func() election.Config { c := fast; c.Strategy = s; return c }())
		waitFor(t, "the old leader's own account of its end", 20*time.Second, func() bool {
			hist, err := ops.History(ctxFor(t, 10*time.Second), 0)
			if err != nil {
				t.Fatal(err)
			}
			var old, cur election.TermRecord
			for _, h := range hist {
				switch h.Token {
				case first.token:
					old = h
				case next.token:
					cur = h
				}
			}
			if old.Reason == "lost" || old.Reason == "" || cur.Started.IsZero() {
				return false // not written yet: the old leader's end, or the next term's row
			}
			if old.Reason != "session-lost" && old.Reason != "lease-expired" || !old.Ended.Before(cur.Started) {
				t.Fatalf("term %d before the restart: %q at %v; the next began at %v", first.token, old.Reason, old.Ended, cur.Started)
			}
			return true
		})
	})
}

// A candidate whose new connection goes into a partition (its handshake is
// dropped) gives up after Lease+Margin instead of hanging until the
// server's connect_timeout, so that it soon waits again and can take over.
func TestCampaignGivesUpOnAHungConnection(t *testing.T) {
	forEachStrategy(t, func(t *testing.T, s election.Strategy) {
		dbName := server.NewDatabase(t)
		if err := election.CreateSchema(ctxFor(t, 10*time.Second), server.Open(t, dbName), ""); err != nil {
			t.Fatal(err)
		}
		db, proxy := viaProxy(t, dbName)
		e := newElector(t, s, db, "hung", "a")
		// A first term while the network works: tables and lock name known.
		resignAll(t, await(t, campaign(ctxFor(t, time.Minute), e), 10*time.Second).term)
		db.SetMaxIdleConns(0) // every session is new, through the partition
		proxy.Blackhole()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_, err := e.Campaign(ctx)
		// Its own deadline, not the server's connect_timeout (which ends the
		// handshake with an invalid connection) nor the caller's context.
		if !errors.Is(err, context.DeadlineExceeded) || ctx.Err() != nil {
			t.Fatalf("campaign through a partition: %v (caller's context: %v); want it to give up by itself", err, ctx.Err())
		}
	})
}

// A follower's Debug log tells a healthy follower from a stuck one: that it
// waits (under GetLock, queued or as the deputy) and who leads with which
// token, once per leader, with no line per check. When the leader resigns,
// the other follower's log names the new leader.
func TestFollowerLogs(t *testing.T) {
	forEachStrategy(t, func(t *testing.T, s election.Strategy) {
		db, _ := newDB(t)
		ctx := ctxFor(t, time.Minute)
		leader := await(t, campaign(ctx, newElector(t, s, db, "logs", "l")), 10*time.Second).term
		follower := func(id string) (<-chan result, *logBuffer) {
			cfg := fast
			cfg.Strategy, cfg.Identity = s, id
			var logs *logBuffer
			cfg.Logger, logs = newLogged()
			return campaign(ctx, newElectorWith(t, db, "logs", cfg)), logs
		}
		leads := func(id string, token uint64) string { return fmt.Sprintf("leader=%s token=%d", id, token) }
		rf, lf := follower("f")
		waitFor(t, "f to log who leads", 20*time.Second, func() bool { return len(lf.lines("level=DEBUG", leads("l", leader.Token()))) == 1 })
		rq, lq := follower("q")
		waiting := leads("l", leader.Token()) // under LeaseRow every follower reads the record
		if s == election.GetLock {
			if len(lf.lines("became the deputy")) != 1 {
				t.Fatalf("the first follower did not log that it became the deputy:\n%s", lf.lines())
			}
			waiting = "queued for the deputy's place"
		}
		waitFor(t, "q to log that it waits", 20*time.Second, func() bool { return len(lq.lines("level=DEBUG", waiting)) == 1 })

		// 20 checks later (CheckInterval is Interval), nothing more: no line
		// per check.
		nf, nq := len(lf.lines()), len(lq.lines())
		time.Sleep(20 * fast.Interval)
		if len(lf.lines()) != nf || len(lq.lines()) != nq {
			t.Fatalf("followers logged while nothing changed:\n%s\n%s", strings.Join(lf.lines(), "\n"), strings.Join(lq.lines(), "\n"))
		}

		resignAll(t, leader)
		var (
			next  result
			other *logBuffer
		)
		select {
		case next = <-rf:
			other = lq
		case next = <-rq:
			other = lf
		}
		if next.err != nil {
			t.Fatal(next.err)
		}
		t.Cleanup(func() { next.term.Resign(context.Background()) })
		winner := "f"
		if other == lf {
			winner = "q"
		}
		waitFor(t, "the other follower to log the new leader", 20*time.Second, func() bool {
			return len(other.lines("level=DEBUG", leads(winner, next.term.Token()))) == 1
		})
	})
}

// A leader's function that returns an error ends only its term: Run logs
// the error, resigns, and campaigns again; one that returns an error
// wrapping ErrStop ends Run, which returns that error.
func TestRunFunctionEndsTheTermNotTheCampaign(t *testing.T) {
	t.Parallel()
	db, _ := newDB(t)
	logger, logs := newLogged()
	cfg := fast
	cfg.Logger = logger
	e := newElectorWith(t, db, "returns", cfg)
	failed := errors.New("downstream unreachable")
	var tokens []uint64
	err := e.Run(ctxFor(t, 20*time.Second), func(_ context.Context, term *election.Term) error {
		tokens = append(tokens, term.Token())
		if len(tokens) == 1 {
			return failed
		}
		return fmt.Errorf("%w: the work is done", election.ErrStop)
	})
	if !errors.Is(err, election.ErrStop) || len(tokens) != 2 {
		t.Fatalf("Run returned %v after %d terms, want ErrStop after 2", err, len(tokens))
	}
	assertTokenAfter(t, tokens[1], tokens[0])
	if len(logs.lines("level=WARN", "downstream unreachable", "campaigning again")) != 1 || len(logs.lines("no longer campaigns", "the work is done")) != 1 {
		t.Fatalf("the log does not say what Run did with fn's errors:\n%s", strings.Join(logs.lines(), "\n"))
	}
	assertHistoryReason(t, newOperator(t, db, "returns"), tokens[0], "resigned")
}

// A function that resigns its own term and returns at once does not make
// Run spin: Run pauses before it campaigns again, as after any return of
// the function, and the pause grows while terms stay short.
func TestRunPausesAfterTheFunctionResigns(t *testing.T) {
	t.Parallel()
	db, _ := newDB(t)
	e := newElectorWith(t, db, "resigns", fast)
	var terms int
	err := e.Run(ctxFor(t, 2*time.Second), func(ctx context.Context, term *election.Term) error {
		terms++
		return term.Resign(ctx)
	})
	// Pauses from Interval (100 ms) growing by half each time: about 7 terms
	// in 2 s; without them, hundreds.
	if !errors.Is(err, context.DeadlineExceeded) || terms < 2 || terms > 30 {
		t.Fatalf("Run: %v after %d terms in 2s, want the deadline after a few", err, terms)
	}
}

// An elector's first campaign is bounded whatever its context: against a
// server that accepts the connection and never answers (the handshake
// hangs), and against one that stops answering after the connection was
// made (the first statements hang), Campaign(context.Background()) gives up
// by itself, and Run would retry.
func TestFirstUseIsBounded(t *testing.T) {
	forEachStrategy(t, func(t *testing.T, s election.Strategy) {
		silent, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { silent.Close() })
		go func() {
			var held []net.Conn // accepted, never answered
			defer func() {
				for _, c := range held {
					c.Close()
				}
			}()
			for {
				c, err := silent.Accept()
				if err != nil {
					return
				}
				held = append(held, c)
			}
		}()
		cfg := server.Config("x")
		cfg.Addr = silent.Addr().String()
		blackholed, proxy := viaProxy(t, server.NewDatabase(t))
		if err := blackholed.Ping(); err != nil { // a session made while the network works
			t.Fatal(err)
		}
		proxy.Blackhole()
		for what, db := range map[string]*sql.DB{"a silent server": openDSN(t, cfg.FormatDSN()), "a server gone silent": blackholed} {
			c := fast
			c.Strategy = s
			e := newElectorWith(t, db, "first", c)
			select {
			case r := <-campaign(context.Background(), e):
				if err := r.err; !errors.Is(err, context.DeadlineExceeded) {
					t.Errorf("first campaign against %s: %v, want it to give up by itself", what, err)
				}
			case <-time.After(time.Minute): // a guard against a hang, not a bound on speed
				t.Fatalf("first campaign against %s still blocked after a minute", what)
			}
		}
	})
}

// An elector's first use, cut off by a blackhole right before each of its
// statements in turn (the statement itself never reaches the server):
// Campaign(context.Background()) gives up by itself with an error that
// names the step, and once the network is back Run leads. The steps are
// the statements of store.prepare, getLock.pin, presence.join and
// termStart.readAndClaim (a lease's first read is its batch's, claimBatch), in the
// order a first campaign sends them; the lock
// waits of GetLock are not among them (see docs/protocol.md, "Campaign",
// step 1).
func TestFirstUseIsBoundedAtEveryStep(t *testing.T) {
	type step struct{ name, statement, names string }
	prepare := []step{
		{"database name", "SELECT DATABASE()", "reaching the server"},
		{"server variables", "SHOW GLOBAL VARIABLES", "reading the server's variables"},
	}
	for _, tbl := range []string{"record", "epoch", "candidate", "term", "lease"} {
		prepare = append(prepare, step{"create " + tbl, "CREATE TABLE IF NOT EXISTS `election_" + tbl + "`", "creating the tables"})
	}
	for _, tbl := range []string{"record", "epoch", "candidate", "term", "lease"} {
		prepare = append(prepare, step{"check " + tbl, "SELECT 1 FROM `election_" + tbl + "` LIMIT 0", "checking the tables"})
	}
	prepare = append(prepare, step{"check the record's added columns", "SELECT delay_until, value, value_epoch, lease_id, top_priority FROM `election_record` LIMIT 0", "checking the tables"},
		step{"check the candidate's added columns", "SELECT value, priority, version, healthy, waiting_since, session, lease_aware_at FROM `election_candidate` LIMIT 0", "checking the tables"},
		step{"check the term's added columns", "SELECT server, lasted_us FROM `election_term` LIMIT 0", "checking the tables"})
	session := []step{
		{"session timeouts", "SET SESSION wait_timeout", "setting up the session"},
		{"session id and candidate lock", "SELECT CONNECTION_ID(), GET_LOCK(", "setting up the session"},
	}
	rest := []step{
		{"other strategies' candidates", "SELECT MIN(identity), (SELECT r.top_priority FROM `election_record`", "reading the candidates"},
		{"candidate row", "INSERT INTO `election_candidate`", "candidate heartbeat"},
		{"priorities' hint", "UPDATE `election_record` r SET r.top_priority", "joining the election"},
		{"dead candidates", "DELETE c FROM `election_candidate`", "cleaning up candidates"},
		{"record read", "SELECT r.name, r.strategy, r.state", "reading the record"},
		{"waiting candidates' priorities", "SELECT EXISTS (SELECT 1 FROM `election_candidate`", "reading the candidates"},
		{"claim", "INSERT INTO `election_record`", "writing the record"},
		{"epoch bump", "INSERT INTO `election_epoch`", "bumping the epoch"},
	}
	forEachStrategy(t, func(t *testing.T, s election.Strategy) {
		steps := slices.Concat(prepare, rest)
		if s == election.GetLock {
			steps = slices.Concat(prepare, session, rest)
		}
		for _, st := range steps {
			t.Run(st.name, func(t *testing.T) {
				db, proxy := viaProxy(t, server.NewDatabase(t))
				var fired atomic.Bool
				proxy.BlackholeAt(func(chunk []byte) bool {
					// A COM_QUERY packet: length (3 bytes), sequence, 0x03, the text.
					if len(chunk) > 5 && chunk[4] == 3 && strings.HasPrefix(string(chunk[5:]), st.statement) {
						fired.Store(true)
						return true
					}
					return false
				})
				c := fast
				c.Strategy, c.Identity = s, "a"
				e := newElectorWith(t, db, "steps", c)
				select {
				case r := <-campaign(context.Background(), e):
					err := r.err
					if !fired.Load() {
						t.Fatalf("the campaign never sent %q (it returned %v): the step list is out of date", st.statement, err)
					}
					if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), st.names) {
						t.Fatalf("first campaign cut off before %s: %v, want it to give up by itself, naming %q", st.name, err, st.names)
					}
				case <-time.After(time.Minute): // a guard against a hang, not a bound on speed
					t.Fatalf("first campaign cut off before %s still blocked after a minute", st.name)
				}
				proxy.Restore()
				ctx := ctxFor(t, time.Minute) // a guard only: Run retries until it leads
				if err := e.Run(ctx, func(context.Context, *election.Term) error { return election.ErrStop }); !errors.Is(err, election.ErrStop) {
					t.Fatalf("Run after the network came back: %v", err)
				}
			})
		}
	})
}

// A candidate paused after it claimed the election, for longer than the
// lease, is not handed the term when it wakes: another candidate may lead
// by then. Campaign gives the term up and says why, and the next campaign
// wins with a higher token.
func TestTermNotHandedOutAfterItsLease(t *testing.T) {
	forEachStrategy(t, func(t *testing.T, s election.Strategy) {
		db := server.Open(t, server.NewDatabase(t))
		var claimed []uint64
		c := fast
		c.Strategy, c.Identity = s, "a"
		c.Observer = &election.Observer{TermStarted: func(_, _ string, token uint64) { claimed = append(claimed, token) }}
		e := newElectorWith(t, db, "paused", c)
		paused := false
		ctx := failpoint.With(context.Background(), func(point string) {
			if point == failpoint.Claimed && !paused {
				paused = true
				time.Sleep(c.Lease + 100*time.Millisecond)
			}
		})
		term, err := e.Campaign(ctx)
		if !errors.Is(err, election.ErrLeaseExpired) || term != nil {
			t.Fatalf("campaign paused past its lease: a term (%v), err %v; want no term and ErrLeaseExpired", term != nil, err)
		}
		if e.IsLeader() {
			t.Fatal("IsLeader after a term given up")
		}
		term, err = e.Campaign(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		defer term.Resign(context.Background())
		if len(claimed) != 2 || term.Token() <= claimed[0] || !term.IsLeader() {
			t.Fatalf("terms claimed %v, then token %d leading %v", claimed, term.Token(), term.IsLeader())
		}
	})
}

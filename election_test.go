package election_test

import (
	"context"
	"database/sql"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sqlelect/election"
)

func TestNewRejectsBadInput(t *testing.T) {
	db, err := sql.Open("mysql", "u@tcp(127.0.0.1:1)/d")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	one, _ := sql.Open("mysql", "u@tcp(127.0.0.1:1)/d")
	one.SetMaxOpenConns(1)
	defer one.Close()
	cases := []struct {
		name     string
		db       *sql.DB
		election string
		cfg      election.Config
		want     string // in the message
	}{
		{"nil db", nil, "x", election.Config{}, "db is nil"},
		{"empty name", db, "", election.Config{}, "name is empty"},
		{"name not UTF-8", db, "a\xffb", election.Config{}, "not valid UTF-8"},
		{"name too long", db, strings.Repeat("n", 70000), election.Config{}, "limit is 65535"},
		{"negative interval", db, "x", election.Config{Interval: -time.Second}, "Interval"},
		{"lease not twice the interval", db, "x", election.Config{Interval: time.Second, Lease: 1500 * time.Millisecond}, "at least 2×Interval"},
		{"negative margin", db, "x", election.Config{Margin: -1}, "Margin"},
		{"negative check interval", db, "x", election.Config{CheckInterval: -1}, "CheckInterval"},
		{"lease beyond wait_timeout", db, "x", election.Config{Lease: 400 * 24 * time.Hour}, "wait_timeout"},
		{"bad table prefix", db, "x", election.Config{TablePrefix: "bad-prefix"}, "TablePrefix"},
		{"identity too long", db, "x", election.Config{Identity: strings.Repeat("i", 256)}, "Identity"},
		{"pool of one connection", one, "x", election.Config{}, "SetMaxOpenConns(2)"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := election.New(tc.db, tc.election, tc.cfg)
			if !errors.Is(err, election.ErrInvalidConfig) {
				t.Fatalf("got %v, want ErrInvalidConfig", err)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %q does not mention %q", err, tc.want)
			}
		})
	}
	if _, err := election.New(db, "a name of any UTF-8: ünïcödé ✓", election.Config{}); err != nil {
		t.Fatalf("valid input refused: %v", err)
	}
}

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
					// fn returns while leading, so Run resigns and returns: every
					// term hands over to the next candidate.
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
		if tb.Token() <= ta.Token() {
			t.Fatalf("token %d after %d", tb.Token(), ta.Token())
		}
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
		if r.term.Token() <= tokenA {
			t.Fatalf("token %d after %d", r.term.Token(), tokenA)
		}
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
		if tb.Token() <= ta.Token() {
			t.Fatalf("token %d after %d", tb.Token(), ta.Token())
		}
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
		var stale int
		db.QueryRow("SELECT COUNT(*) FROM writes WHERE holder = 'stale'").Scan(&stale)
		if stale != 0 {
			t.Fatalf("%d stale writes accepted", stale)
		}
	})
}

// After a term ends, however it ends, no session in the pool owns the lock:
// the pinned session was dropped, never returned.
func TestPoolHoldsNoLockAfterTerms(t *testing.T) {
	t.Parallel()
	db, _ := newDB(t)
	admin := server.Open(t, "")
	ctx := ctxFor(t, time.Minute)
	e := newElector(t, election.GetLock, db, "pool", "a")
	var lock string
	for i := range 6 {
		term := await(t, campaign(ctx, e), 10*time.Second).term
		if i%2 == 0 {
			resignAll(t, term)
		} else {
			rec, err := newOperator(t, db, "pool").Leader(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := admin.Exec("KILL CONNECTION ?", rec.ConnID); err != nil {
				t.Fatal(err)
			}
			<-term.Done()
			resignAll(t, term)
		}
		if err := db.QueryRowContext(ctx, "SELECT lock_name FROM election_record").Scan(&lock); err != nil {
			t.Fatal(err)
		}
		assertPoolHoldsNoLock(t, db, lock)
	}
}

func assertPoolHoldsNoLock(t *testing.T, db *sql.DB, lock string) {
	t.Helper()
	ctx := ctxFor(t, 10*time.Second)
	var conns []*sql.Conn
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	for range db.Stats().Idle {
		c, err := db.Conn(ctx)
		if err != nil {
			t.Fatal(err)
		}
		conns = append(conns, c)
		var owns, timeout int
		if err := c.QueryRowContext(ctx, "SELECT IS_USED_LOCK(?) <=> CONNECTION_ID(), @@session.wait_timeout", lock).Scan(&owns, &timeout); err != nil {
			t.Fatal(err)
		}
		if owns == 1 {
			t.Fatal("a pooled session still owns the election's lock")
		}
		if timeout < 60 {
			t.Fatalf("a pooled session kept the candidate's wait_timeout %d", timeout)
		}
	}
}

func TestLeaderRecord(t *testing.T) {
	forEachStrategy(t, func(t *testing.T, s election.Strategy) {
		db, _ := newDB(t)
		ctx := ctxFor(t, time.Minute)
		name := strings.Repeat("a long election name, ünïcödé, ", 40)
		a := newElector(t, s, db, name, "a")
		observer := newOperator(t, db, name)
		if _, err := observer.Leader(ctx); !errors.Is(err, election.ErrSchema) && !errors.Is(err, election.ErrNoLeader) {
			t.Fatalf("before any term: %v", err)
		}
		term := await(t, campaign(ctx, a), 10*time.Second).term
		time.Sleep(300 * time.Millisecond) // a few keepalives
		rec, err := observer.Leader(ctx)
		if err != nil {
			t.Fatal(err)
		}
		lockOK := rec.LockConnID == rec.ConnID // GetLock: the recorded session holds the lock
		if s == election.LeaseRow {
			lockOK = rec.LockConnID == 0 // a lease takes no lock
		}
		if rec.Name != name || rec.Strategy != s.String() || rec.Identity != "a" || rec.Token != term.Token() ||
			rec.State != "leading" || !lockOK || rec.Expiry != 2*time.Second || rec.PID == 0 {
			t.Fatalf("record: %+v", rec)
		}
		if rec.RenewedAgo < 0 || rec.RenewedAgo > rec.Expiry || !rec.Renewed.After(rec.Since) {
			t.Fatalf("renewals not recorded: %+v", rec)
		}
		// Names that differ only in case or length are separate elections.
		for _, other := range []string{strings.ToUpper(name), name + "x", name[:len(name)-1]} {
			if _, err := newOperator(t, db, other).Leader(ctx); !errors.Is(err, election.ErrNoLeader) {
				t.Fatalf("election %q shares the leader of %q: %v", other[:20], name[:20], err)
			}
		}
		resignAll(t, term)
		rec, err = observer.Leader(ctx)
		if !errors.Is(err, election.ErrNoLeader) || rec.State != "resigned" || rec.Ended.IsZero() {
			t.Fatalf("after resign: %v %+v", err, rec)
		}
	})
}

func TestMissingPrivilegeNamesTheDDL(t *testing.T) {
	t.Parallel()
	_, dsn := newDB(t)
	dbName := dsn[strings.LastIndex(dsn, "/")+1:]
	if i := strings.Index(dbName, "?"); i >= 0 {
		dbName = dbName[:i]
	}
	admin := server.Open(t, "")
	user := "ro_" + dbName
	for _, stmt := range []string{
		"CREATE USER '" + user + "'@'%' IDENTIFIED BY 'pw'",
		"GRANT SELECT, INSERT, UPDATE, DELETE ON `" + dbName + "`.* TO '" + user + "'@'%'",
	} {
		if _, err := admin.Exec(stmt); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() { admin.Exec("DROP USER '" + user + "'@'%'") })
	cfg := server.Config(dbName)
	cfg.User, cfg.Passwd = user, "pw"
	db := openDSN(t, cfg.FormatDSN())
	e := newElector(t, election.GetLock, db, "no-create", "a")
	_, err := e.Campaign(ctxFor(t, 10*time.Second))
	if !errors.Is(err, election.ErrSchema) || !strings.Contains(err.Error(), "CREATE TABLE IF NOT EXISTS `election_record`") {
		t.Fatalf("campaign without CREATE privilege: %v", err)
	}
	// Once a DBA has created the tables, the same user campaigns.
	if err := election.CreateSchema(ctxFor(t, 10*time.Second), server.Open(t, dbName), ""); err != nil {
		t.Fatal(err)
	}
	term, err := e.Campaign(ctxFor(t, 10*time.Second))
	if err != nil {
		t.Fatalf("campaign on tables a DBA created: %v", err)
	}
	resignAll(t, term)
}

func TestSkipCreateTablesReportsMissingTables(t *testing.T) {
	t.Parallel()
	db, _ := newDB(t)
	cfg := fast
	cfg.SkipCreateTables = true
	e, err := election.New(db, "skip", cfg)
	if err != nil {
		t.Fatal(err)
	}
	_, err = e.Campaign(ctxFor(t, 10*time.Second))
	if !errors.Is(err, election.ErrSchema) || !strings.Contains(err.Error(), "doesn't exist") || !strings.Contains(err.Error(), "CREATE TABLE") {
		t.Fatalf("campaign without tables: %v", err)
	}
	ddl, err := election.SchemaDDL("")
	if err != nil {
		t.Fatal(err)
	}
	for _, stmt := range strings.Split(strings.TrimSpace(ddl), ";") {
		if strings.TrimSpace(stmt) != "" {
			if _, err := db.Exec(stmt); err != nil {
				t.Fatalf("DDL from SchemaDDL: %v", err)
			}
		}
	}
	term, err := e.Campaign(ctxFor(t, 10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	resignAll(t, term)
}

func TestUnreachableServer(t *testing.T) {
	t.Parallel()
	db := openDSN(t, "root@tcp(127.0.0.1:1)/nowhere?timeout=1s")
	e := newElector(t, election.GetLock, db, "unreachable", "a")
	_, err := e.Campaign(ctxFor(t, 10*time.Second))
	if err == nil || !strings.Contains(err.Error(), "reaching the server") || !strings.Contains(err.Error(), "connection refused") {
		t.Fatalf("campaign against no server: %v", err)
	}
	// Run keeps trying (the server may come back) until its context ends.
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	err = e.Run(ctx, func(context.Context, *election.Term) error { t.Error("led without a server"); return nil })
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Run against no server returned %v", err)
	}
}

func TestDSNWithoutDatabase(t *testing.T) {
	t.Parallel()
	e := newElector(t, election.GetLock, server.Open(t, ""), "nodb", "a")
	_, err := e.Campaign(ctxFor(t, 10*time.Second))
	if !errors.Is(err, election.ErrInvalidConfig) || !strings.Contains(err.Error(), "names no database") {
		t.Fatalf("campaign without a database: %v", err)
	}
}

func openDSN(t testing.TB, dsn string) *sql.DB {
	db, err := sql.Open("mysql", dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

// Candidates of two strategies never share an election: the second one is
// refused while the first runs, whether it learns of it from the live
// candidates or from the acting term itself; once the election is idle the
// strategy may change.
func TestMixedStrategiesRefused(t *testing.T) {
	t.Parallel()
	for _, first := range strategies {
		second := election.LeaseRow
		if first == election.LeaseRow {
			second = election.GetLock
		}
		t.Run(first.String()+"-then-"+second.String(), func(t *testing.T) {
			t.Parallel()
			db, _ := newDB(t)
			ctx := ctxFor(t, time.Minute)
			a := newElector(t, first, db, "mixed", "a")
			b := newElector(t, second, db, "mixed", "b")
			ta := await(t, campaign(ctx, a), 10*time.Second).term
			if _, err := b.Campaign(ctx); !errors.Is(err, election.ErrStrategy) {
				t.Fatalf("campaign of another strategy beside a live candidate: %v", err)
			}
			// Without the candidate row, the acting term itself refuses.
			if _, err := db.Exec("DELETE FROM election_candidate"); err != nil {
				t.Fatal(err)
			}
			if _, err := b.Campaign(ctx); !errors.Is(err, election.ErrStrategy) || !ta.IsLeader() {
				t.Fatalf("campaign of another strategy beside an acting term: %v (first still leads: %v)", err, ta.IsLeader())
			}
			resignAll(t, ta)
			db.Exec("DELETE FROM election_candidate")
			tb := await(t, campaign(ctx, b), 10*time.Second).term
			if tb.Token() <= ta.Token() {
				t.Fatalf("token %d after %d", tb.Token(), ta.Token())
			}
		})
	}
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

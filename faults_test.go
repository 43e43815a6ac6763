package election_test

import (
	"context"
	"database/sql"
	"errors"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/sqlelect/election"
	"github.com/sqlelect/election/internal/mysqltest"
)

// Candidates in separate processes make fenced writes while they lead; one
// leader at a time, and the fencing invariant holds over every write.
func TestOneLeaderAmongProcesses(t *testing.T) {
	forEachStrategy(t, func(t *testing.T, s election.Strategy) {
		db, dsn := newDB(t)
		createWrites(t, db)
		g := newGroup(t, s, dsn, "procs")
		g.spawn(4)
		seen := map[uint64]string{}
		var last uint64
		for range 3 {
			start := g.next(is("start"), 30*time.Second)
			if start.Token <= last {
				t.Fatalf("token %d after %d", start.Token, last)
			}
			seen[start.Token], last = start.ID, start.Token
			g.next(isFrom("write", start.ID), 10*time.Second)
			g.signal(start.ID, syscall.SIGTERM) // graceful: Run resigns
			g.next(isFrom("exit", start.ID), 10*time.Second)
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
		end := g.next(isFrom("end", first.ID), 10*time.Second)
		if !hasPrefix(end.Reason, election.ErrLeaseExpired, election.ErrSessionLost, election.ErrLockLost) {
			t.Fatalf("resumed leader's term ended with %q", end.Reason)
		}
		// The resumed leader campaigns again and waits; the new leader keeps
		// writing, and no write of the stale term lands after the new term's.
		g.next(isFrom("write", second.ID), 10*time.Second)
		checkWrites(t, db)
	})
}

// leadingGroup starts n candidate processes that make fenced writes, and
// returns once one of them leads and has written.
func leadingGroup(t *testing.T, s election.Strategy, name string, n int) (*sql.DB, *group, event) {
	t.Helper()
	db, dsn := newDB(t)
	createWrites(t, db)
	g := newGroup(t, s, dsn, name)
	g.spawn(n)
	first := g.next(is("start"), 30*time.Second)
	g.next(isFrom("write", first.ID), 10*time.Second)
	return db, g, first
}

// nextLeader waits until another process than old's leads, with a higher
// token, and has written.
func (g *group) nextLeader(old event, limit time.Duration) event {
	g.t.Helper()
	next := g.next(is("start"), limit)
	if next.ID == old.ID || next.Token <= old.Token {
		g.t.Fatalf("after the fault on %s (token %d): %s leads with token %d", old.ID, old.Token, next.ID, next.Token)
	}
	g.next(isFrom("write", next.ID), 10*time.Second)
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
		dbName := server.NewDatabase(t)
		proxied, proxy := viaProxy(t, dbName)
		direct := server.Open(t, dbName)
		ctx := ctxFor(t, time.Minute)
		a := newElector(t, s, proxied, "blackhole", "a")
		b := newElector(t, s, direct, "blackhole", "b")
		ta := await(t, campaign(ctx, a), 10*time.Second).term
		rb := campaign(ctx, b)
		time.Sleep(300 * time.Millisecond) // b waits in GET_LOCK
		proxy.Blackhole()
		r := await(t, rb, 30*time.Second)
		if ta.Err() == nil {
			t.Fatal("the next leader started while the cut-off leader's term still lasted")
		}
		if !errors.Is(ta.Err(), election.ErrLeaseExpired) {
			t.Fatalf("cut-off leader's term ended with %v, want ErrLeaseExpired", ta.Err())
		}
		if r.term.Token() <= ta.Token() {
			t.Fatalf("token %d after %d", r.term.Token(), ta.Token())
		}
		proxy.Restore()
	})
}

// A connection reset between leader and server: under GetLock the pinned
// session is gone, so the term ends at the next keepalive and the other
// candidate leads; under LeaseRow the pool reconnects and the term goes on.
func TestConnectionReset(t *testing.T) {
	forEachStrategy(t, func(t *testing.T, s election.Strategy) {
		dbName := server.NewDatabase(t)
		proxied, proxy := viaProxy(t, dbName)
		ctx := ctxFor(t, time.Minute)
		a := newElector(t, s, proxied, "reset", "a")
		b := newElector(t, s, server.Open(t, dbName), "reset", "b")
		ta := await(t, campaign(ctx, a), 10*time.Second).term
		rb := campaign(ctx, b)
		proxy.Reset()
		if s == election.LeaseRow {
			time.Sleep(3 * fast.Lease)
			if !ta.IsLeader() || ta.Err() != nil || len(rb) != 0 {
				t.Fatalf("a lease term ended on a connection reset: %v", ta.Err())
			}
			return
		}
		r := await(t, rb, 30*time.Second)
		<-ta.Done()
		if !isOneOf(ta.Err(), election.ErrSessionLost, election.ErrLeaseExpired) {
			t.Fatalf("term ended with %v", ta.Err())
		}
		if r.term.Token() <= ta.Token() {
			t.Fatalf("token %d after %d", r.term.Token(), ta.Token())
		}
	})
}

// A lease term lives by its record's renewal. The candidate heartbeat that
// goes with it may fail on its own (a reset connection in the middle of it;
// here, a missing UPDATE grant on the candidates' table): the term goes on.
func TestLeaseTermSurvivesAFailedHeartbeat(t *testing.T) {
	t.Parallel()
	dbName := server.NewDatabase(t)
	ctx := ctxFor(t, time.Minute)
	if err := election.CreateSchema(ctx, server.Open(t, dbName), ""); err != nil {
		t.Fatal(err)
	}
	db := openAsUser(t, dbName, "nohb_"+dbName, "GRANT SELECT, INSERT, DELETE ON `"+dbName+"`.* TO %s")
	admin := server.Open(t, "")
	account := "'nohb_" + dbName + "'@'%'"
	for _, table := range []string{"election_record", "election_epoch", "election_term", "election_candidate"} {
		if _, err := admin.Exec("GRANT UPDATE ON `" + dbName + "`.`" + table + "` TO " + account); err != nil {
			t.Fatal(err)
		}
	}
	cfg := fast
	cfg.Strategy, cfg.Identity, cfg.SkipCreateTables = election.LeaseRow, "a", true
	e, err := election.New(db, "heartbeat", cfg)
	if err != nil {
		t.Fatal(err)
	}
	term, err := e.Campaign(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer term.Resign(ctx)
	if _, err := admin.Exec("REVOKE UPDATE ON `" + dbName + "`.`election_candidate` FROM " + account); err != nil {
		t.Fatal(err)
	}
	time.Sleep(3 * cfg.Lease) // heartbeats are due every Lease/2
	var ageMS int64
	if err := admin.QueryRow("SELECT TIMESTAMPDIFF(MICROSECOND, seen_at, UTC_TIMESTAMP(6)) DIV 1000 FROM `" + dbName +
		"`.election_candidate WHERE identity = 'a'").Scan(&ageMS); err != nil {
		t.Fatal(err)
	}
	if time.Duration(ageMS)*time.Millisecond < 2*cfg.Lease {
		t.Fatalf("the candidate row was renewed %d ms ago: the heartbeats did not fail, the test tests nothing", ageMS)
	}
	if !term.IsLeader() || term.Err() != nil {
		t.Fatalf("the term ended when only its candidate heartbeat failed: %v", term.Err())
	}
}

// KILL CONNECTION of the leader's session: the next candidate leads at once,
// while the old leader still believes it leads until its next keepalive. In
// that window its fenced writes are refused by the database, and the old
// term ends at the keepalive.
func TestKilledSessionIsFenced(t *testing.T) {
	t.Parallel()
	db, _ := newDB(t)
	createWrites(t, db)
	admin := server.Open(t, "")
	ctx := ctxFor(t, time.Minute)
	slow := election.Config{Identity: "a", Interval: 3 * time.Second, Lease: 8 * time.Second, Margin: time.Second}
	a, err := election.New(db, "kill", slow)
	if err != nil {
		t.Fatal(err)
	}
	b := newElector(t, election.GetLock, db, "kill", "b")
	ta := await(t, campaign(ctx, a), 10*time.Second).term
	rec, err := newOperator(t, db, "kill").Leader(ctx)
	if err != nil {
		t.Fatal(err)
	}
	rb := campaign(ctx, b)
	time.Sleep(200 * time.Millisecond)
	killed := time.Now()
	if _, err := admin.Exec("KILL CONNECTION ?", rec.ConnID); err != nil {
		t.Fatal(err)
	}
	tb := await(t, rb, 10*time.Second).term
	if !ta.IsLeader() || time.Since(killed) > 2*time.Second {
		t.Fatal("setup: the killed leader's next keepalive came too soon to test the window")
	}
	err = fencedWrite(ctx, ta, "a")
	var stale *election.StaleTokenError
	if !errors.As(err, &stale) {
		t.Fatalf("fenced write of the killed term: %v, want a StaleTokenError", err)
	}
	if stale.Current != tb.Token() || stale.Cause != nil {
		t.Fatalf("write in the window was not refused by the database: %+v", stale)
	}
	<-ta.Done()
	if !isOneOf(ta.Err(), election.ErrSessionLost, election.ErrLockLost) {
		t.Fatalf("killed term ended with %v", ta.Err())
	}
	if err := fencedWrite(ctx, tb, "b"); err != nil {
		t.Fatal(err)
	}
	if n := checkWrites(t, db); n != 1 {
		t.Fatalf("%d writes, want only the new leader's", n)
	}
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
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{}, 2)
		for _, id := range []string{"a", "b"} {
			e := newElector(t, s, srv.Open(t, dbName), "restart", id)
			go func() {
				defer func() { done <- struct{}{} }()
				e.Run(ctx, func(ctx context.Context, term *election.Term) error {
					if acting.Add(1) != 1 {
						t.Error("two leaders at once")
					}
					defer acting.Add(-1)
					starts <- start{id, term.Token()}
					<-ctx.Done()
					return nil
				})
			}()
		}
		t.Cleanup(func() { cancel(); <-done; <-done })
		first := <-starts
		if err := srv.Kill(); err != nil {
			t.Fatal(err)
		}
		// The leader's term ends (session lost or lease expired) and nobody
		// leads while the server is down.
		deadline := time.Now().Add(10 * time.Second)
		for acting.Load() != 0 {
			if time.Now().After(deadline) {
				t.Fatal("the leader still acts 10s after the server died")
			}
			time.Sleep(20 * time.Millisecond)
		}
		time.Sleep(3 * time.Second)
		if acting.Load() != 0 || len(starts) != 0 {
			t.Fatal("a term started while the server was down")
		}
		if err := srv.Boot(ctxFor(t, time.Minute)); err != nil {
			t.Fatal(err)
		}
		select {
		case next := <-starts:
			if next.token <= first.token {
				t.Fatalf("token %d after restart, %d before", next.token, first.token)
			}
		case <-time.After(30 * time.Second):
			t.Fatal("no leader within 30s of the restart")
		}
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
		if tb.Token() <= ta.Token() {
			t.Fatalf("token %d after %d", tb.Token(), ta.Token())
		}
		var stuck int
		db.QueryRow("SELECT COUNT(*) FROM writes WHERE holder = 'stuck'").Scan(&stuck)
		if stuck != 0 {
			t.Fatal("the stuck leader's write committed")
		}
	})
}

package election_test

import (
	"context"
	"database/sql"
	"syscall"
	"testing"
	"time"

	"github.com/sqlelect/election"
	"github.com/sqlelect/election/internal/mysqltest"
)

// steppedGroup starts a private server whose clock the test steps, and n
// candidate processes of election name on a fresh database of it, making
// fenced writes; it returns once one of them leads and has written.
func steppedGroup(t *testing.T, s election.Strategy, name string, n int) (*mysqltest.Server, *sql.DB, *group, event) {
	t.Helper()
	if s == election.GetLock {
		needGetLock(t)
	}
	if onTiDB {
		t.Skip("the server's clock is stepped on a private MariaDB, in the MariaDB pass")
	}
	if mysqltest.PrivateBinary() == "" || mysqltest.FaketimeLib() == "" {
		t.Skip("needs mariadbd and Debian's faketime package (scripts/test.sh installs both)")
	}
	srv, err := mysqltest.StartSteppable(ctxFor(t, 2*time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Close)
	dbName := srv.NewDatabase(t)
	db := srv.Open(t, dbName)
	createWrites(t, db)
	g := newGroup(t, s, srv.DSN(dbName), name)
	g.spawn(n)
	first := g.Next(is("start"), 30*time.Second)
	g.Next(isFrom("write", first.ID), 10*time.Second)
	return srv, db, g, first
}

// stepClock steps srv's clock to offset from real time, and leaves it
// there for hold.
func stepClock(t *testing.T, srv *mysqltest.Server, offset, hold time.Duration) {
	t.Helper()
	if err := srv.StepClock(offset); err != nil {
		t.Fatal(err)
	}
	time.Sleep(hold)
}

// Steps of the database server's clock, forward and back, by seconds and a
// minute, a sawtooth and a strobe, end no healthy leader's term: waiters
// judge the leader by their own clock, not by the age of its renewal on
// the server's (under LeaseRow a step forward made the renewal look stale
// and a waiter took the lease; under GetLock the deputy killed the leader
// as hung).
func TestClockStepsDeposeNoLeader(t *testing.T) {
	forEachStrategy(t, func(t *testing.T, s election.Strategy) {
		srv, db, g, first := steppedGroup(t, s, "steps", 3)
		for _, offset := range []time.Duration{10 * time.Second, 0, time.Minute, 0, -10 * time.Second, 0, -time.Minute, 0} {
			stepClock(t, srv, offset, time.Second)
		}
		for range 5 { // a sawtooth
			stepClock(t, srv, 10*time.Second, 400*time.Millisecond)
			stepClock(t, srv, 0, 400*time.Millisecond)
		}
		for range 15 { // a strobe
			stepClock(t, srv, 5*time.Second, 100*time.Millisecond)
			stepClock(t, srv, 0, 100*time.Millisecond)
		}
		g.Next(isFrom("write", first.ID), 10*time.Second)
		for _, e := range g.All() {
			switch {
			case e.Ev == "start" && e.Token != first.Token:
				t.Errorf("%s began term %d while %s led, healthy: the steps deposed it", e.ID, e.Token, first.ID)
			case e.Ev == "end" && e.ID == first.ID:
				t.Errorf("the healthy leader's term ended: %s", e.Reason)
			}
		}
		checkWrites(t, db)
	})
}

// A step of the database server's clock back, and the leader SIGKILLed at
// once: the next leader is not held back by the step (under LeaseRow it
// waited for the dead leader's renewal, stamped a minute ahead, to age);
// the step forward again deposes nobody; and the history stays in order:
// no term starts before the one it followed ended, none ends before it
// started, and a resigned term carries its leader's own measure.
func TestClockStepBackHoldsNoFailover(t *testing.T) {
	forEachStrategy(t, func(t *testing.T, s election.Strategy) {
		const back = time.Minute
		srv, db, g, first := steppedGroup(t, s, "back", 3)
		stepClock(t, srv, -back, 0)
		killed := time.Now()
		g.signal(first.ID, syscall.SIGKILL)
		second := g.nextLeader(first, back)
		took := second.Time().Sub(killed)
		t.Logf("%v: the next leader began %v after the SIGKILL, the clock stepped back by %v", s, took.Round(time.Millisecond), back)
		if took > back/2 {
			t.Errorf("the failover took %v: held back by the step of %v", took, back)
		}
		stepClock(t, srv, 0, 2*time.Second) // forward again, by a minute
		g.signal(second.ID, syscall.SIGTERM)
		third := g.nextLeader(second, 30*time.Second)
		for _, e := range g.All() {
			if e.Ev == "start" && e.Token > third.Token {
				t.Errorf("%s began term %d after %s's: the step forward deposed it", e.ID, e.Token, third.ID)
			}
		}
		checkWrites(t, db)
		ops := newOperatorWith(t, db, "back", fast)
		hist := assertHistoryInOrder(t, ops)
		for _, h := range hist {
			if h.Token == second.Token && (h.Lasted <= 0 || h.Lasted > time.Since(killed)) {
				t.Errorf("term %d, resigned, lasted %v by its leader's clock", h.Token, h.Lasted)
			}
		}
	})
}

// assertHistoryInOrder fails the test unless the history of ops's
// election is in order on its own times: every term starts no earlier than
// the one before it ended and ends no earlier than it started, and only
// the newest may still go on. It returns the history, oldest first.
func assertHistoryInOrder(t *testing.T, ops *election.Operator) []election.TermRecord {
	t.Helper()
	hist, err := ops.History(context.Background(), 0)
	if err != nil {
		t.Fatal(err)
	}
	for i, j := 0, len(hist)-1; i < j; i, j = i+1, j-1 {
		hist[i], hist[j] = hist[j], hist[i]
	}
	for i, h := range hist {
		if h.Ended.IsZero() {
			if i != len(hist)-1 {
				t.Errorf("term %d goes on, but term %d followed it", h.Token, hist[i+1].Token)
			}
			continue
		}
		if h.Ended.Before(h.Started) {
			t.Errorf("term %d ended %v before it started", h.Token, h.Started.Sub(h.Ended))
		}
		if i+1 < len(hist) && hist[i+1].Started.Before(h.Ended) {
			t.Errorf("term %d started %v before term %d, which it followed, ended", hist[i+1].Token, h.Ended.Sub(hist[i+1].Started), h.Token)
		}
	}
	return hist
}

// A one-shot try (TryRun, electctl run --nonblock: a cron job, a process
// that has just started) of a lease whose leader crashed long enough ago
// for the server's clock to call it over, but which the try's process has
// never watched, watches it for the lease and margin it shows, then takes
// it: refused for good, every later cron run would find the election held
// by the dead leader; taken on the server's clock at first sight, a step of
// that clock forward would depose a healthy leader.
func TestTryRunTakesALeaseItDidNotWatch(t *testing.T) {
	db, g, first := leadingGroup(t, election.LeaseRow, "cron", 1)
	g.signal(first.ID, syscall.SIGKILL)
	time.Sleep(fast.Lease + fast.Margin + fast.Interval) // over, by the server's clock
	fresh := openDSN(t, g.dsn)                           // a new process's pool: no watch of the server's clock yet
	cfg := fast
	cfg.Strategy, cfg.Identity = election.LeaseRow, "cron-2"
	e := newElectorWith(t, fresh, "cron", cfg)
	began := time.Now()
	var token uint64
	err := e.TryRun(ctxFor(t, time.Minute), 0, func(ctx context.Context, term *election.Term) error {
		token = term.Token()
		return nil
	})
	if err != nil {
		t.Fatalf("TryRun after the leader crashed: %v", err)
	}
	t.Logf("the try led after %v, with token %d", time.Since(began).Round(time.Millisecond), token)
	assertTokenAfter(t, token, first.Token)
	checkWrites(t, db)
}

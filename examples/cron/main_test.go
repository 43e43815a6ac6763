package main

import (
	"database/sql"
	"errors"
	"os/exec"
	"syscall"
	"testing"
	"time"

	"github.com/sqlelect/election"
	"github.com/sqlelect/election/examples/internal/exampletest"
)

// With CRON_MAIN set, the binary is an instance that TestCron started.
func TestMain(m *testing.M) { exampletest.Main(m, "CRON_MAIN", main) }

// every is the test schedule's period; each job takes work of it, inside
// its transaction, so that a kill lands mid-job.
const (
	every = 300 * time.Millisecond
	work  = 200 * time.Millisecond
)

// Three instances; the leader is SIGKILLed in the middle of a job while
// the other two are paused (SIGSTOP), and they resume two periods later.
// Every period from the first to the last is done exactly once: no gap
// (the period in flight at the kill, and those that began while nobody
// led, are caught up by the next leader) and no duplicate, in the record
// and in the job's own writes; and in period order the tokens never go
// down.
func TestCron(t *testing.T) {
	ctx := t.Context()
	db, dsn := newDatabase(t)
	instances := map[string]*exec.Cmd{}
	for _, id := range []string{"cron-1", "cron-2", "cron-3"} {
		// -for makes an instance stop on its own should SIGTERM never come.
		instances[id] = exampletest.Start(t, "CRON_MAIN", dsn, "-id", id,
			"-every", every.String(), "-work", work.String(), "-catchup", "1m", "-for", "1m")
	}
	observer, err := election.NewOperator(db, "cron", election.Config{})
	if err != nil {
		t.Fatal(err)
	}
	leader := exampletest.WaitLeader(t, observer, 0)
	killed := instances[leader.Identity]
	if killed == nil {
		t.Fatalf("%s leads, which this test did not start: does another cron instance use $ELECTION_DSN?", leader.Identity)
	}
	delete(instances, leader.Identity)
	waitPeriods(t, db, leader.Token, 3)
	for _, cmd := range instances {
		cmd.Process.Signal(syscall.SIGSTOP)
	}
	inFlight := waitJobInFlight(t, db)
	killed.Process.Kill()
	killed.Wait()
	t.Logf("killed the leader %s (token %d) in the job of period %s", leader.Identity, leader.Token, stamp(time.UnixMilli(inFlight)))
	// Nobody leads until the period after next has begun.
	time.Sleep(time.Until(time.UnixMilli(inFlight).Add(2 * every)))
	for _, cmd := range instances {
		cmd.Process.Signal(syscall.SIGCONT)
	}
	next := exampletest.WaitLeader(t, observer, leader.Token)
	waitPeriods(t, db, next.Token, 3)
	for _, cmd := range instances {
		cmd.Process.Signal(syscall.SIGTERM)
	}
	for id, cmd := range instances {
		if err := cmd.Wait(); err != nil {
			t.Errorf("%s did not stop cleanly on SIGTERM: %v", id, err)
		}
	}

	runs := readRuns(t, db)
	t.Logf("%d periods done, from %s to %s", len(runs), runs[0], runs[len(runs)-1])
	byKilled, byLater := 0, 0
	for i, r := range runs {
		switch {
		case r.token == leader.Token:
			byKilled++
		case r.token > leader.Token:
			byLater++
		}
		if i == 0 {
			continue
		}
		prev := runs[i-1]
		if r.period != prev.period+every.Milliseconds() {
			t.Errorf("period %s follows period %s: %d missing between them", r, prev, (r.period-prev.period)/every.Milliseconds()-1)
		}
		if r.token < prev.token {
			t.Errorf("period %s has token %d after period %s with token %d: an older term did a later period", r, r.token, prev, prev.token)
		}
	}
	if byKilled < 3 || byLater < 3 {
		t.Errorf("want 3 or more periods done by the killed leader and by later ones, got %d and %d", byKilled, byLater)
	}
	inFlightDone := false
	for _, r := range runs {
		if r.period == inFlight {
			inFlightDone = true
			if r.token <= leader.Token {
				t.Errorf("period %s, in flight at the kill, was committed with token %d: the kill came after the commit, not mid-job", r, r.token)
			}
		}
	}
	if !inFlightDone {
		t.Errorf("period %s, in flight at the kill, was never done", stamp(time.UnixMilli(inFlight)))
	}

	var reports, periods, matching int
	err = db.QueryRowContext(ctx, `SELECT COUNT(*), COUNT(DISTINCT r.period_start), COALESCE(SUM(r.token = c.token), 0)
		FROM cron_report r LEFT JOIN cron_runs c ON c.period_start = r.period_start`).Scan(&reports, &periods, &matching)
	if err != nil {
		t.Fatal(err)
	}
	if reports != len(runs) || periods != len(runs) || matching != len(runs) {
		t.Errorf("want one report row per period done, by the term that marked it; got %d rows for %d periods, %d by that term, %d periods done",
			reports, periods, matching, len(runs))
	}
}

// Which periods are due: the current one on a new table; those after the
// last one done; but none more than catchUp before the current one.
func TestDue(t *testing.T) {
	db, _ := newDatabase(t)
	s := schedule{every: time.Minute, catchUp: 3 * time.Minute}
	now := time.Date(2026, 11, 22, 6, 3, 18, 0, time.UTC)
	current := time.Date(2026, 11, 22, 6, 3, 0, 0, time.UTC)
	periods := func(from, n int) []time.Time {
		var ps []time.Time
		for i := range n {
			ps = append(ps, current.Add(time.Duration(from+i)*time.Minute))
		}
		return ps
	}
	for _, tc := range []struct {
		name string
		done []int // the periods done, in minutes from the current one
		want []time.Time
	}{
		{"a new table: the current period", nil, periods(0, 1)},
		{"the current period done: nothing", []int{-1, 0}, nil},
		{"the previous period done: the current one", []int{-2, -1}, periods(0, 1)},
		{"two missed: both, then the current one", []int{-3}, periods(-2, 3)},
		{"more missed than catchUp: those within catchUp, then the current one", []int{-10}, periods(-3, 4)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := db.ExecContext(t.Context(), "DELETE FROM cron_runs"); err != nil {
				t.Fatal(err)
			}
			for _, m := range tc.done {
				p := current.Add(time.Duration(m) * time.Minute)
				if _, err := db.ExecContext(t.Context(), "INSERT INTO cron_runs VALUES (?, 1, UTC_TIMESTAMP(6))", p.UnixMilli()); err != nil {
					t.Fatal(err)
				}
			}
			got, err := s.due(t.Context(), db, now)
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != len(tc.want) {
				t.Fatalf("due %v, want %v", got, tc.want)
			}
			for i := range got {
				if !got[i].Equal(tc.want[i]) {
					t.Fatalf("due %v, want %v", got, tc.want)
				}
			}
		})
	}
}

// A period is done once: a second attempt finds its key taken and skips
// the job; a term that has ended writes nothing.
func TestRunPeriodOnce(t *testing.T) {
	ctx := t.Context()
	db, _ := newDatabase(t)
	e, err := election.New(db, "cron", election.Config{Identity: "test"})
	if err != nil {
		t.Fatal(err)
	}
	term, err := e.Campaign(ctx)
	if err != nil {
		t.Fatal(err)
	}
	s := schedule{every: time.Minute}
	p := time.Now().Truncate(s.every)
	if err := s.runPeriod(ctx, term, p); err != nil {
		t.Fatalf("first attempt: %v", err)
	}
	if err := s.runPeriod(ctx, term, p); !errors.Is(err, errDone) {
		t.Fatalf("second attempt: %v, want errDone", err)
	}
	if err := term.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	if err := s.runPeriod(ctx, term, p.Add(s.every)); !errors.Is(err, election.ErrFenced) {
		t.Fatalf("attempt after the term ended: %v, want ErrFenced", err)
	}
	var runs, reports int
	if err := db.QueryRowContext(ctx, "SELECT (SELECT COUNT(*) FROM cron_runs), (SELECT COUNT(*) FROM cron_report)").Scan(&runs, &reports); err != nil {
		t.Fatal(err)
	}
	if runs != 1 || reports != 1 {
		t.Fatalf("%d periods marked done and %d report rows, want 1 and 1", runs, reports)
	}
}

// newDatabase returns a pool on a database for the example, and its DSN,
// with the example's tables new and empty: a database from $ELECTION_DSN
// may hold an earlier test's.
func newDatabase(t *testing.T) (*sql.DB, string) {
	t.Helper()
	dsn := exampletest.Database(t, "cron")
	db := exampletest.Open(t, dsn)
	if _, err := db.ExecContext(t.Context(), "DROP TABLE IF EXISTS cron_runs, cron_report"); err != nil {
		t.Fatal(err)
	}
	if err := setup(t.Context(), db); err != nil {
		t.Fatal(err)
	}
	return db, dsn
}

// waitPeriods waits until n periods or more are done with a token of at
// least token.
func waitPeriods(t *testing.T, db *sql.DB, token uint64, n int) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		var done int
		err := db.QueryRowContext(t.Context(), "SELECT COUNT(*) FROM cron_runs WHERE token >= ?", token).Scan(&done)
		if err == nil && done >= n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d periods done with a token of %d or more after 30s, want %d (last error: %v)", done, token, n, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// waitJobInFlight waits until a job is under way, and returns its period:
// its key is written but not committed. A dirty read (READ UNCOMMITTED)
// sees the key; a committed read that follows it does not.
func waitJobInFlight(t *testing.T, db *sql.DB) int64 {
	t.Helper()
	// A transaction, so that the isolation level does not outlive it on a
	// pool session.
	dirty, err := db.BeginTx(t.Context(), &sql.TxOptions{Isolation: sql.LevelReadUncommitted, ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer dirty.Rollback()
	const query = "SELECT COALESCE(MAX(period_start), 0) FROM cron_runs"
	deadline := time.Now().Add(30 * time.Second)
	for {
		var written, committed int64
		if err := dirty.QueryRowContext(t.Context(), query).Scan(&written); err != nil {
			t.Fatal(err)
		}
		if err := db.QueryRowContext(t.Context(), query).Scan(&committed); err != nil {
			t.Fatal(err)
		}
		if written > committed {
			return written
		}
		if time.Now().After(deadline) {
			t.Fatal("no job under way within 30s")
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// periodDone is one period done, as cron_runs records it.
type periodDone struct {
	period int64 // its start, Unix milliseconds
	token  uint64
}

// String names the period by its start.
func (r periodDone) String() string { return stamp(time.UnixMilli(r.period)) }

// readRuns returns the periods done, in period order.
func readRuns(t *testing.T, db *sql.DB) []periodDone {
	t.Helper()
	rows, err := db.QueryContext(t.Context(), "SELECT period_start, token FROM cron_runs ORDER BY period_start")
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var runs []periodDone
	for rows.Next() {
		var r periodDone
		if err := rows.Scan(&r.period, &r.token); err != nil {
			t.Fatal(err)
		}
		runs = append(runs, r)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if len(runs) == 0 {
		t.Fatal("no period done")
	}
	return runs
}

package main

import (
	"os/exec"
	"syscall"
	"testing"
	"time"

	"github.com/sqlelect/election"
	"github.com/sqlelect/election/examples/internal/exampletest"
)

// With CRON_MAIN set, the binary is an instance that TestCron started.
func TestMain(m *testing.M) { exampletest.Main(m, "CRON_MAIN", main) }

// Three instances; the leader is SIGKILLed once. The job must run before
// and after the kill, and never under two leaders at once: in the order
// runs were recorded, tokens never go down.
func TestCron(t *testing.T) {
	ctx := t.Context()
	dsn := exampletest.Database(t, "cron")
	db := exampletest.Open(t, dsn)
	// A database from $ELECTION_DSN may hold the runs of an earlier test.
	if _, err := db.ExecContext(ctx, "DROP TABLE IF EXISTS cron_runs"); err != nil {
		t.Fatal(err)
	}

	instances := map[string]*exec.Cmd{}
	for _, id := range []string{"cron-1", "cron-2", "cron-3"} {
		// -for makes an instance stop on its own should SIGTERM never come.
		instances[id] = exampletest.Start(t, "CRON_MAIN", dsn, "-id", id, "-every", "200ms", "-for", "1m")
	}
	observer, err := election.NewOperator(db, "cron", election.Config{})
	if err != nil {
		t.Fatal(err)
	}
	leader := exampletest.WaitLeader(t, observer, 0)
	time.Sleep(3 * time.Second)
	t.Logf("killing the leader %s (token %d)", leader.Identity, leader.Token)
	killed := instances[leader.Identity]
	if killed == nil {
		t.Fatalf("%s leads, which this test did not start: does another cron instance use $ELECTION_DSN?", leader.Identity)
	}
	killed.Process.Kill()
	killed.Wait()
	delete(instances, leader.Identity)
	var killedAt string // on the database clock, as ran_at
	if err := db.QueryRowContext(ctx, "SELECT UTC_TIMESTAMP(6)").Scan(&killedAt); err != nil {
		t.Fatal(err)
	}
	next := exampletest.WaitLeader(t, observer, leader.Token)
	t.Logf("%s leads with token %d", next.Identity, next.Token)
	time.Sleep(3 * time.Second)
	for _, cmd := range instances {
		cmd.Process.Signal(syscall.SIGTERM)
	}
	for id, cmd := range instances {
		if err := cmd.Wait(); err != nil {
			t.Errorf("%s did not stop cleanly on SIGTERM: %v", id, err)
		}
	}

	var before, after int
	err = db.QueryRowContext(ctx, "SELECT COALESCE(SUM(ran_at < ?), 0), COALESCE(SUM(ran_at > ?), 0) FROM cron_runs", killedAt, killedAt).Scan(&before, &after)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%d runs before the kill, %d after", before, after)
	if before == 0 || after == 0 {
		t.Errorf("want runs both before and after the kill, got %d and %d", before, after)
	}
	rows, err := db.QueryContext(ctx, "SELECT id, token FROM cron_runs ORDER BY id")
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	tokens := map[uint64]bool{}
	var last uint64
	for rows.Next() {
		var id, token uint64
		if err := rows.Scan(&id, &token); err != nil {
			t.Fatal(err)
		}
		if token < last {
			t.Errorf("run %d has token %d after a run with token %d: two leaders ran the job", id, token, last)
		}
		last = token
		tokens[token] = true
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if len(tokens) < 2 {
		t.Errorf("want runs of at least 2 terms, got tokens %v", tokens)
	}
}

package main

import (
	"database/sql"
	"os/exec"
	"syscall"
	"testing"
	"time"

	"github.com/sqlelect/election"
	"github.com/sqlelect/election/examples/internal/exampletest"
)

// With QUEUE_MAIN set, the binary is a consumer that TestQueue started.
func TestMain(m *testing.M) { exampletest.Main(m, "QUEUE_MAIN", main) }

// Three consumers work off 200 jobs; the leader is SIGKILLed midway. Every
// job must be done exactly once: marked done, with one row in the log,
// written by the term that marked it.
func TestQueue(t *testing.T) {
	const jobs = 200
	ctx := t.Context()
	dsn := exampletest.Database(t, "queue")
	db := exampletest.Open(t, dsn)
	// A database from $ELECTION_DSN may hold the jobs of an earlier test.
	if _, err := db.ExecContext(ctx, "DROP TABLE IF EXISTS jobs, job_log"); err != nil {
		t.Fatal(err)
	}
	if err := setup(ctx, db); err != nil {
		t.Fatal(err)
	}
	if err := enqueue(ctx, db, jobs); err != nil {
		t.Fatal(err)
	}

	consumers := map[string]*exec.Cmd{}
	for _, id := range []string{"queue-1", "queue-2", "queue-3"} {
		consumers[id] = exampletest.Start(t, "QUEUE_MAIN", dsn, "-id", id, "-work", "10ms")
	}
	observer, err := election.NewOperator(db, "queue", election.Config{})
	if err != nil {
		t.Fatal(err)
	}
	leader := exampletest.WaitLeader(t, observer, 0)
	waitDone(t, db, jobs/4)
	t.Logf("killing the leader %s (token %d)", leader.Identity, leader.Token)
	killed := consumers[leader.Identity]
	if killed == nil {
		t.Fatalf("%s leads, which this test did not start: does another queue consumer use $ELECTION_DSN?", leader.Identity)
	}
	killed.Process.Kill()
	killed.Wait()
	delete(consumers, leader.Identity)
	waitDone(t, db, jobs)
	for _, cmd := range consumers {
		cmd.Process.Signal(syscall.SIGTERM)
	}
	for id, cmd := range consumers {
		if err := cmd.Wait(); err != nil {
			t.Errorf("%s did not stop cleanly on SIGTERM: %v", id, err)
		}
	}

	var logged, distinct, matching, byKilled, byLater int
	err = db.QueryRowContext(ctx, `SELECT COUNT(*), COUNT(DISTINCT l.job_id),
		COALESCE(SUM(l.token = j.done_by_token), 0),
		COALESCE(SUM(l.token = ?), 0), COALESCE(SUM(l.token > ?), 0)
		FROM job_log l LEFT JOIN jobs j ON j.id = l.job_id`, leader.Token, leader.Token).
		Scan(&logged, &distinct, &matching, &byKilled, &byLater)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%d jobs done by the killed leader, %d by later ones", byKilled, byLater)
	if logged != jobs || distinct != jobs || matching != jobs {
		t.Errorf("want %d log rows, one per job, each by the term that marked the job done; got %d rows for %d jobs, %d by that term",
			jobs, logged, distinct, matching)
	}
	if byKilled == 0 || byLater == 0 {
		t.Errorf("want jobs done both before and after the failover, got %d and %d", byKilled, byLater)
	}
}

// waitDone waits until at least n jobs are marked done.
func waitDone(t *testing.T, db *sql.DB, n int) {
	deadline := time.Now().Add(45 * time.Second)
	for {
		var done int
		err := db.QueryRowContext(t.Context(), "SELECT COUNT(*) FROM jobs WHERE done_by_token IS NOT NULL").Scan(&done)
		if err == nil && done >= n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d jobs done after 45s, want %d (last error: %v)", done, n, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

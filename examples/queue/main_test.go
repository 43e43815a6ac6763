package main

import (
	"database/sql"
	"fmt"
	"os/exec"
	"syscall"
	"testing"
	"time"

	"github.com/sqlelect/election"
	"github.com/sqlelect/election/examples/internal/exampletest"
)

// With QUEUE_MAIN set, the binary is a consumer that TestQueue started.
func TestMain(m *testing.M) { exampletest.Main(m, "QUEUE_MAIN", main) }

// Three consumers work off 300 jobs. The leader is paused (SIGSTOP) until
// another leads, then resumed: its late completion must be refused. The
// next leader is SIGKILLed. Every job must be done exactly once: marked
// done, with one row in the log, written by the term whose claim stood.
func TestQueue(t *testing.T) {
	const jobs = 300
	ctx := t.Context()
	dsn, db := emptyQueue(t)
	if err := enqueue(ctx, db, jobs, 1); err != nil {
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
	consumer := func(r election.Record) *exec.Cmd {
		cmd := consumers[r.Identity]
		if cmd == nil {
			t.Fatalf("%s leads, which this test did not start: does another queue consumer use $ELECTION_DSN?", r.Identity)
		}
		return cmd
	}
	paused := exampletest.WaitLeader(t, observer, 0)
	waitDone(t, db, jobs/4)
	t.Logf("pausing the leader %s (token %d) until another leads", paused.Identity, paused.Token)
	consumer(paused).Process.Signal(syscall.SIGSTOP)
	killed := exampletest.WaitLeader(t, observer, paused.Token)
	consumer(paused).Process.Signal(syscall.SIGCONT)
	waitDone(t, db, jobs/2)
	t.Logf("killing the leader %s (token %d)", killed.Identity, killed.Token)
	consumer(killed).Process.Kill()
	consumer(killed).Wait()
	delete(consumers, killed.Identity)
	waitDone(t, db, jobs)
	stopAll(t, consumers)

	terms := doneOnce(t, db, jobs)
	if terms < 3 {
		t.Errorf("want jobs done by the paused leader, the killed one and the last; got %d terms", terms)
	}
}

// Three consumers share a queue of 8 partitions, one shard each
// (-shards 8): all three consume, each within its share (3 shards). One is
// SIGKILLed while every partition has jobs left; the others take its
// shards, and every job is still done exactly once, by the term of its
// partition's shard whose claim stood.
func TestShardedQueue(t *testing.T) {
	const jobs, shards = 800, 8
	ctx := t.Context()
	dsn, db := emptyQueue(t)
	consumers := map[string]*exec.Cmd{}
	for _, id := range []string{"queue-1", "queue-2", "queue-3"} {
		consumers[id] = exampletest.Start(t, "QUEUE_MAIN", dsn, "-id", id, "-work", "50ms", "-shards", fmt.Sprint(shards))
	}
	owners := func() map[string]int {
		recs, _ := election.Elections(ctx, db, "")
		by := map[string]int{}
		for _, r := range recs {
			if _, ok := election.ShardOf("queue", r.Name); ok && r.Leading() {
				by[r.Identity]++
			}
		}
		return by
	}
	deadline := time.Now().Add(45 * time.Second)
	for by := owners(); len(by) != 3 || by["queue-1"]+by["queue-2"]+by["queue-3"] != shards ||
		by["queue-1"] > 3 || by["queue-2"] > 3 || by["queue-3"] > 3; by = owners() {
		if time.Now().After(deadline) {
			t.Fatalf("the 8 shards did not spread over the three consumers, at most 3 each: %v", by)
		}
		time.Sleep(20 * time.Millisecond)
	}
	// The jobs come once the shards have spread: 100 per partition, 5 s of
	// work each, so that every partition has jobs left when one consumer
	// dies.
	if err := enqueue(ctx, db, jobs, shards); err != nil {
		t.Fatal(err)
	}
	waitDone(t, db, jobs/8)
	var left int
	if err := db.QueryRowContext(ctx, "SELECT COUNT(DISTINCT part) FROM jobs WHERE state <> 'done'").Scan(&left); err != nil || left != shards {
		t.Fatalf("%d partitions have jobs left (%v), want all %d: enqueue more, or longer jobs", left, err, shards)
	}
	killed := owners()["queue-1"]
	t.Logf("killing queue-1, which owns %d shards", killed)
	consumers["queue-1"].Process.Kill()
	consumers["queue-1"].Wait()
	delete(consumers, "queue-1")
	waitDone(t, db, jobs)
	stopAll(t, consumers)
	if terms := doneOnce(t, db, jobs); terms < shards+killed {
		t.Errorf("want jobs done by a term per shard and a later one per shard of queue-1; got %d terms", terms)
	}
}

// A job may take longer than the lease: no transaction stays open while it
// runs. (Done inside a fenced transaction, a job longer than Lease+Margin
// loses its session to wait_timeout, and is tried again and again.)
func TestQueueJobLongerThanTheLease(t *testing.T) {
	const long = election.DefaultLease + election.DefaultMargin + time.Second
	ctx := t.Context()
	dsn, db := emptyQueue(t)
	if err := enqueue(ctx, db, 1, 1); err != nil {
		t.Fatal(err)
	}
	cmd := exampletest.Start(t, "QUEUE_MAIN", dsn, "-id", "long", "-work", long.String())
	waitDone(t, db, 1)
	cmd.Process.Signal(syscall.SIGTERM)
	if err := cmd.Wait(); err != nil {
		t.Errorf("the consumer did not stop cleanly on SIGTERM: %v", err)
	}
	var attempts int
	if err := db.QueryRowContext(ctx, "SELECT attempts FROM jobs").Scan(&attempts); err != nil {
		t.Fatal(err)
	}
	if attempts != 1 {
		t.Errorf("the %v job took %d attempts, want 1", long, attempts)
	}
}

// stopAll sends SIGTERM to every consumer, and fails the test unless each
// stops cleanly.
func stopAll(t *testing.T, consumers map[string]*exec.Cmd) {
	t.Helper()
	for _, cmd := range consumers {
		cmd.Process.Signal(syscall.SIGTERM)
	}
	for id, cmd := range consumers {
		if err := cmd.Wait(); err != nil {
			t.Errorf("%s did not stop cleanly on SIGTERM: %v", id, err)
		}
	}
}

// doneOnce fails the test unless each of the jobs was done exactly once:
// marked done, with one row in the log, written by the term whose claim
// stood. It returns how many terms did jobs (a term is a partition's token).
func doneOnce(t *testing.T, db *sql.DB, jobs int) (terms int) {
	t.Helper()
	var logged, distinct, matching, retried int
	err := db.QueryRowContext(t.Context(), `SELECT COUNT(*), COUNT(DISTINCT l.job_id),
		COALESCE(SUM(l.token = j.claimed_token AND j.state = 'done'), 0), COUNT(DISTINCT j.part, l.token),
		(SELECT COUNT(*) FROM jobs WHERE attempts > 1)
		FROM job_log l LEFT JOIN jobs j ON j.id = l.job_id`).
		Scan(&logged, &distinct, &matching, &terms, &retried)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%d jobs done by %d terms; %d claimed again after a failover", logged, terms, retried)
	if logged != jobs || distinct != jobs || matching != jobs {
		t.Errorf("want %d log rows, one per job, each by the term whose claim marked the job done; got %d rows for %d jobs, %d by that term",
			jobs, logged, distinct, matching)
	}
	return terms
}

// waitDone waits until at least n jobs are marked done.
func waitDone(t *testing.T, db *sql.DB, n int) {
	deadline := time.Now().Add(45 * time.Second)
	for {
		var done int
		err := db.QueryRowContext(t.Context(), "SELECT COUNT(*) FROM jobs WHERE state = 'done'").Scan(&done)
		if err == nil && done >= n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d jobs done after 45s, want %d (last error: %v)", done, n, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// emptyQueue returns the DSN of a database with empty queue tables, and a
// pool on it. A database from $ELECTION_DSN may hold an earlier test's jobs.
func emptyQueue(t *testing.T) (string, *sql.DB) {
	t.Helper()
	dsn := exampletest.Database(t, "queue")
	db := exampletest.Open(t, dsn)
	if _, err := db.ExecContext(t.Context(), "DROP TABLE IF EXISTS jobs, job_log"); err != nil {
		t.Fatal(err)
	}
	if err := setup(t.Context(), db); err != nil {
		t.Fatal(err)
	}
	return dsn, db
}

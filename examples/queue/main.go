// Command queue consumes a job queue on exactly one of its instances: the
// leader of the election "queue". The others stand by and take over when
// it dies or steps down.
//
//	go run ./examples/queue -id a -enqueue 50   # prints the ELECTION_DSN of its private MariaDB
//	ELECTION_DSN='root@tcp(127.0.0.1:PORT)/queue' go run ./examples/queue -id b
//
// The leader takes the jobs in order, each in three steps:
//
//  1. claim: the oldest job not done is marked claimed by the term's
//     fencing token, in a short fenced transaction (Term.Fenced);
//  2. work: the job is done outside any transaction, so a job may take
//     longer than the lease (a fenced transaction must not stay open that
//     long: its session has the candidates' wait_timeout, Lease+Margin);
//  3. complete: the job is marked done and its result written, in a second
//     fenced transaction, only if this term's claim still stands.
//
// So every job is marked done, and its result written, exactly once, by
// the term that claimed it last: a stale leader (paused, cut off, killed
// mid-job) commits nothing, and the next leader claims the job again. The
// work itself, when it writes somewhere else, can run twice for a job whose
// leader died between claim and complete: make its effects idempotent (key
// them by the job's id) or send the token along for the other store to
// check (election.Fence).
//
// With -shards N the queue is partitioned (job i in partition i mod N)
// and every instance is a member of a group of N shards
// (election.Shards): each partition is consumed by the owner of its shard,
// with that shard's term, and the shards spread evenly over the instances.
// Every instance must be given the same N.
//
//	go run ./examples/queue -id a -shards 8 -enqueue 200
//	ELECTION_DSN=... go run ./examples/queue -id b -shards 8
//	ELECTION_DSN=... go run ./examples/queue -id c -shards 8
//	ELECTION_DSN=... electctl shards queue     # who consumes which partition
//
// Kill the instance that does the jobs (Ctrl-C, or kill -9) and watch the
// other carry on where it stopped. Without $ELECTION_DSN an instance starts
// a private throwaway MariaDB from the mariadbd on PATH; with it,
// $ELECTION_DSN must name a database.
package main

import (
	"context"
	"database/sql"
	"errors"
	"flag"
	"fmt"
	"log"
	"os"
	"os/signal"
	"syscall"
	"time"

	_ "github.com/go-sql-driver/mysql" // the "mysql" driver

	"github.com/sqlelect/election"
	"github.com/sqlelect/election/examples/internal/exampledb"
)

// schema is the queue and the log of completed jobs, which stands for
// whatever a job writes in the database.
var schema = []string{
	`CREATE TABLE IF NOT EXISTS jobs (
		id            BIGINT AUTO_INCREMENT PRIMARY KEY,
		part          INT NOT NULL DEFAULT 0,            -- the partition: its shard's owner consumes it
		payload       VARCHAR(255) NOT NULL,
		state         VARCHAR(8) NOT NULL DEFAULT 'new', -- new, claimed or done
		claimed_token BIGINT UNSIGNED NULL,              -- the term that claimed it last
		attempts      INT NOT NULL DEFAULT 0,            -- claims: above 1 after a failover mid-job
		done_at       DATETIME(6) NULL,
		KEY (part, state, id)
	)`,
	`CREATE TABLE IF NOT EXISTS job_log (
		id      BIGINT AUTO_INCREMENT PRIMARY KEY,
		job_id  BIGINT NOT NULL,
		token   BIGINT UNSIGNED NOT NULL,
		done_at DATETIME(6) NOT NULL
	)`,
}

// idle is how long the leader waits before it looks again at an empty queue.
const idle = 200 * time.Millisecond

// errClaimLost: the job is no longer claimed by this term.
var errClaimLost = errors.New("the job is no longer claimed by this term")

func main() {
	id := flag.String("id", "", "this instance's identity (default host-pid-random)")
	n := flag.Int("enqueue", 0, "add this many jobs to the queue first")
	work := flag.Duration("work", 100*time.Millisecond, "how long each job takes")
	shards := flag.Int("shards", 0, "partition the queue over this many shards (the same on every instance); 0: one election")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, *id, *n, *work, *shards); err != nil {
		log.Fatal(err)
	}
}

func run(ctx context.Context, id string, n int, work time.Duration, shards int) error {
	db, cleanup, err := exampledb.Pool(ctx, "queue")
	if err != nil {
		return err
	}
	defer cleanup()
	if err := setup(ctx, db); err != nil {
		return err
	}
	if err := enqueue(ctx, db, n, max(shards, 1)); err != nil {
		return err
	}
	cfg := election.Config{Identity: id}
	if shards > 0 {
		s, err := election.NewShards(db, "queue", shards, cfg)
		if err != nil {
			return err
		}
		log.Printf("%s is a member of group queue, of %d shards", id, shards)
		err = s.Run(ctx, func(ctx context.Context, shard int, t *election.Term) error {
			return lead(ctx, fmt.Sprintf("%s (shard %d)", id, shard), t, shard, work)
		})
		if ctx.Err() != nil {
			return nil // stopped by a signal
		}
		return err
	}
	e, err := election.New(db, "queue", cfg)
	if err != nil {
		return err
	}
	log.Printf("%s is a candidate", e.Identity())
	err = e.Run(ctx, func(ctx context.Context, t *election.Term) error {
		return lead(ctx, e.Identity(), t, 0, work)
	})
	if ctx.Err() != nil {
		return nil // stopped by a signal
	}
	return err
}

// lead consumes the jobs of partition part while the term t lasts; who
// names the consumer in the log.
func lead(ctx context.Context, who string, t *election.Term, part int, work time.Duration) error {
	log.Printf("%s leads with token %d", who, t.Token())
	for ctx.Err() == nil {
		job, err := consume(ctx, t, part, work)
		if err == nil && job != 0 {
			log.Printf("%s did job %d with token %d", who, job, t.Token())
			continue
		}
		if err != nil && !errors.Is(err, context.Cause(ctx)) {
			// A failed job stays claimed and is claimed again next; a
			// stale term's completion is refused with ErrFenced.
			log.Printf("%s: job not done: %v", who, err)
		}
		select {
		case <-ctx.Done():
		case <-time.After(idle):
		}
	}
	log.Printf("%s stops leading: %v", who, context.Cause(ctx))
	return nil
}

func setup(ctx context.Context, db *sql.DB) error {
	for _, ddl := range schema {
		if _, err := db.ExecContext(ctx, ddl); err != nil {
			return err
		}
	}
	return nil
}

// enqueue adds n jobs, spread over parts partitions.
func enqueue(ctx context.Context, db *sql.DB, n, parts int) error {
	for i := range n {
		if _, err := db.ExecContext(ctx, "INSERT INTO jobs (part, payload) VALUES (?, ?)", i%parts, fmt.Sprintf("job %d", i+1)); err != nil {
			return err
		}
	}
	return nil
}

// consume claims the oldest job of partition part not done, does it and
// completes it; it returns the job's id, or 0 if the partition is empty.
func consume(ctx context.Context, t *election.Term, part int, work time.Duration) (int64, error) {
	job, payload, err := claim(ctx, t, part)
	if err != nil || job == 0 {
		return 0, err
	}
	if err := do(ctx, payload, work); err != nil {
		return 0, err
	}
	if err := complete(ctx, t, job); err != nil {
		return 0, err
	}
	return job, nil
}

// claim marks the oldest job not done as claimed by this term. A job that
// an earlier term claimed and did not complete (its leader died, or was
// cut off) is claimed again.
func claim(ctx context.Context, t *election.Term, part int) (job int64, payload string, err error) {
	err = t.Fenced(ctx, func(tx *sql.Tx) error {
		err := tx.QueryRowContext(ctx, "SELECT id, payload FROM jobs WHERE part = ? AND state <> 'done' ORDER BY id LIMIT 1 FOR UPDATE", part).Scan(&job, &payload)
		if errors.Is(err, sql.ErrNoRows) {
			job = 0
			return nil
		}
		if err != nil {
			return err
		}
		_, err = tx.ExecContext(ctx, "UPDATE jobs SET state = 'claimed', claimed_token = ?, attempts = attempts + 1 WHERE id = ?", t.Token(), job)
		return err
	})
	if err != nil {
		return 0, "", err
	}
	return job, payload, nil
}

// do is the job's own work, outside any transaction. It stops when the
// term does: the job stays claimed, and the next leader does it again.
func do(ctx context.Context, payload string, work time.Duration) error {
	select {
	case <-ctx.Done():
		return context.Cause(ctx)
	case <-time.After(work):
		return nil
	}
}

// complete writes the job's result and marks it done, in one fenced
// transaction, if this term's claim still stands. A stale term commits
// nothing: Fenced refuses it (ErrFenced).
func complete(ctx context.Context, t *election.Term, job int64) error {
	return t.Fenced(ctx, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, "UPDATE jobs SET state = 'done', done_at = UTC_TIMESTAMP(6) WHERE id = ? AND state = 'claimed' AND claimed_token = ?", job, t.Token())
		if err != nil {
			return err
		}
		if n, err := res.RowsAffected(); err != nil || n != 1 {
			return errors.Join(errClaimLost, err)
		}
		_, err = tx.ExecContext(ctx, "INSERT INTO job_log (job_id, token, done_at) VALUES (?, ?, UTC_TIMESTAMP(6))", job, t.Token())
		return err
	})
}

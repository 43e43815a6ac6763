// Command queue consumes a job queue on exactly one of its instances: the
// leader of the election "queue". The leader takes the oldest open job,
// does it and records it in one fenced transaction (Term.Fenced), so every
// job is done exactly once, even when the leader dies in the middle of one
// and another instance takes over.
//
//	go run ./examples/queue -id a -enqueue 50   # prints the ELECTION_DSN of its private MariaDB
//	ELECTION_DSN='root@tcp(127.0.0.1:PORT)/queue' go run ./examples/queue -id b
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
// whatever a job writes.
var schema = []string{
	`CREATE TABLE IF NOT EXISTS jobs (
		id            BIGINT AUTO_INCREMENT PRIMARY KEY,
		payload       VARCHAR(255) NOT NULL,
		done_by_token BIGINT UNSIGNED NULL
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

func main() {
	id := flag.String("id", "", "this instance's identity (default host-pid-random)")
	n := flag.Int("enqueue", 0, "add this many jobs to the queue first")
	work := flag.Duration("work", 100*time.Millisecond, "how long each job takes")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, *id, *n, *work); err != nil {
		log.Fatal(err)
	}
}

func run(ctx context.Context, id string, n int, work time.Duration) error {
	db, cleanup, err := exampledb.Pool(ctx, "queue")
	if err != nil {
		return err
	}
	defer cleanup()
	if err := setup(ctx, db); err != nil {
		return err
	}
	if err := enqueue(ctx, db, n); err != nil {
		return err
	}
	e, err := election.New(db, "queue", election.Config{Identity: id})
	if err != nil {
		return err
	}
	log.Printf("%s is a candidate", e.Identity())
	err = e.Run(ctx, func(ctx context.Context, t *election.Term) error {
		log.Printf("%s leads with token %d", e.Identity(), t.Token())
		for ctx.Err() == nil {
			job, err := consume(ctx, t, work)
			if err == nil && job != 0 {
				log.Printf("%s did job %d with token %d", e.Identity(), job, t.Token())
				continue
			}
			if err != nil {
				log.Printf("%s: job not done: %v", e.Identity(), err)
			}
			select {
			case <-ctx.Done():
			case <-time.After(idle):
			}
		}
		log.Printf("%s stops leading: %v", e.Identity(), context.Cause(ctx))
		return nil
	})
	if ctx.Err() != nil {
		return nil // stopped by a signal
	}
	return err
}

func setup(ctx context.Context, db *sql.DB) error {
	for _, ddl := range schema {
		if _, err := db.ExecContext(ctx, ddl); err != nil {
			return err
		}
	}
	return nil
}

func enqueue(ctx context.Context, db *sql.DB, n int) error {
	for i := range n {
		if _, err := db.ExecContext(ctx, "INSERT INTO jobs (payload) VALUES (?)", fmt.Sprintf("job %d", i+1)); err != nil {
			return err
		}
	}
	return nil
}

// consume does the oldest open job and returns its id, or 0 if there is
// none. Taking the job, the job's writes and marking it done are one fenced
// transaction: if the term ends before it commits, none of it happened, and
// the next leader does the job instead.
func consume(ctx context.Context, t *election.Term, work time.Duration) (job int64, err error) {
	err = t.Fenced(ctx, func(tx *sql.Tx) error {
		err := tx.QueryRowContext(ctx, "SELECT id FROM jobs WHERE done_by_token IS NULL ORDER BY id LIMIT 1 FOR UPDATE").Scan(&job)
		if errors.Is(err, sql.ErrNoRows) {
			return nil
		}
		if err != nil {
			return err
		}
		select { // the job's own work, which stops when the term does
		case <-ctx.Done():
			return context.Cause(ctx)
		case <-time.After(work):
		}
		if _, err := tx.ExecContext(ctx, "INSERT INTO job_log (job_id, token, done_at) VALUES (?, ?, UTC_TIMESTAMP(6))", job, t.Token()); err != nil {
			return err
		}
		_, err = tx.ExecContext(ctx, "UPDATE jobs SET done_by_token = ? WHERE id = ?", t.Token(), job)
		return err
	})
	if err != nil {
		return 0, err
	}
	return job, nil
}

// Command cron runs a job every -every on exactly one of its instances: the
// leader of the election "cron". Each run is recorded in the table
// cron_runs by a fenced transaction (Term.Fenced), which commits only while
// its term is the newest, so a leader that has lost its term never records a
// run after its successor has.
//
// Start a few instances and kill the one that runs the job (Ctrl-C, or kill
// -9): another takes over with a higher fencing token.
//
//	go run ./examples/cron -id a      # prints the ELECTION_DSN of its private MariaDB
//	ELECTION_DSN='root@tcp(127.0.0.1:PORT)/cron' go run ./examples/cron -id b
//	ELECTION_DSN='root@tcp(127.0.0.1:PORT)/cron' go run ./examples/cron -id c
//
// Without $ELECTION_DSN an instance starts a private throwaway MariaDB from
// the mariadbd on PATH; with it, $ELECTION_DSN must name a database.
package main

import (
	"context"
	"database/sql"
	"flag"
	"log"
	"os"
	"os/signal"
	"syscall"
	"time"

	_ "github.com/go-sql-driver/mysql" // the "mysql" driver

	"github.com/sqlelect/election"
	"github.com/sqlelect/election/examples/internal/exampledb"
)

const createRuns = `CREATE TABLE IF NOT EXISTS cron_runs (
	id     BIGINT AUTO_INCREMENT PRIMARY KEY,
	token  BIGINT UNSIGNED NOT NULL,
	ran_at DATETIME(6) NOT NULL
)`

func main() {
	id := flag.String("id", "", "this instance's identity (default host-pid-random)")
	every := flag.Duration("every", time.Second, "how often the leader runs the job")
	runFor := flag.Duration("for", 0, "stop after this long (0: run until SIGTERM or Ctrl-C)")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if *runFor > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, *runFor)
		defer cancel()
	}
	if err := run(ctx, *id, *every); err != nil {
		log.Fatal(err)
	}
}

func run(ctx context.Context, id string, every time.Duration) error {
	db, cleanup, err := exampledb.Pool(ctx, "cron")
	if err != nil {
		return err
	}
	defer cleanup()
	if _, err := db.ExecContext(ctx, createRuns); err != nil {
		return err
	}
	e, err := election.New(db, "cron", election.Config{Identity: id})
	if err != nil {
		return err
	}
	log.Printf("%s is a candidate", e.Identity())
	err = e.Run(ctx, func(ctx context.Context, t *election.Term) error {
		log.Printf("%s leads with token %d", e.Identity(), t.Token())
		tick := time.NewTicker(every)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				log.Printf("%s stops leading: %v", e.Identity(), context.Cause(ctx))
				return nil
			case <-tick.C:
			}
			if err := job(ctx, t); err != nil {
				log.Printf("%s: run not recorded: %v", e.Identity(), err)
				continue
			}
			log.Printf("%s ran the job with token %d", e.Identity(), t.Token())
		}
	})
	if ctx.Err() != nil {
		return nil // stopped by a signal or -for
	}
	return err
}

// job is the cron job. Its writes go in the fenced transaction, so that
// they are committed only if this term is still the newest.
func job(ctx context.Context, t *election.Term) error {
	return t.Fenced(ctx, func(tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, "INSERT INTO cron_runs (token, ran_at) VALUES (?, UTC_TIMESTAMP(6))", t.Token())
		return err
	})
}

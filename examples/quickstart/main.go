// Command quickstart is the README's first example: one leader among any
// number of instances, doing its work in fenced transactions until it stops
// leading, while the others wait to take over.
package main

import (
	"context"
	"database/sql"
	"errors"
	"log"
	"os"
	"os/signal"
	"syscall"
	"time"

	_ "github.com/go-sql-driver/mysql" // the "mysql" driver
	"github.com/sqlelect/election"
)

func main() {
	// SIGTERM or Ctrl-C ends ctx: the leader's work stops, then it resigns.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	db, err := sql.Open("mysql", os.Getenv("ELECTION_DSN")) // user:pass@tcp(host:3306)/dbname
	if err != nil {
		log.Fatal(err)
	}
	e, err := election.New(db, "billing", election.Config{})
	if err != nil {
		log.Fatal(err) // bad input is reported here, with the fix
	}
	// Run campaigns, calls lead while this instance leads, and campaigns
	// again whenever a term ends, until ctx ends.
	if err := e.Run(ctx, lead); err != nil && !errors.Is(err, context.Canceled) {
		log.Fatal(err)
	}
}

// lead does the leader's work until ctx ends: when the term is lost, or the
// process shuts down (it then has Margin to return). Returning ends only the
// term: Run resigns and campaigns again after a pause, in which another
// instance may take over; an error wrapping election.ErrStop ends Run.
func lead(ctx context.Context, t *election.Term) error {
	log.Printf("leading with fencing token %d", t.Token())
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		err := t.Fenced(ctx, func(tx *sql.Tx) error {
			_, err := tx.ExecContext(ctx, "INSERT INTO work_log (token, done_at) VALUES (?, NOW(6))", t.Token())
			return err // committed only while no newer term exists
		})
		if err != nil && ctx.Err() == nil && !errors.Is(err, election.ErrFenced) {
			return err // Run logs it and gives the election up for a while
		}
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
	}
}

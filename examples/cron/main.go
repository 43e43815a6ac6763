// Command cron runs a scheduled job on exactly one of its instances, the
// leader of the election "cron", and does every period of the schedule
// exactly once, across failovers. It is the pattern to copy for a nightly
// report, a billing run or any job that must happen once per period:
//
//   - The schedule comes from the clock, not from the leader. Time is cut
//     into periods of -every (a period starts at the time truncated to
//     -every, so -every 24h starts at 00:00 UTC), and each period's run is
//     due at its start, whichever instance leads then. A ticker started by
//     the leader would restart the schedule at each failover: a nightly job
//     would wait another day. A leader whose clock is off does a period a
//     little early or late, never twice.
//   - Each period has a key, its start, which is the primary key of the
//     table cron_runs. The job's writes and the row that marks its period
//     done commit in one fenced transaction (Term.Fenced): a leader that
//     has lost its term commits neither, so a stale leader cannot do a
//     period its successor does. A second attempt at a period finds its key
//     taken and skips the job: the batch is idempotent.
//   - On becoming leader, and at the start of each period, the leader does
//     the periods that are due and not done, oldest first: those after the
//     last one done, but none that began more than -catchup before the
//     period now under way. Periods missed during a failover, or while no
//     instance ran, are caught up; older ones are given up. A period whose
//     job fails is retried at the next period's start, and later ones wait
//     behind it. On a new table the schedule starts with the current
//     period: there is no past to catch up.
//   - A leader that dies in the middle of a job has not committed its
//     transaction: the server rolls it back, the period is not done, and
//     the next leader does it.
//
// Elector.TryRun alone does none of this: a task whose winner dies is not
// run again (see its documentation).
//
// Start a few instances and kill the one that runs the job (Ctrl-C, or kill
// -9): another takes over with a higher fencing token and goes on from the
// first period not done.
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
	"errors"
	"flag"
	"fmt"
	"log"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/sqlelect/election"
	"github.com/sqlelect/election/examples/internal/exampledb"
)

// schema is the record of the periods done, keyed by period, and the
// report the job writes, which stands for whatever a job writes. The
// period's start is stored in Unix milliseconds: a plain number, whatever
// the DSN's time settings.
var schema = []string{
	`CREATE TABLE IF NOT EXISTS cron_runs (
		period_start BIGINT PRIMARY KEY,
		token        BIGINT UNSIGNED NOT NULL,
		ran_at       DATETIME(6) NOT NULL
	)`,
	`CREATE TABLE IF NOT EXISTS cron_report (
		id           BIGINT AUTO_INCREMENT PRIMARY KEY,
		period_start BIGINT NOT NULL,
		token        BIGINT UNSIGNED NOT NULL
	)`,
}

// errDone says that a period's key is taken: the period is done already.
var errDone = errors.New("period already done")

// schedule is when the job runs and what it does.
type schedule struct {
	every   time.Duration // the period; the job runs once per period, at its start
	catchUp time.Duration // how far back periods that were missed are still done
	work    time.Duration // how long the job takes
}

func main() {
	id := flag.String("id", "", "this instance's identity (default host-pid-random)")
	every := flag.Duration("every", time.Second, "the schedule's period, in whole milliseconds: the job runs once per period")
	catchUp := flag.Duration("catchup", time.Minute, "how far back a leader does the periods that were missed (a failover, an outage)")
	work := flag.Duration("work", 0, "how long the job takes, inside its transaction (to kill a leader mid-job)")
	runFor := flag.Duration("for", 0, "stop after this long (0: run until SIGTERM or Ctrl-C)")
	flag.Parse()
	if *every < time.Millisecond || *every%time.Millisecond != 0 {
		log.Fatalf("-every %v: want whole milliseconds, the unit of the period key", *every)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if *runFor > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, *runFor)
		defer cancel()
	}
	if err := run(ctx, *id, schedule{every: *every, catchUp: *catchUp, work: *work}); err != nil {
		log.Fatal(err)
	}
}

func run(ctx context.Context, id string, s schedule) error {
	db, cleanup, err := exampledb.Pool(ctx, "cron")
	if err != nil {
		return err
	}
	defer cleanup()
	if err := setup(ctx, db); err != nil {
		return err
	}
	e, err := election.New(db, "cron", election.Config{Identity: id})
	if err != nil {
		return err
	}
	log.Printf("%s is a candidate", e.Identity())
	err = e.Run(ctx, func(ctx context.Context, t *election.Term) error {
		log.Printf("%s leads with token %d", e.Identity(), t.Token())
		for {
			if err := s.runDue(ctx, db, t); err != nil && ctx.Err() == nil {
				log.Printf("%s: %v; retrying at the next period", e.Identity(), err)
			}
			select {
			case <-ctx.Done():
				log.Printf("%s stops leading: %v", e.Identity(), context.Cause(ctx))
				return nil
			case <-time.After(time.Until(time.Now().Truncate(s.every).Add(s.every))): // the next period's start
			}
		}
	})
	if ctx.Err() != nil {
		return nil // stopped by a signal or -for
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

// runDue does the periods that are due, oldest first, and stops at the
// first that fails: the next call starts from it.
func (s schedule) runDue(ctx context.Context, db *sql.DB, t *election.Term) error {
	periods, err := s.due(ctx, db, time.Now())
	if err != nil {
		return err
	}
	for _, p := range periods {
		switch err := s.runPeriod(ctx, t, p); {
		case errors.Is(err, errDone):
			log.Printf("period %s was done already", stamp(p))
		case err != nil:
			return fmt.Errorf("period %s not done: %w", stamp(p), err)
		default:
			log.Printf("period %s done with token %d", stamp(p), t.Token())
		}
	}
	return nil
}

// due returns the starts of the periods to do at now, oldest first: those
// after the last one done, up to the one under way, but none more than
// catchUp older than that one; on a new table, only the one under way.
// Periods are done in order, so the last one done says where to go on.
func (s schedule) due(ctx context.Context, db *sql.DB, now time.Time) ([]time.Time, error) {
	var last sql.NullInt64
	if err := db.QueryRowContext(ctx, "SELECT MAX(period_start) FROM cron_runs").Scan(&last); err != nil {
		return nil, fmt.Errorf("reading the last period done: %w", err)
	}
	current := now.Truncate(s.every)
	from := current
	if last.Valid {
		from = time.UnixMilli(last.Int64).Add(s.every)
		if oldest := current.Add(-s.catchUp).Truncate(s.every); from.Before(oldest) {
			from = oldest
		}
	}
	var periods []time.Time
	for p := from; !p.After(current); p = p.Add(s.every) {
		periods = append(periods, p)
	}
	return periods, nil
}

// runPeriod does the job of the period that starts at p and marks the period
// done, in one fenced transaction: both commit, only while t is the
// election's newest term, or neither does. If this process dies before the
// commit, the server rolls both back and the next leader does the period.
// It returns errDone, and does not run the job, if the period is done.
func (s schedule) runPeriod(ctx context.Context, t *election.Term, p time.Time) error {
	return t.Fenced(ctx, func(tx *sql.Tx) error {
		// The key first: a second attempt at the period stops here. Under
		// fencing only the newest term writes, one period at a time, so
		// the key is taken only when something else did the period (a run
		// by hand, a copy of this program in another election).
		_, err := tx.ExecContext(ctx, "INSERT INTO cron_runs (period_start, token, ran_at) VALUES (?, ?, UTC_TIMESTAMP(6))", p.UnixMilli(), t.Token())
		if me := new(mysql.MySQLError); errors.As(err, &me) && me.Number == 1062 { // ER_DUP_ENTRY
			return errDone
		}
		if err != nil {
			return err
		}
		return s.job(ctx, tx, t, p)
	})
}

// job is the work of the period that starts at p: here it takes s.work and
// writes one report row. All its writes go through tx.
func (s schedule) job(ctx context.Context, tx *sql.Tx, t *election.Term, p time.Time) error {
	select { // the job's own work, which stops when the term does
	case <-ctx.Done():
		return context.Cause(ctx)
	case <-time.After(s.work):
	}
	_, err := tx.ExecContext(ctx, "INSERT INTO cron_report (period_start, token) VALUES (?, ?)", p.UnixMilli(), t.Token())
	return err
}

// stamp names a period by its start, in UTC.
func stamp(p time.Time) string { return p.UTC().Format("2006-01-02T15:04:05.000Z") }

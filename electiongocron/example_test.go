package electiongocron_test

import (
	"context"
	"database/sql"
	"fmt"
	"log"
	"time"

	"github.com/go-co-op/gocron/v2"

	"github.com/sqlelect/election"
	"github.com/sqlelect/election/electiongocron"
)

// Three instances of a service (here three schedulers in one process, each
// with an identity of its own; in production one per process, with the
// default identity) schedule the same job: only the leader's runs. When the
// leader closes, or dies, another instance leads and its job runs.
func ExampleElector() {
	db, err := sql.Open("mysql", "app:secret@tcp(db:3306)/app")
	if err != nil {
		log.Fatal(err)
	}
	var instances []*electiongocron.Elector
	var schedulers []gocron.Scheduler
	for i := range 3 {
		e, err := election.New(db, "billing-cron", election.Config{Identity: fmt.Sprintf("instance-%d", i)})
		if err != nil {
			log.Fatal(err)
		}
		g := electiongocron.NewElector(e) // campaigns in the background
		s, err := gocron.NewScheduler(gocron.WithDistributedElector(g))
		if err != nil {
			log.Fatal(err)
		}
		_, err = s.NewJob(gocron.DurationJob(time.Minute), gocron.NewTask(func() {
			// gocron does not stop a running job when the term ends: stop
			// with the term's context, and send its token with the writes.
			ctx, cancel := g.JobContext(context.Background())
			defer cancel()
			t := g.Term()
			if t == nil {
				return // the term ended between gocron's check and now
			}
			err := t.Fenced(ctx, func(tx *sql.Tx) error {
				_, err := tx.ExecContext(ctx, "INSERT INTO invoices_run (token, at) VALUES (?, NOW(6))", t.Token())
				return err
			})
			if err != nil {
				log.Printf("instance %d: %v", i, err)
			}
		}), gocron.WithName("invoices"))
		if err != nil {
			log.Fatal(err)
		}
		s.Start()
		instances, schedulers = append(instances, g), append(schedulers, s)
	}

	time.Sleep(time.Hour)

	// On shutdown: stop the scheduler first, then resign and leave.
	for i, s := range schedulers {
		if err := s.Shutdown(); err != nil {
			log.Print(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		if err := instances[i].Close(ctx); err != nil {
			log.Print(err)
		}
		cancel()
	}
}

// Every instance's scheduler fires the job; the one whose Lock wins runs it,
// and holds the job's election at least 10 s, so that an instance whose
// timer fires a little later skips it too.
func ExampleLocker() {
	db, err := sql.Open("mysql", "app:secret@tcp(db:3306)/app")
	if err != nil {
		log.Fatal(err)
	}
	l, err := electiongocron.NewLocker(db, election.Config{}, electiongocron.WithMinHold(10*time.Second))
	if err != nil {
		log.Fatal(err)
	}
	s, err := gocron.NewScheduler(gocron.WithDistributedLocker(l))
	if err != nil {
		log.Fatal(err)
	}
	_, err = s.NewJob(gocron.CronJob("0 2 * * *", false), gocron.NewTask(func() {
		log.Print("nightly report") // on one instance per night
	}), gocron.WithName("nightly-report")) // the election: "gocron:nightly-report"
	if err != nil {
		log.Fatal(err)
	}
	s.Start()
	select {}
}

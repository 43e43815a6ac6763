package election_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log"
	"slices"
	"strings"
	"time"

	"github.com/sqlelect/election"
)

// exampleDB returns a pool on a fresh database of the test server; in your
// code this is the *sql.DB your service already has, from a DSN that names
// a database.
func exampleDB() *sql.DB {
	admin, err := sql.Open("mysql", server.DSN(""))
	if err != nil {
		log.Fatal(err)
	}
	defer admin.Close()
	var n int
	admin.QueryRow("SELECT COUNT(*) FROM information_schema.schemata").Scan(&n)
	name := fmt.Sprintf("example_%d_%d", time.Now().UnixNano(), n)
	if _, err := admin.Exec("CREATE DATABASE " + name); err != nil {
		log.Fatal(err)
	}
	exampleDatabases = append(exampleDatabases, name)
	db, err := sql.Open("mysql", server.DSN(name))
	if err != nil {
		log.Fatal(err)
	}
	return db
}

func ExampleElector_Run() {
	db := exampleDB()
	defer db.Close()
	e, err := election.New(db, "billing-cron", election.Config{Identity: "host-a"})
	if err != nil {
		log.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	err = e.Run(ctx, func(ctx context.Context, t *election.Term) error {
		fmt.Println("leading:", t.Token() > 0)
		stop() // in a service: a shutdown signal. Run resigns after fn returns.
		<-ctx.Done()
		return nil
	})
	fmt.Println("run ended:", err)
	// Output:
	// leading: true
	// run ended: context canceled
}

func ExampleElector_Campaign() {
	db := exampleDB()
	defer db.Close()
	e, err := election.New(db, "orders-consumer", election.Config{})
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()
	term, err := e.Campaign(ctx) // blocks until this candidate leads
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("leader:", e.IsLeader(), "token issued:", term.Token() > 0)
	// ... work with term.Context(), which is cancelled if leadership is lost ...
	if err := term.Resign(ctx); err != nil {
		log.Fatal(err)
	}
	fmt.Println("leader:", e.IsLeader(), "ended:", term.Err())
	// Output:
	// leader: true token issued: true
	// leader: false ended: election: resigned
}

func ExampleTerm_Fenced() {
	db := exampleDB()
	defer db.Close()
	db.Exec("CREATE TABLE ledger (id INT AUTO_INCREMENT PRIMARY KEY, amount INT, token BIGINT UNSIGNED)")
	e, _ := election.New(db, "ledger-writer", election.Config{})
	ctx := context.Background()
	term, err := e.Campaign(ctx)
	if err != nil {
		log.Fatal(err)
	}
	write := func(t *election.Term) error {
		return t.Fenced(ctx, func(tx *sql.Tx) error {
			_, err := tx.ExecContext(ctx, "INSERT INTO ledger (amount, token) VALUES (?, ?)", 100, t.Token())
			return err
		})
	}
	fmt.Println("write of the live term:", write(term))
	term.Resign(ctx)
	next, _ := e.Campaign(ctx) // a later term, here of the same candidate
	defer next.Resign(ctx)
	err = write(term) // a paused leader waking up with its old term
	fmt.Println("write of the old term refused:", errors.Is(err, election.ErrFenced))
	// Output:
	// write of the live term: <nil>
	// write of the old term refused: true
}

func ExampleFence() {
	// A downstream store keeps one Fence and checks the token every
	// request carries.
	var f election.Fence
	ctx := context.Background()
	fmt.Println(f.Check(ctx, "invoices", 7))
	fmt.Println(f.Check(ctx, "invoices", 8)) // a new term
	err := f.Check(ctx, "invoices", 7)       // the old leader, late
	fmt.Println(errors.Is(err, election.ErrFenced), err)
	// Output:
	// <nil>
	// <nil>
	// true election: stale fencing token 7 for "invoices": 8 has been seen
}

func ExampleFence_issued() {
	db := exampleDB()
	defer db.Close()
	ctx := context.Background()
	leader, _ := election.New(db, "invoicing", election.Config{Identity: "host-a"})
	term, err := leader.Campaign(ctx)
	if err != nil {
		log.Fatal(err)
	}
	defer term.Resign(ctx)

	// The store reads the election (SELECT only) to refuse tokens no term
	// holds: a buggy or forged token cannot lock the real leader out.
	ops, _ := election.NewOperator(db, "invoicing", election.Config{})
	f := election.Fence{Issued: ops.Token}
	err = f.Check(ctx, "invoices", 1<<63)
	fmt.Println(errors.Is(err, election.ErrUnissuedToken))
	fmt.Println(f.Check(ctx, "invoices", term.Token()))
	// Output:
	// true
	// <nil>
}

func ExampleOperator_Leader() {
	db := exampleDB()
	defer db.Close()
	leader, _ := election.New(db, "reports", election.Config{Identity: "host-a"})
	ctx := context.Background()
	term, err := leader.Campaign(ctx)
	if err != nil {
		log.Fatal(err)
	}
	defer term.Resign(ctx)

	// Anyone with SELECT on the tables can ask, without campaigning.
	observer, _ := election.NewOperator(db, "reports", election.Config{})
	rec, err := observer.Leader(ctx)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(rec.Identity, rec.Token == term.Token(), rec.State, rec.Leading())
	// Output: host-a true leading true
}

func ExampleSchemaDDL() {
	ddl, err := election.SchemaDDL("election")
	if err != nil {
		log.Fatal(err)
	}
	for _, line := range strings.Split(ddl, "\n") {
		if strings.HasPrefix(line, "CREATE") {
			fmt.Println(line)
		}
	}
	// Output:
	// CREATE TABLE IF NOT EXISTS `election_record` (
	// CREATE TABLE IF NOT EXISTS `election_epoch` (
	// CREATE TABLE IF NOT EXISTS `election_candidate` (
	// CREATE TABLE IF NOT EXISTS `election_term` (
	// CREATE TABLE IF NOT EXISTS `election_lease` (
}

func ExampleElector_TryRun() {
	db := exampleDB()
	defer db.Close()
	// The same nightly task is scheduled on every instance; one runs it.
	task := func(ctx context.Context, t *election.Term) error {
		fmt.Println("running the report")
		return nil
	}
	a, _ := election.New(db, "nightly-report", election.Config{Identity: "host-a"})
	b, _ := election.New(db, "nightly-report", election.Config{Identity: "host-b"})
	ctx := context.Background()
	done := make(chan error)
	started := make(chan struct{})
	go func() {
		done <- a.TryRun(ctx, time.Second, func(ctx context.Context, t *election.Term) error { // held for at least 1s
			close(started)
			return task(ctx, t)
		})
	}()
	<-started // here, b's schedule fires a moment after a's
	fmt.Println("host-b:", b.TryRun(ctx, time.Second, task))
	fmt.Println("host-a:", <-done)
	// Output:
	// running the report
	// host-b: election: held by another candidate
	// host-a: <nil>
}

func ExampleOperator_Watch() {
	db := exampleDB()
	defer db.Close()
	election.CreateSchema(context.Background(), db, "")
	cfg := election.Config{Interval: 100 * time.Millisecond, Lease: time.Second}
	observer, _ := election.NewOperator(db, "scheduler", cfg)
	ctx, stop := context.WithCancel(context.Background())
	events := observer.Watch(ctx) // closed when ctx ends
	ev := <-events                // the state now: no term yet
	fmt.Printf("leader %q leading %v reason %q\n", ev.Identity, ev.Leading, ev.Reason)

	cfg.Identity = "host-a"
	a, _ := election.New(db, "scheduler", cfg)
	term, _ := a.Campaign(context.Background())
	term.Resign(context.Background())

	for range 2 {
		ev := <-events
		fmt.Printf("this term %v leader %q leading %v reason %q\n", ev.Token == term.Token(), ev.Identity, ev.Leading, ev.Reason)
	}
	stop()
	for range events {
	}
	// Output:
	// leader "" leading false reason ""
	// this term true leader "host-a" leading true reason ""
	// this term true leader "host-a" leading false reason "resigned"
}

// campaigns reports whether candidate id campaigns in ops's election.
func campaigns(ctx context.Context, ops *election.Operator, id string) bool {
	cands, _ := ops.Candidates(ctx)
	return slices.ContainsFunc(cands, func(c election.Candidate) bool { return c.Identity == id && c.Alive })
}

func ExampleOperator_Demote() {
	db := exampleDB()
	defer db.Close()
	cfg := election.Config{Interval: 100 * time.Millisecond, Lease: time.Second}
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	done := make(chan struct{})
	ops, _ := election.NewOperator(db, "controller", election.Config{})
	for _, id := range []string{"host-a", "host-b"} {
		cfg.Identity = id
		e, _ := election.New(db, "controller", cfg)
		go func() {
			defer func() { done <- struct{}{} }()
			e.Run(ctx, func(ctx context.Context, t *election.Term) error {
				<-ctx.Done() // demoted: stop, then return
				return nil
			})
		}()
		for !campaigns(ctx, ops, id) {
			time.Sleep(50 * time.Millisecond)
		}
		for rec, err := ops.Leader(ctx); err != nil || rec.Identity != "host-a"; rec, err = ops.Leader(ctx) {
			time.Sleep(50 * time.Millisecond) // host-a leads first
		}
	}
	before, _ := ops.Leader(ctx)
	killed, err := ops.Demote(ctx) // returns once host-a has stepped down
	fmt.Printf("demoted %s: killed %v, err %v\n", before.Identity, killed, err)
	after, err := ops.Leader(ctx)
	for err != nil {
		time.Sleep(50 * time.Millisecond)
		after, err = ops.Leader(ctx)
	}
	fmt.Printf("%s leads, with a higher token: %v\n", after.Identity, after.Token > before.Token)
	stop()
	<-done
	<-done
	// Output:
	// demoted host-a: killed false, err <nil>
	// host-b leads, with a higher token: true
}

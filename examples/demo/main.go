// Command demo runs several candidate processes for one election against a
// MySQL/MariaDB server, kills the leader a few times and shows another
// process take over with a higher fencing token.
//
//	go run ./examples/demo                 # private MariaDB from PATH
//	ELECTION_DSN='root@tcp(127.0.0.1:3306)/demo' go run ./examples/demo
package main

import (
	"context"
	"database/sql"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	_ "github.com/go-sql-driver/mysql"

	"github.com/sqlelect/election"
	"github.com/sqlelect/election/examples/internal/children"
	"github.com/sqlelect/election/examples/internal/exampledb"
)

func main() {
	if id := os.Getenv("DEMO_CANDIDATE"); id != "" {
		candidate(id, os.Getenv("ELECTION_DSN"))
		return
	}
	n := flag.Int("candidates", 3, "candidate processes")
	rounds := flag.Int("kills", 3, "how many times to kill the leader")
	flag.Parse()
	if err := run(*n, *rounds); err != nil {
		fmt.Fprintln(os.Stderr, "demo:", err)
		os.Exit(1)
	}
}

// candidate is one candidate process: it leads when elected and prints
// what it does.
func candidate(id, dsn string) {
	db, err := sql.Open("mysql", dsn)
	if err != nil {
		fmt.Println("error", err)
		os.Exit(1)
	}
	e, err := election.New(db, "demo", election.Config{Identity: id})
	if err != nil {
		fmt.Println("error", err)
		os.Exit(1)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	e.Run(ctx, func(ctx context.Context, t *election.Term) error {
		fmt.Printf("leading %d\n", t.Token())
		<-ctx.Done()
		fmt.Printf("stopped %d %v\n", t.Token(), t.Err())
		return nil
	})
}

func run(n, rounds int) error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	dsn, cleanup, err := exampledb.Open(ctx, "demo")
	cancel()
	if err != nil {
		return err
	}
	defer cleanup()
	g, err := children.New()
	if err != nil {
		return err
	}
	defer g.Close()
	procs := map[string]*children.Child{}
	spawn := func(id string) error {
		child, err := g.Start(id, "DEMO_CANDIDATE="+id, "ELECTION_DSN="+dsn)
		procs[id] = child
		return err
	}
	for i := 1; i <= n; i++ {
		if err := spawn(fmt.Sprintf("candidate-%d", i)); err != nil {
			return err
		}
	}
	leader := func() (string, time.Time, error) {
		for {
			select {
			case l := <-g.Lines:
				if strings.HasPrefix(l.Text, "error") {
					return "", time.Time{}, fmt.Errorf("%s: %s", l.ID, l.Text)
				}
				if token, ok := strings.CutPrefix(l.Text, "leading "); ok {
					fmt.Printf("%s leads with fencing token %s\n", l.ID, token)
					return l.ID, l.At, nil
				}
			case <-time.After(30 * time.Second):
				return "", time.Time{}, fmt.Errorf("no leader within 30s")
			}
		}
	}
	id, _, err := leader()
	if err != nil {
		return err
	}
	for range rounds {
		time.Sleep(2 * time.Second)
		fmt.Printf("killing %s with SIGKILL\n", id)
		killed := time.Now()
		procs[id].Stop(syscall.SIGKILL)
		next, at, err := leader()
		if err != nil {
			return err
		}
		fmt.Printf("  took over %.1f ms after the kill\n", float64(at.Sub(killed).Microseconds())/1000)
		// As a supervisor would, start the killed candidate again.
		if err := spawn(id); err != nil {
			return err
		}
		id = next
	}
	time.Sleep(2 * time.Second)
	fmt.Printf("stopping %s with SIGTERM: it resigns\n", id)
	stopped := time.Now()
	procs[id].Stop(syscall.SIGTERM)
	_, at, err := leader()
	if err != nil {
		return err
	}
	fmt.Printf("  took over %.1f ms after the SIGTERM\n", float64(at.Sub(stopped).Microseconds())/1000)
	return nil
}

// Command rollingdeploy replaces three instances of a service's version v1
// by three of v2, as a rolling deploy does: each v2 instance campaigns with
// a higher Priority before a v1 instance gets SIGTERM, so leadership moves
// once, to a v2 instance, when the v1 leader's instance stops. Then the v2
// leader is killed with SIGKILL and another v2 instance takes over, and its
// supervisor (this program) starts it again. With -svg it draws the
// election's history (Operator.HistorySVG), as electctl history --svg does.
//
//	go run ./examples/rollingdeploy -svg history.svg  # private MariaDB from PATH
//	ELECTION_DSN='root@tcp(127.0.0.1:3306)/deploy' go run ./examples/rollingdeploy
package main

import (
	"context"
	"database/sql"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	_ "github.com/go-sql-driver/mysql"

	"github.com/sqlelect/election"
	"github.com/sqlelect/election/examples/internal/children"
	"github.com/sqlelect/election/examples/internal/exampledb"
)

const name = "rolling-deploy"

func main() {
	if id := os.Getenv("ROLLING_INSTANCE"); id != "" {
		instance(id, os.Getenv("ELECTION_DSN"))
		return
	}
	svg := flag.String("svg", "", "draw the election's history to this file")
	flag.Parse()
	if err := run(*svg); err != nil {
		fmt.Fprintln(os.Stderr, "rollingdeploy:", err)
		os.Exit(1)
	}
}

// instance is one instance of the service, of the version its identity
// starts with: v2 campaigns with priority 1, v1 with 0.
func instance(id, dsn string) {
	db, err := sql.Open("mysql", dsn)
	if err != nil {
		fmt.Println("error", err)
		os.Exit(1)
	}
	version, _, _ := strings.Cut(id, "-")
	cfg := election.Config{Identity: id, Version: version}
	if version == "v2" {
		cfg.Priority = 1
	}
	e, err := election.New(db, name, cfg)
	if err != nil {
		fmt.Println("error", err)
		os.Exit(1)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	fmt.Println("campaigning")
	e.Run(ctx, func(ctx context.Context, t *election.Term) error {
		fmt.Printf("leading %d\n", t.Token())
		<-ctx.Done()
		return nil
	})
}

// run deploys v2 over v1, kills the new leader, and draws the history to
// svg if it is not empty. It fails unless the history shows exactly two
// terms after the deploy, of v1 and then v2, and another after the kill.
func run(svg string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	dsn, cleanup, err := exampledb.Open(ctx, "deploy")
	cancel()
	if err != nil {
		return err
	}
	defer cleanup()
	db, err := sql.Open("mysql", dsn)
	if err != nil {
		return err
	}
	defer db.Close()
	ops, err := election.NewOperator(db, name, election.Config{})
	if err != nil {
		return err
	}
	g, err := children.New()
	if err != nil {
		return err
	}
	defer g.Close()
	procs := map[string]*children.Child{}
	// next returns the instance that printed text (leading: any token)
	// earliest among the lines not yet taken.
	var pending []children.Line
	next := func(text string) (string, error) {
		for {
			for i, l := range pending {
				if strings.HasPrefix(l.Text, text) {
					pending = append(pending[:i], pending[i+1:]...)
					if token, ok := strings.CutPrefix(l.Text, "leading "); ok {
						fmt.Printf("%s leads with fencing token %s\n", l.ID, token)
					}
					return l.ID, nil
				}
			}
			select {
			case l := <-g.Lines:
				if strings.HasPrefix(l.Text, "error") {
					return "", fmt.Errorf("%s: %s", l.ID, l.Text)
				}
				pending = append(pending, l)
			case <-time.After(30 * time.Second):
				return "", fmt.Errorf("no instance printed %q within 30s", text)
			}
		}
	}
	// start starts instance id and returns once it is a live candidate.
	start := func(id string) error {
		child, err := g.Start(id, "ROLLING_INSTANCE="+id, "ELECTION_DSN="+dsn)
		if err != nil {
			return err
		}
		procs[id] = child
		if _, err := next("campaigning"); err != nil {
			return err
		}
		for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
			cands, err := ops.Candidates(context.Background())
			if errors.Is(err, election.ErrSchema) {
				continue // the first instance creates the tables
			} else if err != nil {
				return err
			}
			for _, k := range cands {
				if k.Identity == id && k.Alive {
					return nil
				}
			}
		}
		return fmt.Errorf("%s not a live candidate within 30s", id)
	}
	for i := 1; i <= 3; i++ {
		if err := start("v1-" + strconv.Itoa(i)); err != nil {
			return err
		}
	}
	leader, err := next("leading")
	if err != nil {
		return err
	}
	for i := 1; i <= 3; i++ {
		time.Sleep(2 * time.Second)
		if err := start("v2-" + strconv.Itoa(i)); err != nil {
			return err
		}
		old := "v1-" + strconv.Itoa(i)
		fmt.Printf("stopping %s with SIGTERM\n", old)
		procs[old].Stop(syscall.SIGTERM)
		if old == leader {
			if leader, err = next("leading"); err != nil {
				return err
			}
		}
	}
	// The record of the deploy: the v1 term, then one v2 term, which leads.
	ctx, cancel = context.WithTimeout(context.Background(), 30*time.Second)
	terms, err := ops.History(ctx, 0)
	cancel()
	if err != nil {
		return err
	}
	if len(terms) != 2 || !strings.HasPrefix(terms[1].Identity, "v1-") || terms[0].Identity != leader || !strings.HasPrefix(leader, "v2-") {
		var ids []string
		for _, t := range terms {
			ids = append(ids, t.Identity)
		}
		return fmt.Errorf("the deploy's terms, newest first: %v; want one of v2, then one of v1", ids)
	}
	time.Sleep(2 * time.Second)
	fmt.Printf("killing %s with SIGKILL\n", leader)
	procs[leader].Stop(syscall.SIGKILL)
	killed := leader
	if leader, err = next("leading"); err != nil {
		return err
	}
	if err := start(killed); err != nil { // as its supervisor would
		return err
	}
	time.Sleep(2 * time.Second)
	fmt.Printf("stopping %s with SIGTERM: it resigns\n", leader)
	procs[leader].Stop(syscall.SIGTERM)
	if _, err := next("leading"); err != nil {
		return err
	}
	if svg == "" {
		return nil
	}
	time.Sleep(2 * time.Second) // the last term, long enough to be seen
	return draw(ops, svg)
}

// draw writes the election's history to the file svg.
func draw(ops *election.Operator, svg string) error {
	f, err := os.Create(svg)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := ops.HistorySVG(ctx, f, 0); err != nil {
		f.Close()
		return err
	}
	fmt.Printf("drew the history to %s\n", svg)
	return f.Close()
}

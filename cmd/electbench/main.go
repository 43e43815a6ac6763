// Command electbench measures leader-election failover and safety under
// real faults: this library's GetLock and LeaseRow strategies against the
// single-row timeout recipe (at its published 20 s and at our lease) and
// against GET_LOCK as commonly hand-rolled; and, with -contenders, against
// etcd's own election (client/v3/concurrency) on a private etcd of one node
// or three, which needs the binaries scripts/etcd.sh builds (ensure_etcd).
// Candidates are separate processes, so that SIGKILL, SIGTERM and SIGSTOP
// hit the leader alone; when the faults include a blackhole, a connection
// reset or KILL CONNECTION, each is behind its own TCP fault proxy and
// database user, so that these do too. A server restart hits everyone.
// Every acting leader writes a row every few milliseconds (fenced for this
// library and etcd), and a checker reads the history afterwards.
//
//	electbench                      the full comparison (20 runs per fault)
//	electbench -quick               every contender and fault once, in about two minutes
//	electbench -contenders getlock,lease,etcd,etcd-3 -faults sigkill,sigstop,raft-leader   with etcd
//	electbench chaos -faults 1000   random faults against one contender, then both checkers
//	electbench chaos -galera -contender lease   the same on a private three-node Galera cluster
//	electbench chaos -policies      the same with priorities, preferred leaders and a flapping health check
//	electbench chaos -fault-kinds clock-forward,clock-back,clock-strobe,clock-back-kill,sigkill   the server's clock stepped
//	electbench scale                cost and SIGKILL failover at 3 and at 1000 candidates, and 100 elections per process
//	electbench report -svg c.svg a.json b.json   one table and chart from several runs
//
// It starts a private MariaDB/MySQL from PATH, or uses -dsn (whose user must
// create databases and users; the restart and clock faults then are
// skipped); for the clock faults, under libfaketime. Output: a table on
// stdout, -json FILE and -svg FILE.
//
// # How the files fit together
//
// The parent process drives an arena of candidate processes; each candidate
// re-executes this binary and runs one contender; the parent injects faults
// into the leader; once the candidates stop, the checker reads the history;
// the report summarizes.
//
//   - main.go: this overview, the subcommand dispatch and the options the
//     comparison, chaos and scale share.
//   - contenders.go: what runs inside a candidate process (the candidate
//     subcommand): this library's strategies, in one election or in several
//     on one *sql.DB, with or without leader policies, the timeout recipe
//     and plain GET_LOCK, each printing its terms and writes as JSON events.
//   - arena.go: the parent's side of the candidates: their database, users,
//     fault proxies (only when a fault needs them) and processes, their
//     events, and who leads.
//   - etcd.go: the etcd contenders: the private etcd the arena starts
//     for them, what the parent reads from it over HTTP (health, metrics,
//     who leads), and their candidate process, electbench-etcd (the
//     module in ./etcd, so that this one links no etcd client), which also
//     dumps their writes for the checker. Both print the events of
//     internal/benchevent.
//   - faults.go: the faults and what injecting one into the leader does,
//     how the parent waits for the next leader, and how it heals.
//   - trap.go: the faults at the worst moments: a candidate stops or kills
//     itself at a failpoint the parent armed (granted the lock, claimed,
//     inside a fenced transaction before its COMMIT).
//   - clock.go: the clock faults (chaos): the server's wall clock stepped
//     while a healthy leader leads, or as it is killed; the terms they
//     ended and the kills' failover beside plain SIGKILL's.
//   - check.go: the checker, which reads the writes and events after the
//     candidates stopped and finds the broken guarantees.
//   - linearize.go: the second checker: the register's history, with the
//     parent's reads, checked by Porcupine against a fenced register.
//   - overlap.go: the third (chaos): the leaders' own acting spans, from
//     their events on the machine's clock, any two at once laid to the
//     fault during which they began.
//   - report.go: summaries, the tables, the SVG chart, the JSON files and the
//     report subcommand that merges the JSON of several runs.
//   - bench.go: the comparison (the default subcommand): every contender
//     against every fault, and the steady-state cost of an idle election;
//     its run of one arena (benchContender) serves scale too.
//   - chaos.go: the chaos subcommand: random faults against one contender.
//   - scale.go: the scale subcommand: how the steady cost and the SIGKILL
//     failover grow from a few candidates to many, against the goals, and
//     what many elections in each process cost.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"
	"time"

	_ "github.com/go-sql-driver/mysql"

	"github.com/sqlelect/election/internal/mysqltest"
)

// main runs the subcommand named first (candidate, chaos, scale, report),
// or the comparison.
func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	var err error
	switch {
	case len(os.Args) > 1 && os.Args[1] == "candidate":
		err = candidateMain(ctx, os.Args[2:])
	case len(os.Args) > 1 && os.Args[1] == "chaos":
		err = chaosMain(ctx, os.Args[2:], os.Stdout)
	case len(os.Args) > 1 && os.Args[1] == "scale":
		err = scaleMain(ctx, os.Args[2:], os.Stdout)
	case len(os.Args) > 1 && os.Args[1] == "report":
		err = reportMain(os.Args[2:], os.Stdout)
	default:
		err = benchMain(ctx, os.Args[1:], os.Stdout)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "electbench:", err)
		os.Exit(1)
	}
}

// timing is the contest's common timing, the same for every candidate.
type timing struct {
	Interval, Lease, Margin, WriteEvery time.Duration
	Check                               time.Duration // this library's CheckInterval (0: Interval)
}

// options are the flags the comparison, chaos and scale share.
type options struct {
	dsn        string
	tm         timing
	candidates int
	limit      time.Duration
	jsonOut    string
	verbose    bool
	progress   *progress // made on first use (steps)
}

// steps returns where the run's progress is printed: stderr.
func (o *options) steps() *progress {
	if o.progress == nil {
		o.progress = newProgress(os.Stderr)
	}
	return o.progress
}

// flags registers the shared options on fs, but for -candidates
// (candidatesFlag), which scale replaces with its sizes.
func (o *options) flags(fs *flag.FlagSet) {
	fs.StringVar(&o.dsn, "dsn", "", "use this server instead of a private one (root-like user; no restart fault)")
	fs.DurationVar(&o.tm.Interval, "interval", 200*time.Millisecond, "keepalive and poll interval of every contender")
	fs.DurationVar(&o.tm.Lease, "lease", 2*time.Second, "lease of this library's contenders, and the session TTL of etcd and etcd-3 (rounded up to seconds)")
	fs.DurationVar(&o.tm.Margin, "margin", time.Second, "margin of this library's contenders; the recipe-lease contender times out after lease+margin")
	fs.DurationVar(&o.tm.WriteEvery, "write-every", 20*time.Millisecond, "how often an acting leader writes")
	fs.DurationVar(&o.tm.Check, "check-interval", 0, "how long this library's waiters block in GET_LOCK or between lease tries (0: -interval); raise it for many candidates")
	fs.DurationVar(&o.limit, "limit", 0, "how long to wait for a new leader after a fault (0: 2×(lease+margin)+2s, 25s for recipe-20s and 65s for etcd-60s)")
	fs.StringVar(&o.jsonOut, "json", "", "write the results as JSON to this file")
	fs.BoolVar(&o.verbose, "v", false, "print every trial")
}

// candidatesFlag registers -candidates on fs.
func (o *options) candidatesFlag(fs *flag.FlagSet) {
	fs.IntVar(&o.candidates, "candidates", 3, "candidate processes per contender")
}

// limitFor is how long to wait for a new leader of contender after a fault.
func (o *options) limitFor(contender string) time.Duration {
	switch {
	case o.limit > 0:
		return o.limit
	case contender == recipe20:
		return 25 * time.Second
	case contender == etcd60:
		return 65 * time.Second
	}
	return 2*(o.tm.Lease+o.tm.Margin) + 2*time.Second
}

// server starts the private server, or connects to -dsn.
func (o *options) server(ctx context.Context) (*mysqltest.Server, error) {
	if o.dsn != "" {
		os.Setenv(mysqltest.EnvDSN, o.dsn)
		return mysqltest.Start(ctx)
	}
	bin := mysqltest.PrivateBinary()
	if bin == "" {
		return nil, errors.New("no mariadbd/mysqld on PATH: install mariadb-server (scripts/mariadb.sh) or pass -dsn")
	}
	return mysqltest.StartPrivate(ctx, bin)
}

// known returns an error naming the first of names that is not one of all;
// kind ("contender", "fault") words the message.
func known(kind string, names, all []string) error {
	for _, n := range names {
		if !slices.Contains(all, n) {
			return fmt.Errorf("unknown %s %q; the %ss are %s", kind, n, kind, join(all))
		}
	}
	return nil
}

// join lists names as the flags take them.
func join(xs []string) string { return strings.Join(xs, ",") }

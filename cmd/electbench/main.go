// Command electbench measures leader-election failover and safety under
// real faults: this library's GetLock and LeaseRow strategies against the
// single-row timeout recipe (at its published 20 s and at our lease) and
// against GET_LOCK as commonly hand-rolled. Candidates are separate
// processes, each behind its own TCP fault proxy and database user, so that
// SIGKILL, SIGTERM, SIGSTOP, a blackhole, a connection reset and KILL
// CONNECTION hit the leader alone; a server restart hits everyone. Every
// acting leader writes a row every few milliseconds (fenced for this
// library), and a checker reads the history afterwards.
//
//	electbench                      the full comparison (20 runs per fault)
//	electbench -quick               every contender and fault once, in about two minutes
//	electbench chaos -faults 1000   random faults against one contender, then the checker
//	electbench report -svg c.svg a.json b.json   one table and chart from several runs
//
// It starts a private MariaDB/MySQL from PATH, or uses -dsn (whose user must
// create databases and users; the restart fault then is skipped). Output: a
// table on stdout, -json FILE and -svg FILE.
package main

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"
	"time"

	_ "github.com/go-sql-driver/mysql"

	"github.com/sqlelect/election/internal/mysqltest"
)

var errBadConn = driver.ErrBadConn

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	var err error
	switch {
	case len(os.Args) > 1 && os.Args[1] == "candidate":
		err = candidateMain(ctx, os.Args[2:])
	case len(os.Args) > 1 && os.Args[1] == "chaos":
		err = chaosMain(ctx, os.Args[2:], os.Stdout)
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

func candidateMain(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("candidate", flag.ContinueOnError)
	contender := fs.String("contender", libGetLock, "")
	id := fs.String("id", "", "")
	dsn := fs.String("dsn", "", "")
	var tm timing
	fs.DurationVar(&tm.Interval, "interval", time.Second, "")
	fs.DurationVar(&tm.Lease, "lease", 5*time.Second, "")
	fs.DurationVar(&tm.Margin, "margin", time.Second, "")
	fs.DurationVar(&tm.WriteEvery, "write-every", 20*time.Millisecond, "")
	fs.DurationVar(&tm.Check, "check", 0, "")
	if err := fs.Parse(args); err != nil {
		return err
	}
	return runCandidate(ctx, *contender, *id, *dsn, tm)
}

// options are the flags the comparison and chaos share.
type options struct {
	dsn        string
	tm         timing
	candidates int
	limit      time.Duration
	jsonOut    string
	verbose    bool
}

func (o *options) flags(fs *flag.FlagSet) {
	fs.StringVar(&o.dsn, "dsn", "", "use this server instead of a private one (root-like user; no restart fault)")
	fs.DurationVar(&o.tm.Interval, "interval", 200*time.Millisecond, "keepalive and poll interval of every contender")
	fs.DurationVar(&o.tm.Lease, "lease", 2*time.Second, "lease of this library's contenders")
	fs.DurationVar(&o.tm.Margin, "margin", time.Second, "margin of this library's contenders; the recipe-lease contender times out after lease+margin")
	fs.DurationVar(&o.tm.WriteEvery, "write-every", 20*time.Millisecond, "how often an acting leader writes")
	fs.DurationVar(&o.tm.Check, "check-interval", 0, "how long this library's waiters block in GET_LOCK or between lease tries (0: -interval); raise it for many candidates")
	fs.IntVar(&o.candidates, "candidates", 3, "candidate processes per contender")
	fs.DurationVar(&o.limit, "limit", 0, "how long to wait for a new leader after a fault (0: 2×(lease+margin)+2s, and 25s for recipe-20s)")
	fs.StringVar(&o.jsonOut, "json", "", "write the results as JSON to this file")
	fs.BoolVar(&o.verbose, "v", false, "print every trial")
}

// limitFor is how long to wait for a new leader of contender after a fault.
func (o *options) limitFor(contender string) time.Duration {
	switch {
	case o.limit > 0:
		return o.limit
	case contender == recipe20:
		return 25 * time.Second
	}
	return 2*(o.tm.Lease+o.tm.Margin) + 2*time.Second
}

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

type results struct {
	Server    string    `json:"server"`
	Timing    timing    `json:"timing"`
	Trials    []trial   `json:"trials"`
	Summaries []summary `json:"summaries"`
	Verdicts  []verdict `json:"verdicts"`
	Costs     []steady  `json:"steady_state"`
}

func benchMain(ctx context.Context, args []string, out *os.File) error {
	fs := flag.NewFlagSet("electbench", flag.ContinueOnError)
	var o options
	o.flags(fs)
	contenders := fs.String("contenders", join(allContenders), "contenders to run")
	faults := fs.String("faults", join(allFaults), "faults to inject")
	reps := fs.Int("reps", 20, "runs per contender and fault")
	quick := fs.Bool("quick", false, "every contender but recipe-20s and every fault once, with short timing: about two minutes")
	svg := fs.String("svg", "", "write the chart as SVG to this file")
	if err := fs.Parse(args); err != nil {
		return err
	}
	cs, fl := strings.Split(*contenders, ","), strings.Split(*faults, ",")
	if *quick {
		cs = slices.DeleteFunc(cs, func(c string) bool { return c == recipe20 })
		*reps = 1
		o.tm = timing{Interval: 100 * time.Millisecond, Lease: time.Second, Margin: time.Second, WriteEvery: 20 * time.Millisecond}
		o.limit = 4 * time.Second
	}
	for _, c := range cs {
		if !slices.Contains(allContenders, c) {
			return fmt.Errorf("unknown contender %q; the contenders are %s", c, join(allContenders))
		}
	}
	for _, f := range fl {
		if !slices.Contains(allFaults, f) {
			return fmt.Errorf("unknown fault %q; the faults are %s", f, join(allFaults))
		}
	}
	srv, err := o.server(ctx)
	if err != nil {
		return err
	}
	defer srv.Close()
	if !srv.Private() {
		fl = slices.DeleteFunc(fl, func(f string) bool { return f == fRestart })
	}
	res := results{Server: srv.Describe(), Timing: o.tm}
	for _, c := range cs {
		a, err := newArena(ctx, srv, c, o.tm, o.candidates)
		if err != nil {
			return err
		}
		cost, err := measureSteady(ctx, a, o.candidates)
		if err != nil {
			a.close()
			return err
		}
		res.Costs = append(res.Costs, cost)
		for _, f := range fl {
			for i := range *reps {
				if ctx.Err() != nil {
					a.close()
					return ctx.Err()
				}
				fmt.Fprintf(os.Stderr, "\r%-14s %-16s %3d/%d", c, f, i+1, *reps)
				tr, err := a.inject(ctx, f, o.limitFor(c))
				if err != nil {
					a.close()
					return err
				}
				if o.verbose {
					fmt.Fprintf(os.Stderr, "  failover %s, old knew %s\n", secs(tr.FailoverS), secs(tr.KnewS))
				}
				res.Trials = append(res.Trials, tr)
			}
		}
		a.stopAll()
		v, err := check(ctx, a)
		a.close()
		if err != nil {
			return err
		}
		res.Verdicts = append(res.Verdicts, v)
	}
	fmt.Fprintln(os.Stderr)
	res.Summaries = summarize(res.Trials)
	fmt.Fprintf(out, "%s; interval %v, lease %v, margin %v; %d candidates\n\n", res.Server, o.tm.Interval, o.tm.Lease, o.tm.Margin, o.candidates)
	printTable(out, res.Summaries, res.Verdicts, res.Costs)
	for _, v := range res.Verdicts {
		for _, msg := range v.Violations {
			fmt.Fprintf(out, "\nVIOLATION (%s): %s", v.Contender, msg)
		}
	}
	if *svg != "" {
		f, err := os.Create(*svg)
		if err != nil {
			return err
		}
		chart(f, res.Summaries, cs, fl)
		if err := f.Close(); err != nil {
			return err
		}
	}
	return writeJSON(o.jsonOut, res)
}

func writeJSON(path string, v any) error {
	if path == "" {
		return nil
	}
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, b, 0o644)
}

// reportMain merges the JSON results of several runs (say, the slow
// recipe-20s with fewer runs than the others) into one table, chart and
// JSON file.
func reportMain(args []string, out *os.File) error {
	fs := flag.NewFlagSet("electbench report", flag.ContinueOnError)
	svg := fs.String("svg", "", "write the chart as SVG to this file")
	jsonOut := fs.String("json", "", "write the merged results as JSON to this file")
	if err := fs.Parse(args); err != nil {
		return err
	}
	var all results
	var contenders, faults []string
	for _, path := range fs.Args() {
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		var r results
		if err := json.Unmarshal(b, &r); err != nil {
			return fmt.Errorf("%s: %w", path, err)
		}
		fmt.Fprintf(out, "%s: %s; interval %v, lease %v, margin %v\n", path, r.Server, r.Timing.Interval, r.Timing.Lease, r.Timing.Margin)
		all.Trials = append(all.Trials, r.Trials...)
		all.Verdicts = append(all.Verdicts, r.Verdicts...)
		all.Costs = append(all.Costs, r.Costs...)
		for _, t := range r.Trials {
			if !slices.Contains(contenders, t.Contender) {
				contenders = append(contenders, t.Contender)
			}
			if !slices.Contains(faults, t.Fault) {
				faults = append(faults, t.Fault)
			}
		}
	}
	all.Summaries = summarize(all.Trials)
	fmt.Fprintln(out)
	printTable(out, all.Summaries, all.Verdicts, all.Costs)
	if *svg != "" {
		f, err := os.Create(*svg)
		if err != nil {
			return err
		}
		chart(f, all.Summaries, contenders, faults)
		if err := f.Close(); err != nil {
			return err
		}
	}
	return writeJSON(*jsonOut, all)
}

// measureSteady counts the statements and connections of an idle election
// with the arena's candidates, over five seconds after it has settled.
func measureSteady(ctx context.Context, a *arena, n int) (steady, error) {
	if _, ok := a.leader(30 * time.Second); !ok {
		return steady{}, fmt.Errorf("%s: no leader", a.contender)
	}
	if !a.ready(30 * time.Second) {
		return steady{}, fmt.Errorf("%s: not every candidate process started", a.contender)
	}
	questions := func(db *sql.DB) (float64, error) {
		var name string
		var v float64
		err := db.QueryRowContext(ctx, "SHOW GLOBAL STATUS LIKE 'Questions'").Scan(&name, &v)
		return v, err
	}
	// The acting leader's writes are the benchmark's load, not the
	// election's cost: pause them while counting.
	a.signalAll(sigQuiet)
	defer a.signalAll(sigResume)
	time.Sleep(a.tm.WriteEvery + time.Second) // writes in flight end
	before, err := questions(a.admin)
	if err != nil {
		return steady{}, err
	}
	t0 := time.Now()
	time.Sleep(5 * time.Second)
	after, err := questions(a.admin)
	if err != nil {
		return steady{}, err
	}
	elapsed := time.Since(t0).Seconds()
	var conns float64
	if err := a.admin.QueryRowContext(ctx, "SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE db = ? AND user <> 'root'", a.db).Scan(&conns); err != nil {
		return steady{}, err
	}
	q := (after - before - 1) / elapsed // 1: the first SHOW STATUS
	return steady{Contender: a.contender, Candidates: n, QueriesPerSec: q, QueriesPerCand: q / float64(n), ConnsPerCand: conns / float64(n)}, nil
}

// chaosMain injects random faults into one contender, then runs the checker.
func chaosMain(ctx context.Context, args []string, out *os.File) error {
	fs := flag.NewFlagSet("electbench chaos", flag.ContinueOnError)
	var o options
	o.flags(fs)
	contender := fs.String("contender", libGetLock, "the contender to torture")
	n := fs.Int("faults", 100, "how many faults to inject")
	duration := fs.Duration("duration", 0, "stop injecting after this long (0: after -faults)")
	faults := fs.String("fault-kinds", join(allFaults), "faults to draw from")
	seed := fs.Uint64("seed", uint64(time.Now().UnixNano()), "random seed, to replay a run")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if !slices.Contains(allContenders, *contender) {
		return fmt.Errorf("unknown contender %q; the contenders are %s", *contender, join(allContenders))
	}
	kinds := strings.Split(*faults, ",")
	srv, err := o.server(ctx)
	if err != nil {
		return err
	}
	defer srv.Close()
	if !srv.Private() {
		kinds = slices.DeleteFunc(kinds, func(f string) bool { return f == fRestart })
	}
	a, err := newArena(ctx, srv, *contender, o.tm, o.candidates)
	if err != nil {
		return err
	}
	defer a.close()
	rng := rand.New(rand.NewPCG(*seed, 0))
	start := time.Now()
	counts := map[string]int{}
	var trials []trial
	for i := 0; i < *n && ctx.Err() == nil && (*duration == 0 || time.Since(start) < *duration); i++ {
		f := kinds[rng.IntN(len(kinds))]
		fmt.Fprintf(os.Stderr, "\rchaos %s seed %d: fault %d/%d %-16s", *contender, *seed, i+1, *n, f)
		tr, err := a.inject(ctx, f, o.limitFor(*contender))
		if err != nil {
			return err
		}
		counts[f]++
		trials = append(trials, tr)
		time.Sleep(time.Duration(rng.IntN(300)) * time.Millisecond)
	}
	fmt.Fprintln(os.Stderr)
	a.stopAll()
	v, err := check(ctx, a)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "chaos: %s, seed %d, %d faults in %v: %v\n", *contender, *seed, len(trials), time.Since(start).Round(time.Second), counts)
	printTable(out, summarize(trials), []verdict{v}, nil)
	if err := writeJSON(o.jsonOut, map[string]any{"seed": *seed, "faults": counts, "trials": trials, "verdict": v}); err != nil {
		return err
	}
	if len(v.Violations) > 0 {
		for _, msg := range v.Violations {
			fmt.Fprintf(out, "\nVIOLATION: %s", msg)
		}
		return fmt.Errorf("%d violations", len(v.Violations))
	}
	fmt.Fprintln(out, "\nno violation")
	return nil
}

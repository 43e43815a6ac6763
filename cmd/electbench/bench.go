package main

import (
	"bytes"
	"context"
	"database/sql"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/sqlelect/election/internal/benchevent"
	"github.com/sqlelect/election/internal/mysqltest"
)

// benchMain is the comparison: every contender's steady-state cost, reps
// runs of every fault against it, and the checker's verdict; then the
// tables, the chart and the JSON.
func benchMain(ctx context.Context, args []string, out *os.File) error {
	fs := flag.NewFlagSet("electbench", flag.ContinueOnError)
	var o options
	o.flags(fs)
	o.candidatesFlag(fs)
	contenders := fs.String("contenders", join(allContenders), "contenders to run; also "+join(etcdContenders)+
		": etcd's election (client/v3/concurrency) on a private etcd of one node, three, and one with etcd's default TTL")
	faults := fs.String("faults", join(baseFaults), "faults to inject; also "+fRaftLeader+" (etcd-3)")
	var bins etcdBinaries
	fs.StringVar(&bins.server, "etcd", os.Getenv(envEtcd), "the etcd server the etcd contenders run (default $"+envEtcd+")")
	fs.StringVar(&bins.candidate, "etcd-candidate", os.Getenv(envEtcdCandidate), "electbench-etcd, their candidate process (default $"+envEtcdCandidate+")")
	base := fs.String("baseline", "", "an electbench binary of another build (go build -o FILE ./cmd/electbench at that commit), "+
		"whose candidates the contenders getlock"+baseline+" and lease"+baseline+" run, beside this build's; "+
		"getlock"+ranked+" and lease"+ranked+" run this build with candidate i of priority i")
	reps := fs.Int("reps", 20, "runs per contender and fault")
	quick := fs.Bool("quick", false, "every contender but recipe-20s and etcd-60s and every fault once, with short timing (unless given): about two minutes")
	svg := fs.String("svg", "", "write the chart as SVG to this file")
	if err := fs.Parse(args); err != nil {
		return err
	}
	cs, fl := strings.Split(*contenders, ","), strings.Split(*faults, ",")
	if *quick {
		cs = slices.DeleteFunc(cs, func(c string) bool { return c == recipe20 || c == etcd60 })
		if err := quickDefaults(fs); err != nil {
			return err
		}
	}
	if err := known("contender", cs, slices.Concat(allContenders, etcdContenders, variantContenders)); err != nil {
		return err
	}
	if slices.ContainsFunc(cs, func(c string) bool { return strings.HasSuffix(c, baseline) }) {
		if _, err := os.Stat(*base); *base == "" || err != nil {
			return fmt.Errorf("the contenders getlock%s and lease%s need -baseline FILE, an electbench binary of the build to compare with", baseline, baseline)
		}
	}
	if err := known("fault", fl, append(slices.Clone(baseFaults), fRaftLeader)); err != nil {
		return err
	}
	if slices.ContainsFunc(cs, isEtcd) {
		if err := bins.check(); err != nil {
			return err
		}
	}
	res := results{Server: "no MySQL server", Timing: o.tm}
	var srv *mysqltest.Server // only if a contender needs it
	if slices.ContainsFunc(cs, func(c string) bool { return !isEtcd(c) }) {
		var err error
		if srv, err = o.server(ctx); err != nil {
			return err
		}
		defer srv.Close()
		res.Server = srv.Describe()
	}
	for _, c := range cs {
		spec := arenaSpec{contender: c, tm: o.tm, candidates: o.candidates, faults: faultsFor(c, srv, nil, fl), etcdBins: bins, baseline: *base}
		if err := benchContender(ctx, &o, srv, spec, *reps, &res); err != nil {
			return err
		}
	}
	o.steps().done()
	res.Summaries = summarize(res.Trials)
	printResults(out, &o, &res)
	if err := writeChart(*svg, res.Summaries, cs, fl); err != nil {
		return err
	}
	return writeJSON(o.jsonOut, res)
}

// quickDefaults gives the flags of -quick that were not given their short
// values: one run of each fault, short timing.
func quickDefaults(fs *flag.FlagSet) error {
	given := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { given[f.Name] = true })
	for _, kv := range [][2]string{{"reps", "1"}, {"interval", "100ms"}, {"lease", "1s"}, {"margin", "1s"}, {"limit", "4s"}} {
		if !given[kv[0]] {
			if err := fs.Set(kv[0], kv[1]); err != nil {
				return fmt.Errorf("-quick: %w", err)
			}
		}
	}
	return nil
}

// benchContender runs the arena spec names: its steady-state cost, reps
// runs of every one of its faults, then the checker; it adds all to res.
func benchContender(ctx context.Context, o *options, srv *mysqltest.Server, spec arenaSpec, reps int, res *results) error {
	return benchArena(ctx, srv, spec, res, func(a *arena) error {
		for _, f := range spec.faults {
			for i := range reps {
				if ctx.Err() != nil {
					return ctx.Err()
				}
				o.steps().step("%-14s ×%-5d %-16s %3d/%d", spec.contender, spec.candidates, f, i+1, reps)
				tr, err := a.inject(ctx, f, o.limitFor(spec.contender))
				if err != nil {
					return err
				}
				if o.verbose {
					fmt.Fprintf(os.Stderr, "  failover %s, old knew %s\n", secs(tr.FailoverS), secs(tr.KnewS))
				}
				res.Trials = append(res.Trials, tr)
			}
		}
		return nil
	})
}

// benchArena runs the arena spec names: its steady-state cost, then
// faults, then the checker; it adds the cost and the verdict to res.
func benchArena(ctx context.Context, srv *mysqltest.Server, spec arenaSpec, res *results, faults func(a *arena) error) error {
	a, err := newArena(ctx, srv, spec)
	if err != nil {
		return err
	}
	defer a.close()
	cost, err := measureSteady(ctx, a)
	if err != nil {
		return err
	}
	res.Costs = append(res.Costs, cost)
	if err := faults(a); err != nil {
		return err
	}
	a.stopAll()
	v, err := check(ctx, a)
	if err != nil {
		return err
	}
	res.Verdicts = append(res.Verdicts, v)
	if a.etcd != nil {
		res.Etcd = append(res.Etcd, a.etcdSetting(ctx))
	}
	return nil
}

// printResults writes the comparison's setting, its tables and every
// violation.
func printResults(out io.Writer, o *options, res *results) {
	fmt.Fprintf(out, "%s; interval %v, lease %v, margin %v; %d candidates\n", res.Server, o.tm.Interval, o.tm.Lease, o.tm.Margin, o.candidates)
	printEtcd(out, res.Etcd)
	fmt.Fprintln(out)
	printTable(out, res.Summaries, res.Verdicts, res.Costs)
	printViolations(out, res.Verdicts)
}

// printViolations writes every violation the verdicts found.
func printViolations(out io.Writer, verdicts []verdict) {
	for _, v := range verdicts {
		for _, msg := range v.Violations {
			fmt.Fprintf(out, "\nVIOLATION (%s): %s", v.Contender, msg)
		}
	}
}

// steady is what an idle election, or the idle elections of an arena whose
// candidates run several, costs the server.
type steady struct {
	Contender  string `json:"contender"`
	Candidates int    `json:"candidates"`
	Elections  int    `json:"elections,omitempty"` // per candidate process, if more than one
	// QueriesPerSec are the MySQL server's statements (Questions); none
	// for etcd.
	QueriesPerSec float64 `json:"queries_per_s,omitempty"`
	// Connections are the candidates' sessions on the MySQL server, or
	// their TCP connections for etcd.
	Connections    int     `json:"connections"`
	ConnsPerCand   float64 `json:"connections_per_candidate"`
	QueriesPerCand float64 `json:"queries_per_s_per_candidate,omitempty"`
	// RoundTripsPerSec adds the prepares and the pings to the statements:
	// with the driver's default DSN a statement with arguments is a
	// PREPARE and an EXECUTE, and Questions counts only the EXECUTE; a
	// ping (plain GET_LOCK's keepalive) is a round trip Questions does not
	// count, and Com_admin_commands does.
	RoundTripsPerSec float64 `json:"round_trips_per_s,omitempty"`
	// RequestsPerSec, for etcd alone, are the gRPC messages its nodes
	// received (etcdCluster.requests): a unary request, or a keepalive on
	// the lease's stream, counts one, as a round trip does for MySQL.
	RequestsPerSec float64 `json:"server_requests_per_s,omitempty"`
	// AllLedS is how long after the candidates started every election had
	// had a leader, if there are several.
	AllLedS float64 `json:"all_led_s,omitempty"`
	// What the server (all of etcd's nodes) and the candidate processes
	// use over the same window: CPU in percent of one core, resident
	// memory in MiB (the processes': the most of any).
	ServerCPU float64 `json:"server_cpu_pct,omitempty"`
	ServerRSS float64 `json:"server_rss_mib,omitempty"`
	ProcCPU   float64 `json:"process_cpu_pct_max,omitempty"`
	ProcRSS   float64 `json:"process_rss_mib_max,omitempty"`
}

// usage is a process's CPU time so far and its resident memory, from
// /proc (Linux, as the arena is: Pdeathsig).
func usage(pid int) (cpu time.Duration, rssMiB float64) {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, 0
	}
	// The fields after the command, which may hold spaces, in parentheses.
	f := strings.Fields(string(stat[bytes.LastIndexByte(stat, ')')+1:]))
	if len(f) > 21 {
		utime, _ := strconv.ParseInt(f[11], 10, 64)
		stime, _ := strconv.ParseInt(f[12], 10, 64)
		rss, _ := strconv.ParseInt(f[21], 10, 64)
		// Clock ticks of 10 ms (USER_HZ is 100 on every Linux port Go
		// supports), pages of 4 KiB.
		cpu, rssMiB = time.Duration(utime+stime)*10*time.Millisecond, float64(rss*int64(os.Getpagesize()))/(1<<20)
	}
	return cpu, rssMiB
}

// measureSteady counts the requests (MySQL's statements, or etcd's gRPC
// messages), connections and CPU of the arena's idle elections, over a
// window (steadyWindow) after they have settled.
func measureSteady(ctx context.Context, a *arena) (steady, error) {
	n := len(a.all())
	if n == 0 {
		return steady{}, fmt.Errorf("%s: no candidates to measure", a.contender)
	}
	const settle = 30 * time.Second
	t0 := time.Now()
	if _, ok := a.leader(settle); !ok {
		return steady{}, fmt.Errorf("%s: no acting leader within %v (%s)", a.contender, settle, a.census())
	}
	if !a.ready(settle) {
		return steady{}, fmt.Errorf("%s: not every candidate process started within %v (%s)", a.contender, settle, a.census())
	}
	// Thousands of elections per process take a while to start on a small
	// machine: how long is reported, not bounded.
	allLed := settle + time.Duration(a.elections)*20*time.Millisecond
	if !a.othersLed(allLed) {
		return steady{}, fmt.Errorf("%s: not every one of the %d elections has had a leader within %v (%s)", a.contender, a.elections, allLed, a.census())
	}
	allLedS := time.Since(t0).Seconds()
	// Every candidate holds a connection once it has joined: with many
	// candidates the last ones are still joining when the first leads, and
	// their joins are not the idle cost.
	if !a.await(settle, func() bool { return a.connections(ctx) >= n }) {
		return steady{}, fmt.Errorf("%s: fewer than %d connections within %v (%s)", a.contender, n, settle, a.census())
	}
	// Nor are the statements of the joins that follow: wait until the rate
	// holds still over two windows.
	if err := a.steadyRate(ctx, settle); err != nil {
		return steady{}, err
	}
	// The acting leader's writes are the benchmark's load, not the
	// election's cost: pause them while counting.
	a.signalAll(benchevent.Quiet)
	defer a.signalAll(benchevent.Resume)
	time.Sleep(a.tm.WriteEvery + time.Second) // writes in flight end
	before, beforeBesides, err := a.counts(ctx)
	if err != nil {
		return steady{}, err
	}
	servers := a.serverPIDs()
	pids := slices.Clone(servers)
	for _, p := range a.all() {
		pids = append(pids, p.cmd.Process.Pid)
	}
	cpu0 := make([]time.Duration, len(pids))
	for i, pid := range pids {
		cpu0[i], _ = usage(pid)
	}
	t1 := time.Now()
	time.Sleep(a.steadyWindow())
	after, afterBesides, err := a.counts(ctx)
	if err != nil {
		return steady{}, err
	}
	elapsed := time.Since(t1).Seconds()
	conns := a.connections(ctx)
	q := (after - before - a.probe()) / elapsed
	s := steady{Contender: a.contender, Candidates: n, Connections: conns, ConnsPerCand: float64(conns) / float64(n)}
	if a.etcd != nil {
		s.RequestsPerSec = q
	} else {
		s.QueriesPerSec, s.QueriesPerCand, s.RoundTripsPerSec = q, q/float64(n), q+(afterBesides-beforeBesides)/elapsed
	}
	if a.elections > 1 {
		s.Elections, s.AllLedS = a.elections, allLedS
	}
	for i, pid := range pids {
		cpu, rss := usage(pid)
		pct := 100 * (cpu - cpu0[i]).Seconds() / elapsed
		if i < len(servers) {
			s.ServerCPU, s.ServerRSS = s.ServerCPU+pct, s.ServerRSS+rss
			continue
		}
		s.ProcCPU, s.ProcRSS = max(s.ProcCPU, pct), max(s.ProcRSS, rss)
	}
	return s, nil
}

// steadyRate waits, up to limit, until the server's statement rate over
// two seconds is within a fifth of the two seconds before.
func (a *arena) steadyRate(ctx context.Context, limit time.Duration) error {
	prev := -1.0
	for end := time.Now().Add(limit); time.Now().Before(end); {
		q0, _, err := a.counts(ctx)
		if err != nil {
			return err
		}
		time.Sleep(2 * time.Second)
		q1, _, err := a.counts(ctx)
		if err != nil {
			return err
		}
		rate := (q1 - q0 - a.probe()) / 2
		if prev >= 0 && math.Abs(rate-prev) <= prev/5+1 {
			return nil
		}
		prev = rate
	}
	return fmt.Errorf("%s: the statement rate did not settle within %v (%s)", a.contender, limit, a.census())
}

// connections counts the candidates' sessions on the MySQL server (-1 if
// it cannot), or for etcd their TCP connections, to etcd or to their
// proxies.
func (a *arena) connections(ctx context.Context) int {
	if a.etcd != nil {
		var pids []int
		for _, p := range a.all() {
			pids = append(pids, p.cmd.Process.Pid)
		}
		return tcpConnections(pids)
	}
	conns := -1
	a.admin.QueryRowContext(ctx, "SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE db = ? AND user <> 'root'", a.db).Scan(&conns)
	return conns
}

// serverPIDs are the processes of the server: MySQL's, or etcd's nodes.
func (a *arena) serverPIDs() []int {
	if a.etcd != nil {
		return a.etcd.pids()
	}
	return []int{a.srv.PID()}
}

// counts are what the server has counted so far: the requests it received,
// and the round trips besides them. For MySQL, the statements (Questions),
// and the prepares and pings; for etcd, the gRPC messages its nodes
// received (etcdCluster.requests), and nothing besides.
func (a *arena) counts(ctx context.Context) (requests, besides float64, err error) {
	if a.etcd != nil {
		n, err := a.etcd.requests(ctx)
		return n, 0, err
	}
	return counts(ctx, a.admin)
}

// steadyWindow is how long measureSteady counts: five seconds, or for
// etcd a third of the TTL if longer, how often its clients send a lease
// keepalive (etcd-60s: 20 s), so that each sends one.
func (a *arena) steadyWindow() time.Duration {
	if a.etcd == nil {
		return 5 * time.Second
	}
	return max(5*time.Second, time.Duration(etcdTTL(a.contender, a.tm))*time.Second/3)
}

// probe is how many requests one look at the counts adds to them: MySQL
// counts the SHOW STATUS; etcd's /metrics is HTTP, not gRPC.
func (a *arena) probe() float64 {
	if a.etcd != nil {
		return 0
	}
	return 1
}

// counts are the server's counts so far of statements (Questions), and of
// the round trips Questions leaves out: prepares (Com_stmt_prepare) and
// pings (among Com_admin_commands).
func counts(ctx context.Context, db *sql.DB) (questions, besides float64, err error) {
	rows, err := db.QueryContext(ctx, "SHOW GLOBAL STATUS WHERE Variable_name IN ('Questions', 'Com_stmt_prepare', 'Com_admin_commands')")
	if err != nil {
		return 0, 0, err
	}
	defer rows.Close()
	for rows.Next() {
		var name string
		var v float64
		if err := rows.Scan(&name, &v); err != nil {
			return 0, 0, err
		}
		if name == "Questions" {
			questions = v
		} else {
			besides += v
		}
	}
	return questions, besides, rows.Err()
}

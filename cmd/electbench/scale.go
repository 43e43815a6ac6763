package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/sqlelect/election/internal/mysqltest"
)

// The goals of scaling, as ratios of -large to -small candidates, and of
// the most to the fewest -elections.
const (
	goalStatements = 1.5 // statements/s of the idle election
	goalFailover   = 2   // median SIGKILL failover
	goalServerCPU  = 1.5 // the idle server's CPU
)

// scaleResults are what the scale subcommand writes to -json.
type scaleResults struct {
	Server string     `json:"server"`
	Timing timing     `json:"timing"`
	Runs   []scaleRun `json:"contenders"`
}

// scaleRun is one contender's arenas: -small and -large candidates, and
// -small candidates in -elections elections each, with the ratios of large
// to small (-1: not measured).
type scaleRun struct {
	Contender        string       `json:"contender"`
	Small            scalePoint   `json:"small"`
	Large            scalePoint   `json:"large"`
	Many             []scalePoint `json:"many_elections,omitempty"`
	ManyKill         []manyKill   `json:"many_elections_sigkill,omitempty"`
	StatementsRatio  float64      `json:"statements_ratio"`
	RoundTripsRatio  float64      `json:"round_trips_ratio"`
	FailoverP50Ratio float64      `json:"failover_p50_ratio"`
}

// scalePoint is one arena's run: its idle cost, its SIGKILL failovers (none
// for several elections per process), the checker's verdict, and how long
// the arena ran, from its first spawn to its last stop.
type scalePoint struct {
	Cost     steady   `json:"steady_state"`
	Failover *summary `json:"sigkill,omitempty"`
	Verdict  verdict  `json:"verdict"`
	TookS    float64  `json:"took_s"`
}

// scaleMain is the scale subcommand: for each contender, the idle cost and
// reps SIGKILL failovers with -small and with -large candidate processes,
// and their ratios against the goals; for this library's contenders also
// the idle cost of -small processes that each are a candidate in
// -elections elections on one *sql.DB.
func scaleMain(ctx context.Context, args []string, out io.Writer) error {
	fs := flag.NewFlagSet("electbench scale", flag.ContinueOnError)
	var o options
	o.flags(fs)
	contenders := fs.String("contenders", join([]string{libGetLock, plainGetLock, libLease}), "contenders to run")
	small := fs.Int("small", 3, "candidate processes of the small arena")
	large := fs.Int("large", 1000, "candidate processes of the large arena")
	reps := fs.Int("reps", 5, "SIGKILL failovers per arena")
	electionsList := fs.String("elections", "100", "elections each of -small processes is a candidate in, in one more arena per library contender and count (comma-separated; 1: no such arena); with two or more, the idle server's CPU of the last against the first")
	shards := fs.Bool("shards", false, "make those elections the shards of one group (election.Shards), and report when the spread is even again after the SIGKILL")
	if err := fs.Parse(args); err != nil {
		return err
	}
	cs := strings.Split(*contenders, ",")
	if err := known("contender", cs, allContenders); err != nil {
		return err
	}
	var elections []int
	for _, f := range strings.Split(*electionsList, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 {
			return fmt.Errorf("-elections %q: want counts of at least 1, comma-separated", *electionsList)
		}
		elections = append(elections, n)
	}
	if *small < 1 || *large < 1 || *reps < 1 {
		return errors.New("-small, -large and -reps must be at least 1")
	}
	srv, err := o.server(ctx)
	if err != nil {
		return err
	}
	defer srv.Close()
	res := scaleResults{Server: srv.Describe(), Timing: o.tm}
	var failed error
	for _, c := range cs {
		run, err := scaleContender(ctx, &o, srv, c, *small, *large, *reps, elections, *shards)
		if err != nil {
			failed = err
			break
		}
		res.Runs = append(res.Runs, run)
	}
	o.steps().done()
	// A long run that fails late still reports the contenders it finished.
	if len(res.Runs) > 0 {
		printScale(out, &res)
		if err := writeJSON(o.jsonOut, res); err != nil {
			return errors.Join(failed, err)
		}
	}
	return failed
}

// scaleContender runs contender's arenas, one after the other.
func scaleContender(ctx context.Context, o *options, srv *mysqltest.Server, contender string, small, large, reps int, elections []int, shards bool) (scaleRun, error) {
	run := scaleRun{Contender: contender}
	sigkills := func(n int) arenaSpec {
		return arenaSpec{contender: contender, tm: o.tm, candidates: n, faults: []string{fSIGKILL}}
	}
	var err error
	if run.Small, err = scaleArena(ctx, o, srv, sigkills(small), reps); err != nil {
		return run, err
	}
	if run.Large, err = scaleArena(ctx, o, srv, sigkills(large), reps); err != nil {
		return run, err
	}
	for _, elections := range elections {
		if elections == 1 || !isLibrary(contender) {
			continue
		}
		start := time.Now()
		var res results
		spec := arenaSpec{contender: contender, tm: o.tm, candidates: small, elections: elections, shards: shards}
		var kill manyKill
		err := benchArena(ctx, srv, spec, &res, func(a *arena) (err error) {
			kill, err = killBusiest(a, o.limitFor(contender))
			return err
		})
		if err != nil {
			return run, fmt.Errorf("%s with %d candidates in %d elections: %w", contender, small, elections, err)
		}
		run.Many = append(run.Many, scalePoint{Cost: res.Costs[0], Verdict: res.Verdicts[0], TookS: time.Since(start).Seconds()})
		run.ManyKill = append(run.ManyKill, kill)
	}
	run.StatementsRatio = ratio(run.Large.Cost.QueriesPerSec, run.Small.Cost.QueriesPerSec)
	run.RoundTripsRatio = ratio(run.Large.Cost.RoundTripsPerSec, run.Small.Cost.RoundTripsPerSec)
	run.FailoverP50Ratio = ratio(run.Large.Failover.P50, run.Small.Failover.P50)
	return run, nil
}

// scaleArena runs the arena spec names, as the comparison does, with reps
// of each of its faults.
func scaleArena(ctx context.Context, o *options, srv *mysqltest.Server, spec arenaSpec, reps int) (scalePoint, error) {
	start := time.Now()
	var res results
	if err := benchContender(ctx, o, srv, spec, reps, &res); err != nil {
		return scalePoint{}, fmt.Errorf("%s with %d candidates: %w", spec.contender, spec.candidates, err)
	}
	p := scalePoint{Cost: res.Costs[0], Verdict: res.Verdicts[0], TookS: time.Since(start).Seconds()}
	if sums := summarize(res.Trials); len(sums) > 0 {
		p.Failover = &sums[0]
	}
	return p, nil
}

// manyKill is the SIGKILL of the process that leads the most elections
// beyond the first, in an arena of many elections per process.
type manyKill struct {
	Led   int `json:"led"`       // elections the killed process led
	Again int `json:"led_again"` // of those, led again by another process within the limit
	// P1 is when the first of them were led again (the first percentile:
	// an election with a session of its own fails over sooner): the
	// survivors' poll that took the locks came up to a CheckInterval after
	// the kill, and P99 - P1 is how long their terms took to start after it.
	P1     float64 `json:"failover_p1_s"`
	P50    float64 `json:"failover_p50_s"`
	P99    float64 `json:"failover_p99_s"`
	Max    float64 `json:"failover_max_s"`
	Tokens int     `json:"tokens_not_above"` // new terms whose token was not above the killed one's
	// EvenS is, for shards, when every shard was led by a survivor and none
	// led more than its share, ceil(N/M) of N shards over M survivors; 0
	// if not within the limit.
	Shards bool    `json:"shards,omitempty"`
	EvenS  float64 `json:"even_again_s,omitempty"`
	// EndedBefore counts, by reason, the terms of those elections that
	// ended before the kill: while the processes started theirs and joined
	// the others', and idle. A term of a healthy process should end only
	// at the kill.
	EndedBefore map[string]int `json:"ended_before_kill"`
}

// killBusiest SIGKILLs the candidate process that leads the most of the
// elections beyond the first, and waits until another process has begun a
// term of each of them: for each, the time from the kill to that term's
// start, and whether its token is above the killed term's. For shards it
// also waits until the spread is even again.
func killBusiest(a *arena, limit time.Duration) (manyKill, error) {
	a.drain()
	a.pending = nil              // await hands what arrives after this to the check below
	leader := map[string]event{} // election → its newest term's start
	for _, e := range a.log {
		if e.Ev == "other-start" {
			leader[e.Election] = e
		}
	}
	owner := map[string]string{} // shard → who began its newest term; the first's too
	for _, e := range a.log {
		if e.Ev == "other-start" || e.Ev == "start" {
			owner[e.Election] = e.ID
		}
	}
	led := map[string]int{}
	for _, e := range leader {
		led[e.ID]++
	}
	var victim string
	for id, n := range led {
		if n > led[victim] {
			victim = id
		}
	}
	p := a.proc(victim)
	if p == nil {
		return manyKill{}, errors.New("no process leads any election beyond the first")
	}
	old := map[string]uint64{}
	for name, e := range leader {
		if e.ID == victim {
			old[name] = e.Token
		}
	}
	k := manyKill{Led: len(old), Shards: a.shards, EndedBefore: map[string]int{}}
	for _, e := range a.log {
		if e.Ev == "other-end" {
			k.EndedBefore[e.Reason]++
		}
	}
	t0 := time.Now()
	p.kill()
	took := map[string]float64{}
	even := func() bool {
		by := map[string]int{}
		for _, id := range owner {
			by[id]++
		}
		survivors := len(a.all()) - 1
		share := (a.elections + survivors - 1) / max(1, survivors)
		for id, n := range by {
			if id == victim || n > share {
				return false
			}
		}
		return len(owner) == a.elections
	}
	a.await(limit, func() bool {
		for _, e := range a.pending {
			if e.Ev == "other-start" || e.Ev == "start" {
				owner[e.Election] = e.ID
				if a.shards && k.EvenS == 0 && even() {
					k.EvenS = time.Unix(0, e.At).Sub(t0).Seconds()
				}
			}
			if _, ok := old[e.Election]; ok && e.Ev == "other-start" && e.ID != victim && e.At > t0.UnixNano() {
				if _, seen := took[e.Election]; !seen {
					took[e.Election] = time.Unix(0, e.At).Sub(t0).Seconds()
					if e.Token <= old[e.Election] {
						k.Tokens++
					}
				}
			}
		}
		a.pending = nil
		return len(took) == len(old) && (!a.shards || k.EvenS > 0)
	})
	var d []float64
	for _, s := range took {
		d = append(d, s)
	}
	slices.Sort(d)
	k.Again = len(d)
	if len(d) > 0 {
		k.P1, k.P50, k.P99, k.Max = d[len(d)/100], d[len(d)/2], d[min(len(d)-1, len(d)*99/100)], d[len(d)-1]
	}
	return k, nil
}

// byReason is a count of terms by the reason each ended: their total, then
// each reason's count.
func byReason(n map[string]int) string {
	total, reasons := 0, slices.Sorted(maps.Keys(n))
	parts := make([]string, len(reasons))
	for i, r := range reasons {
		total += n[r]
		parts[i] = fmt.Sprintf("%d %s", n[r], r)
	}
	if total == 0 {
		return "0"
	}
	return fmt.Sprintf("%d (%s)", total, strings.Join(parts, ", "))
}

// ratio is large/small; -1 when either was not measured.
func ratio(large, small float64) float64 {
	if large < 0 || small <= 0 {
		return -1
	}
	return large / small
}

// printScale writes the scale subcommand's setting and tables: each arena,
// the ratios against the goals, the arenas of many elections per process,
// and every violation.
func printScale(w io.Writer, res *scaleResults) {
	tm := res.Timing
	fmt.Fprintf(w, "%s; interval %v, lease %v, margin %v, check interval %v\n\n", res.Server, tm.Interval, tm.Lease, tm.Margin, tm.Check)
	var verdicts []verdict
	tw := newTable(w, "CONTENDER\tCANDIDATES\tSTATEMENTS/S\tROUND TRIPS/S\tCONNECTIONS\tPER CANDIDATE\tSIGKILL FAILOVER p50\tp95\tRUNS\tNO FAILOVER\tVIOLATIONS\tTOOK")
	for _, r := range res.Runs {
		for _, p := range []scalePoint{r.Small, r.Large} {
			c, f := p.Cost, p.Failover
			fmt.Fprintf(tw, "%s\t%d\t%.1f\t%.1f\t%d\t%.2f\t%s\t%s\t%d\t%d\t%d\t%s\n", c.Contender, c.Candidates, c.QueriesPerSec, c.RoundTripsPerSec,
				c.Connections, c.ConnsPerCand, secs(f.P50), secs(f.P95), f.Runs, f.NoFail, len(p.Verdict.Violations), took(p.TookS))
			verdicts = append(verdicts, p.Verdict)
		}
	}
	tw.Flush()
	fmt.Fprintln(w)
	tw = newTable(w, "CONTENDER\tCANDIDATES\tSTATEMENTS/S RATIO\tROUND TRIPS/S RATIO\tSIGKILL FAILOVER p50 RATIO")
	for _, r := range res.Runs {
		fmt.Fprintf(tw, "%s\t%d → %d\t%s\t%s\t%s\n", r.Contender, r.Small.Cost.Candidates, r.Large.Cost.Candidates,
			against(r.StatementsRatio, goalStatements), against(r.RoundTripsRatio, 0), against(r.FailoverP50Ratio, goalFailover))
	}
	tw.Flush()
	var many []scalePoint
	for _, r := range res.Runs {
		many = append(many, r.Many...)
	}
	if len(many) > 0 {
		fmt.Fprintln(w)
		tw = newTable(w, "CONTENDER\tPROCESSES\tELECTIONS EACH\tALL LED AFTER\tCONNECTIONS\tPER PROCESS\tSTATEMENTS/S\tPER ELECTION\tROUND TRIPS/S\tPER ELECTION\tVIOLATIONS\tTOOK")
		for _, p := range many {
			c, k := p.Cost, float64(p.Cost.Elections)
			fmt.Fprintf(tw, "%s\t%d\t%d\t%s\t%d\t%.2f\t%.1f\t%.4f\t%.1f\t%.4f\t%d\t%s\n", c.Contender, c.Candidates, c.Elections, took(c.AllLedS), c.Connections, c.ConnsPerCand,
				c.QueriesPerSec, c.QueriesPerSec/k, c.RoundTripsPerSec, c.RoundTripsPerSec/k, len(p.Verdict.Violations), took(p.TookS))
			verdicts = append(verdicts, p.Verdict)
		}
		tw.Flush()
		fmt.Fprintln(w)
		tw = newTable(w, "CONTENDER\tPROCESSES\tELECTIONS EACH\tSERVER CPU\tSERVER RSS\tPROCESS CPU (MOST)\tPROCESS RSS (MOST)")
		for _, p := range many {
			c := p.Cost
			fmt.Fprintf(tw, "%s\t%d\t%d\t%.1f%%\t%.0f MiB\t%.1f%%\t%.0f MiB\n", c.Contender, c.Candidates, c.Elections, c.ServerCPU, c.ServerRSS, c.ProcCPU, c.ProcRSS)
		}
		tw.Flush()
		for _, r := range res.Runs {
			if n := len(r.Many); n > 1 {
				first, last := r.Many[0].Cost, r.Many[n-1].Cost
				fmt.Fprintf(w, "%s: the idle server's CPU at %d elections each is %s that at %d\n", r.Contender, last.Elections,
					against(ratio(last.ServerCPU, first.ServerCPU), goalServerCPU), first.Elections)
			}
		}
		fmt.Fprintln(w)
		tw = newTable(w, "CONTENDER\tTERMS ENDED BEFORE THE KILL\tKILLED PROCESS LED\tLED AGAIN\tFAILOVER p1\tp50\tp99\tMAX\tp99 - p1\tTOKENS NOT ABOVE\tSHARDS EVEN AGAIN")
		for _, r := range res.Runs {
			for _, k := range r.ManyKill {
				even := "-"
				switch {
				case k.Shards && k.EvenS > 0:
					even = secs(k.EvenS)
				case k.Shards:
					even = "not within the limit"
				}
				fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%s\t%s\t%s\t%s\t%s\t%d\t%s\n", r.Contender, byReason(k.EndedBefore), k.Led, k.Again, secs(k.P1), secs(k.P50), secs(k.P99), secs(k.Max),
					secs(k.P99-k.P1), k.Tokens, even)
			}
		}
		tw.Flush()
	}
	printViolations(w, verdicts)
}

// against formats a ratio with its goal, if it has one, and whether it is
// met.
func against(x, goal float64) string {
	switch {
	case x < 0:
		return "-"
	case goal == 0:
		return fmt.Sprintf("%.2f× (no goal)", x)
	case x <= goal:
		return fmt.Sprintf("%.2f× (goal ≤ %g×, met)", x, goal)
	}
	return fmt.Sprintf("%.2f× (goal ≤ %g×, MISSED)", x, goal)
}

// took formats how long an arena ran.
func took(s float64) string {
	return time.Duration(s * float64(time.Second)).Round(time.Second).String()
}

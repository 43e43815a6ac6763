package main

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"slices"
	"strings"
	"time"

	"github.com/sqlelect/election"
	"github.com/sqlelect/election/internal/galeratest"
	"github.com/sqlelect/election/internal/mysqltest"
)

// chaosPlan is what the chaos subcommand's own flags ask for.
type chaosPlan struct {
	contender string
	faults    int           // at the most
	duration  time.Duration // 0: no bound but faults
	kinds     []string      // the faults to draw from
	seed      uint64
	galera    bool // on a private Galera cluster instead of one server
	shards    int  // each candidate a member of a group of this many shards; 0: one election
	policies  bool // the candidates run with leader policies (arenaSpec.policies)
}

// chaosMain injects random faults into one contender, then runs the checker.
func chaosMain(ctx context.Context, args []string, out io.Writer) error {
	var o options
	p, err := parseChaos(args, &o)
	if err != nil {
		return err
	}
	srv, cluster, err := p.server(ctx, &o)
	if err != nil {
		return err
	}
	if cluster != nil {
		defer cluster.Close()
	} else {
		defer srv.Close()
	}
	// With shards a trap strikes the first shard of the process to reach
	// its point, which need not be shard 0.
	if p.kinds = trapsFor(p.contender, p.shards > 0, faultsFor(p.contender, srv, cluster, p.kinds)); len(p.kinds) == 0 {
		return errors.New("no fault to draw from: a server given by -dsn is not restarted nor its clock stepped, only this library's strategies have traps, " +
			"and the clock faults hit them and plain-getlock on a private server of one node")
	}
	a, err := newArena(ctx, srv, arenaSpec{contender: p.contender, tm: o.tm, candidates: o.candidates, faults: p.kinds, cluster: cluster,
		elections: p.shards, shards: p.shards > 0, policies: p.policies, seed: p.seed})
	if err != nil {
		return err
	}
	defer a.close()
	start := time.Now()
	reads := a.observe(ctx, 25*time.Millisecond)
	trials, counts, err := p.torture(ctx, a, o.limitFor(p.contender), o.steps())
	if err != nil {
		reads()
		return err
	}
	stopped := time.Now()
	o.steps().done()
	a.stopAll()
	a.reads = reads()
	v, err := check(ctx, a)
	if err != nil {
		return err
	}
	var ended map[string]int
	if isLibrary(p.contender) {
		terms, err := history(ctx, a)
		if err != nil {
			return err
		}
		ended = endings(terms)
		nameHistoryReasons(trials, terms)
	}
	acting := actingOverlaps(a.log, trials, stopped)
	checkOverlaps(a, acting, &v)
	clock := checkClock(a, trials, &v)
	if p.shards > 0 {
		fmt.Fprintf(out, "each candidate a member of a group of %d shards; shard 0 written and checked\n", p.shards)
	}
	if p.policies {
		fmt.Fprintf(out, "leader policies: candidate i has priority i mod 3, PreferAfter %v (the lease), a value naming its process, "+
			"a health check that passes for 5-29 intervals then fails for 1-14 (HealthFailures 3), and pauses of up to 5 leases between faults\n", o.tm.Lease)
	}
	fmt.Fprintf(out, "chaos: %s, seed %d, %d faults in %v: %v\n", p.contender, p.seed, len(trials), time.Since(start).Round(time.Second), counts)
	if ended != nil {
		fmt.Fprintf(out, "terms by how they ended, in the election's history: %v\n", ended)
	}
	sums := summarize(trials)
	printTable(out, sums, []verdict{v}, nil)
	fmt.Fprintln(out)
	printOverlaps(out, acting)
	if len(clock.Faults) > 0 {
		fmt.Fprintln(out, "\nthe checker's OVERLAP above is the writes' span on the server's clock, which the clock faults stepped; the acting leaders' is on the machine's")
		printClock(out, clock, trials, sums)
	}
	if err := writeJSON(o.jsonOut, map[string]any{"seed": p.seed, "shards": p.shards, "policies": p.policies, "faults": counts, "ended": ended,
		"trials": trials, "verdict": v, "acting_overlap": acting, "clock": clock}); err != nil {
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

// parseChaos parses the chaos subcommand's flags: the shared ones into o,
// its own into the plan.
func parseChaos(args []string, o *options) (chaosPlan, error) {
	fs := flag.NewFlagSet("electbench chaos", flag.ContinueOnError)
	o.flags(fs)
	o.candidatesFlag(fs)
	contender := fs.String("contender", libGetLock, "the contender to torture")
	n := fs.Int("faults", 100, "how many faults to inject")
	duration := fs.Duration("duration", 0, "stop injecting after this long (0: after -faults)")
	faults := fs.String("fault-kinds", join(allFaults), "faults to draw from; also "+join(clockFaults)+
		", which step a private server's clock (it then runs under libfaketime: apt-get install faketime) for this library's contenders and plain-getlock")
	seed := fs.Uint64("seed", uint64(time.Now().UnixNano()), "random seed, to replay a run")
	galera := fs.Bool("galera", false, "run on a private three-node Galera cluster (installs its packages when missing); lease contender only")
	shards := fs.Int("shards", 0, "make each candidate a member of a group of this many shards (election.Shards); shard 0 writes and is checked")
	policies := fs.Bool("policies", false, "run each candidate with leader policies: priority (its index mod 3), PreferAfter (-lease), a value, "+
		"and a health check that fails in runs; this library's contenders, without -shards")
	if err := fs.Parse(args); err != nil {
		return chaosPlan{}, err
	}
	if *galera && (*contender != libLease || o.dsn != "") {
		return chaosPlan{}, fmt.Errorf("-galera runs the %s contender on a cluster of its own: not -contender %s (GetLock is refused on Galera) nor -dsn", libLease, *contender)
	}
	if err := known("contender", []string{*contender}, allContenders); err != nil {
		return chaosPlan{}, err
	}
	kinds := strings.Split(*faults, ",")
	if err := known("fault", kinds, slices.Concat(allFaults, clockFaults)); err != nil {
		return chaosPlan{}, err
	}
	if *shards != 0 && !isLibrary(*contender) {
		return chaosPlan{}, fmt.Errorf("-shards %d: only this library's contenders have shards", *shards)
	}
	switch {
	case *policies && !isLibrary(*contender):
		return chaosPlan{}, fmt.Errorf("-policies: only this library's contenders have leader policies, not %s", *contender)
	case *policies && *shards != 0:
		// The group evens its shards out over the members, and preferred
		// leaders gather them on the highest priority: each would undo the
		// other's hand-overs without end.
		return chaosPlan{}, fmt.Errorf("-policies with -shards %d: a group's spread and preferred leaders would move the shards against each other; use one or the other", *shards)
	}
	return chaosPlan{contender: *contender, faults: *n, duration: *duration, kinds: kinds, seed: *seed, galera: *galera, shards: max(0, *shards), policies: *policies}, nil
}

// history returns the terms of the election the arena checks, as its
// history keeps them (Operator.History: its last DefaultHistoryLimit).
func history(ctx context.Context, a *arena) ([]election.TermRecord, error) {
	op, err := election.NewOperator(a.admin, a.checked(), election.Config{})
	if err != nil {
		return nil, err
	}
	terms, err := op.History(ctx, 0)
	if err != nil {
		return nil, fmt.Errorf("reading the history of %s: %w", a.checked(), err)
	}
	return terms, nil
}

// endings counts terms by how they ended; "open" is a term that has not
// ended.
func endings(terms []election.TermRecord) map[string]int {
	n := map[string]int{}
	for _, t := range terms {
		n[cmp.Or(t.Reason, "open")]++
	}
	return n
}

// server starts what the plan runs on: a Galera cluster, whose HAProxy
// serves as the arena's server; a private server whose clock can be
// stepped, if the plan has clock faults for its contender; or the options'
// server.
func (p *chaosPlan) server(ctx context.Context, o *options) (*mysqltest.Server, *galeratest.Cluster, error) {
	if !p.galera && o.dsn == "" && steppedClockHits(p.contender) && slices.ContainsFunc(p.kinds, isClock) {
		srv, err := mysqltest.StartSteppable(ctx)
		if err != nil {
			return nil, nil, fmt.Errorf("the clock faults: %w", err)
		}
		return srv, nil, nil
	}
	if !p.galera {
		srv, err := o.server(ctx)
		return srv, nil, err
	}
	if why := galeratest.EnsurePackages(); why != "" {
		return nil, nil, fmt.Errorf("-galera: %s", why)
	}
	cluster, err := galeratest.Start(ctx)
	if err != nil {
		return nil, nil, err
	}
	return cluster.Proxy(), cluster, nil
}

// torture injects faults drawn at random from the plan's kinds, at random
// pauses (longer under policies), until the plan's count or duration is
// reached or ctx ends. The kinds are dealt like cards: each once, in a
// random order, before any comes again, so that every kind is hit even in
// a short run.
func (p *chaosPlan) torture(ctx context.Context, a *arena, limit time.Duration, steps *progress) ([]trial, map[string]int, error) {
	rng := rand.New(rand.NewPCG(p.seed, 0))
	start := time.Now()
	counts := map[string]int{}
	var deck []string
	var trials []trial
	unit := time.Millisecond // of the pauses, up to 300
	if p.policies {
		// A leader hands over to a preferred candidate only once its term
		// has lasted PreferAfter, a lease: pauses of up to 5 leases leave
		// terms that time.
		unit = a.tm.Lease / 60
	}
	for i := 0; i < p.faults && ctx.Err() == nil && (p.duration == 0 || time.Since(start) < p.duration); i++ {
		if len(deck) == 0 {
			deck = slices.Clone(p.kinds)
			rng.Shuffle(len(deck), func(i, j int) { deck[i], deck[j] = deck[j], deck[i] })
		}
		f := deck[0]
		deck = deck[1:]
		steps.step("chaos %s seed %d: fault %d/%d %s", p.contender, p.seed, i+1, p.faults, f)
		tr, err := a.inject(ctx, f, limit)
		if err != nil {
			return nil, nil, err
		}
		counts[f]++
		trials = append(trials, tr)
		time.Sleep(time.Duration(rng.IntN(300)) * unit)
	}
	return trials, counts, nil
}

package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sqlelect/election/internal/galeratest"
	"github.com/sqlelect/election/internal/leakcheck"
)

// TestMain lets the test binary serve as the candidate process, since the
// arena re-executes its own binary.
func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == "candidate" {
		if err := candidateMain(context.Background(), os.Args[2:]); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(leakcheck.Run(m))
}

// A short chaos run against each of this library's strategies: random real
// faults (SIGKILL, SIGTERM, SIGSTOP, blackhole, reset, KILL CONNECTION,
// server restart) while the leaders make fenced writes; the checker must
// find no stale write, no token that fails to grow, no lost write.
func TestChaos(t *testing.T) {
	for _, contender := range []string{libGetLock, libLease} {
		t.Run(contender, func(t *testing.T) {
			out, err := os.CreateTemp(t.TempDir(), "chaos")
			if err != nil {
				t.Fatal(err)
			}
			err = chaosMain(context.Background(), []string{"-contender", contender, "-faults", "13", "-seed", "7",
				"-interval", "100ms", "-lease", "1s", "-margin", "1s", "-limit", "5s"}, out)
			report, _ := os.ReadFile(out.Name())
			if err != nil || !strings.Contains(string(report), "no violation") {
				t.Fatalf("chaos: %v\n%s", err, report)
			}
			if !strings.Contains(string(report), "13 faults") {
				t.Fatalf("not every fault was injected:\n%s", report)
			}
			// The kinds are dealt, so 13 faults hit each kind this
			// strategy has (11 or 13) at least once; the checkers saw it all.
			for _, f := range trapsFor(contender, false, append(slices.Clone(baseFaults), trapFaults...)) {
				if !regexp.MustCompile(`\b` + f + `:[1-9]`).Match(report) {
					t.Errorf("fault %s was not injected:\n%s", f, report)
				}
			}
			if !regexp.MustCompile(`\bOk \([1-9][0-9]*\)`).Match(report) {
				t.Errorf("Porcupine did not pass the history:\n%s", report)
			}
			// Every trap sprang: its row's last column, TRAP MISSED, is 0.
			for _, f := range trapFaults {
				if m := regexp.MustCompile(`(?m)^` + contender + ` +` + f + ` .* ([0-9]+)$`).FindSubmatch(report); m != nil && string(m[1]) != "0" {
					t.Errorf("trap %s missed:\n%s", f, report)
				}
			}
		})
	}
}

// A short chaos run of the LeaseRow strategy on a three-node Galera
// cluster, each candidate on its own node: the process, network, trap and
// node faults (a node SIGKILLed and restarted, SIGSTOPped and continued);
// both checkers must pass the history.
func TestChaosOnGalera(t *testing.T) {
	if why := galeratest.EnsurePackages(); why != "" {
		t.Skip("no Galera cluster: " + why)
	}
	var out bytes.Buffer
	err := chaosMain(context.Background(), []string{"-galera", "-contender", libLease, "-faults", "12", "-seed", "7",
		"-interval", "100ms", "-lease", "1s", "-margin", "1s", "-limit", "20s"}, &out)
	if err != nil || !strings.Contains(out.String(), "no violation") || !strings.Contains(out.String(), "12 faults") {
		t.Fatalf("chaos on Galera: %v\n%s", err, out.String())
	}
	for _, f := range []string{fNodeKill, fNodeStop, fFencedStop, fClaimedKill} {
		if !regexp.MustCompile(`\b` + f + `:[1-9]`).Match(out.Bytes()) {
			t.Errorf("fault %s was not injected:\n%s", f, out.String())
		}
	}
	if !regexp.MustCompile(`\bOk \([1-9][0-9]*\)`).Match(out.Bytes()) {
		t.Errorf("Porcupine did not pass the history:\n%s", out.String())
	}
}

// Both checkers find what they are for, each violation planted alone in a
// real database and history: a write of an old term accepted after a newer
// term's, an acknowledged write that is missing, a counter that disagrees
// with the rows, a refused write that committed. A token shared by two
// terms is the own checker's alone: a fenced register accepts equal tokens
// (a term writes many times), so Porcupine must pass it; what the parent's
// reads saw is Porcupine's alone (the own checker reads the rows once the
// run is over): a write of unknown outcome that a read should have counted.
func TestCheckersFindViolations(t *testing.T) {
	var o options
	srv, err := o.server(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	ctx := context.Background()
	a, err := newArena(ctx, srv, arenaSpec{contender: libGetLock, tm: timing{Interval: time.Second, Lease: 5 * time.Second, Margin: time.Second, WriteEvery: time.Second}})
	if err != nil {
		t.Fatal(err)
	}
	defer a.close()
	now := time.Now().UnixNano()
	ms := func(n int) int64 { return now + int64(n)*int64(time.Millisecond) }
	// w is a write of op with token, called at ms call and returning 1 ms
	// later: accepted, refused, or with no return at all.
	type w struct {
		op            string
		token         uint64
		call          int
		ok, refused   bool
		returns, rows bool
	}
	acked := func(op string, token uint64, call int) w { return w{op, token, call, true, false, true, true} }
	for _, c := range []struct {
		name      string
		starts    []uint64 // tokens of the terms, in start order
		writes    []w
		counter   int       // the counter's final value; -1: the number of rows
		reads     []regRead // at the end
		want      string    // the own checker's one violation, if any
		porcupine bool      // Porcupine must find it too
	}{
		{name: "stale write", starts: []uint64{1, 2},
			writes: []w{acked("A", 1, 1), acked("B", 2, 3), acked("C", 1, 5)}, counter: -1,
			want: "stale write 3 of term 1", porcupine: true},
		{name: "lost write", starts: []uint64{1, 2},
			writes: []w{acked("A", 1, 1), acked("B", 2, 3), {op: "D", token: 2, call: 5, ok: true, returns: true}}, counter: -1,
			reads: []regRead{{Call: ms(7), Return: ms(8), Seen: regState{Token: 2, Op: "B", N: 2}}},
			want:  "1 acknowledged writes are missing", porcupine: true},
		{name: "counter", starts: []uint64{1, 2},
			writes: []w{acked("A", 1, 1), acked("B", 2, 3)}, counter: 1,
			reads: []regRead{{Call: ms(5), Return: ms(6), Seen: regState{Token: 2, Op: "B", N: 1}}},
			want:  "counter 1 but 2 write rows", porcupine: true},
		{name: "refused but committed", starts: []uint64{1, 2},
			writes: []w{acked("A", 1, 1), {op: "B", token: 1, call: 3, refused: true, returns: true, rows: true}, acked("C", 2, 5)}, counter: -1,
			reads: []regRead{{Call: ms(7), Return: ms(8), Seen: regState{Token: 2, Op: "C", N: 3}}},
			want:  "write B was refused (ErrFenced) but committed", porcupine: true},
		// A write with no outcome (its process died) that committed, as
		// its row shows, before a later row's write returned: a read after
		// that return must count it; one before may not.
		{name: "unknown outcome, counted late", starts: []uint64{1},
			writes: []w{acked("A", 1, 1), {op: "U", token: 1, call: 3, rows: true}, acked("B", 1, 5)}, counter: -1,
			reads:     []regRead{{Call: ms(7), Return: ms(8), Seen: regState{Token: 1, Op: "B", N: 2}}},
			porcupine: true},
		{name: "unknown outcome, read before", starts: []uint64{1},
			writes: []w{acked("A", 1, 1), {op: "U", token: 1, call: 3, rows: true}, acked("B", 1, 5)}, counter: -1,
			reads: []regRead{{Call: ms(4), Return: ms(5), Seen: regState{Token: 1, Op: "A", N: 1}}}},
		{name: "shared token", starts: []uint64{1, 2, 2},
			writes: []w{acked("A", 1, 1), acked("B", 2, 3), acked("C", 2, 5)}, counter: -1,
			want: "token 2 after token 2"},
	} {
		t.Run(c.name, func(t *testing.T) {
			if err := a.createDatabase(ctx); err != nil {
				t.Fatal(err)
			}
			a.log, a.reads = nil, c.reads
			for i, tok := range c.starts {
				a.log = append(a.log, event{Ev: "start", ID: fmt.Sprint("c", i), Term: fmt.Sprint(tok), Token: tok, OK: true, At: ms(i - 10)})
			}
			rows := 0
			for _, x := range c.writes {
				term := fmt.Sprint(x.token)
				a.log = append(a.log, event{Ev: "call", Term: term, Token: x.token, Op: x.op, At: ms(x.call)})
				if x.returns {
					a.log = append(a.log, event{Ev: "write", Term: term, Op: x.op, OK: x.ok, Refused: x.refused, At: ms(x.call + 1)})
				}
				if !x.rows {
					continue
				}
				rows++
				for _, stmt := range []string{
					fmt.Sprintf("INSERT INTO bench_writes (holder, term, token, op, at) VALUES ('c', '%s', %d, '%s', UTC_TIMESTAMP(6) + INTERVAL %d SECOND)", term, x.token, x.op, x.call),
					fmt.Sprintf("UPDATE bench_register SET token = %d, op = '%s'", x.token, x.op),
				} {
					if _, err := a.admin.Exec(stmt); err != nil {
						t.Fatal(err)
					}
				}
			}
			if c.counter < 0 {
				c.counter = rows
			}
			if _, err := a.admin.Exec("UPDATE bench_counter SET n = ?", c.counter); err != nil {
				t.Fatal(err)
			}
			v, err := check(ctx, a)
			if err != nil {
				t.Fatal(err)
			}
			var own, porcupine []string
			for _, msg := range v.Violations {
				if strings.HasPrefix(msg, "Porcupine") {
					porcupine = append(porcupine, msg)
				} else {
					own = append(own, msg)
				}
			}
			if c.want == "" && len(own) > 0 || c.want != "" && (len(own) != 1 || !strings.Contains(own[0], c.want)) {
				t.Errorf("own checker: %q, want one violation with %q", own, c.want)
			}
			if found := len(porcupine) == 1 && v.Linearizable == "Illegal"; found != c.porcupine {
				t.Errorf("Porcupine (%s on %d operations): %q, want a violation: %v", v.Linearizable, v.Operations, porcupine, c.porcupine)
			}
		})
	}
}

// -quick shortens only the timing flags that were not given, and chaos
// refuses fault kinds it does not know but takes the clock faults, which
// it does not draw unless asked, and refuses -policies but for this
// library's contenders in one election.
func TestFlags(t *testing.T) {
	fs := flag.NewFlagSet("electbench", flag.ContinueOnError)
	var o options
	o.flags(fs)
	reps := fs.Int("reps", 20, "")
	if err := fs.Parse([]string{"-lease", "3s"}); err != nil {
		t.Fatal(err)
	}
	if err := quickDefaults(fs); err != nil {
		t.Fatal(err)
	}
	if o.tm.Lease != 3*time.Second || o.tm.Interval != 100*time.Millisecond || o.limit != 4*time.Second || *reps != 1 {
		t.Errorf("-quick -lease 3s: timing %+v, limit %v, reps %d", o.tm, o.limit, *reps)
	}
	if _, err := parseChaos([]string{"-fault-kinds", "sigkill,sigkil"}, &options{}); err == nil || !strings.Contains(err.Error(), `unknown fault "sigkil"`) {
		t.Errorf("chaos -fault-kinds sigkill,sigkil: %v", err)
	}
	if p, err := parseChaos([]string{"-fault-kinds", "clock-back-kill,sigkill"}, &options{}); err != nil || !slices.Equal(p.kinds, []string{fClockBackKill, fSIGKILL}) {
		t.Errorf("chaos -fault-kinds clock-back-kill,sigkill: %+v, %v", p, err)
	}
	if p, err := parseChaos(nil, &options{}); err != nil || slices.ContainsFunc(p.kinds, isClock) {
		t.Errorf("chaos draws from %v by default (%v): no clock fault unless asked", p.kinds, err)
	}
	for _, args := range [][]string{{"-contender", plainGetLock}, {"-contender", recipeSame}, {"-shards", "4"}} {
		if _, err := parseChaos(append([]string{"-policies"}, args...), &options{}); err == nil || !strings.Contains(err.Error(), "-policies") {
			t.Errorf("chaos -policies %s: %v", strings.Join(args, " "), err)
		}
	}
	if p, err := parseChaos([]string{"-policies", "-contender", libLease}, &options{}); err != nil || !p.policies {
		t.Errorf("chaos -policies -contender lease: %+v, %v", p, err)
	}
}

// The flapping health check opens passing, then fails in runs, most long
// enough to make a candidate unhealthy (3 checks in a row) and some not:
// over ten minutes of checks every 100 ms, a hundred of the first.
func TestFlapping(t *testing.T) {
	f := newFlapping(7, 1, 100*time.Millisecond)
	if f.failingAt(0) {
		t.Fatal("fails at its first check")
	}
	var run, unhealthy, blips int
	for d := time.Duration(0); d < 10*time.Minute; d += 100 * time.Millisecond {
		if f.failingAt(d) {
			run++
			continue
		}
		switch {
		case run >= 3:
			unhealthy++
		case run > 0:
			blips++
		}
		run = 0
	}
	if unhealthy < 100 || blips < 1 {
		t.Errorf("%d failing runs of 3 checks or more, %d shorter; want 100 or more, and some", unhealthy, blips)
	}
}

// A small scale run: a library contender and plain GET_LOCK with 2 and 6
// candidates, one SIGKILL each, and 2 processes in 3 elections each; the
// table has the ratios against the goals, and every arena was measured.
func TestScale(t *testing.T) {
	jsonOut := t.TempDir() + "/scale.json"
	var out bytes.Buffer
	err := scaleMain(context.Background(), []string{"-contenders", "getlock,plain-getlock", "-small", "2", "-large", "6", "-reps", "1", "-elections", "3",
		"-interval", "100ms", "-lease", "1s", "-margin", "1s", "-limit", "5s", "-json", jsonOut}, &out)
	if err != nil {
		t.Fatalf("scale: %v\n%s", err, out.String())
	}
	t.Log("\n" + out.String())
	for _, c := range []string{libGetLock, plainGetLock} {
		line := regexp.MustCompile(`(?m)^` + c + ` +2 → 6 +[0-9.]+× \(goal ≤ 1\.5×, (met|MISSED)\) +[0-9.]+× \(no goal\) +[0-9.]+× \(goal ≤ 2×, (met|MISSED)\)$`)
		if !line.MatchString(out.String()) {
			t.Errorf("no ratio line for %s", c)
		}
	}
	if !strings.Contains(out.String(), "ELECTIONS EACH") {
		t.Error("no table of many elections per process")
	}
	b, err := os.ReadFile(jsonOut)
	if err != nil {
		t.Fatal(err)
	}
	var res scaleResults
	if err := json.Unmarshal(b, &res); err != nil {
		t.Fatal(err)
	}
	if len(res.Runs) != 2 || len(res.Runs[0].Many) != 1 || res.Runs[1].Many != nil {
		t.Fatalf("runs: %+v", res.Runs)
	}
	for _, r := range res.Runs {
		for _, p := range []scalePoint{r.Small, r.Large} {
			if c := p.Cost; c.Connections < c.Candidates || c.QueriesPerSec <= 0 || c.RoundTripsPerSec < c.QueriesPerSec {
				t.Errorf("%s with %d candidates: cost %+v", r.Contender, c.Candidates, c)
			}
			if f := p.Failover; f == nil || f.Runs != 1 || f.NoFail != 0 || f.P50 <= 0 {
				t.Errorf("%s with %d candidates: failover %+v", r.Contender, p.Cost.Candidates, f)
			}
			if len(p.Verdict.Violations) > 0 && isLibrary(r.Contender) {
				t.Errorf("%s: %v", r.Contender, p.Verdict.Violations)
			}
		}
		if r.StatementsRatio <= 0 || r.RoundTripsRatio <= 0 || r.FailoverP50Ratio <= 0 {
			t.Errorf("%s: ratios %+v", r.Contender, r)
		}
	}
	// GetLock pins a session per elector: at least one per election and process.
	if c := res.Runs[0].Many[0].Cost; c.Elections != 3 || c.Candidates != 2 || c.Connections < 6 || c.QueriesPerSec <= 0 ||
		c.ServerRSS <= 0 || c.ProcRSS <= 0 {
		t.Errorf("many elections: %+v", c)
	}
}

// The acting leader is the newest term that has not ended, by its end
// event or by its process's exit: a killed leader's term is not the leader
// while its successor has yet to begin.
func TestActingLeaderEndsWithItsProcess(t *testing.T) {
	at := time.Now().Add(-time.Second).UnixNano()
	a := &arena{log: []event{
		{Ev: "start", ID: "c0", Term: "1", At: at},
		{Ev: "write", ID: "c0", Term: "1", OK: true, At: at + 1},
		{Ev: "start", ID: "c1", Term: "2", At: at + 2},
		{Ev: "write", ID: "c1", Term: "2", OK: true, At: at + 3},
		{Ev: "exit", ID: "c1", At: at + 4},
	}}
	if e, ok := a.actingLeader(); !ok || e.Term != "1" {
		t.Errorf("term 2's process exited: acting leader %+v, %v; want term 1", e, ok)
	}
	a.log = append(a.log, event{Ev: "end", ID: "c0", Term: "1", At: at + 5})
	if e, ok := a.actingLeader(); ok {
		t.Errorf("both terms ended: acting leader %+v", e)
	}
	a.log = append(a.log, event{Ev: "start", ID: "c1", Term: "3", At: at + 6}, event{Ev: "write", ID: "c1", Term: "3", OK: true, At: at + 7})
	if e, ok := a.actingLeader(); !ok || e.Term != "3" {
		t.Errorf("c1 started again: acting leader %+v, %v; want term 3", e, ok)
	}
}

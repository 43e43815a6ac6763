package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

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
			err = chaosMain(context.Background(), []string{"-contender", contender, "-faults", "14", "-seed", "7",
				"-interval", "100ms", "-lease", "1s", "-margin", "1s", "-limit", "5s"}, out)
			report, _ := os.ReadFile(out.Name())
			if err != nil || !strings.Contains(string(report), "no violation") {
				t.Fatalf("chaos: %v\n%s", err, report)
			}
			if !strings.Contains(string(report), "14 faults") {
				t.Fatalf("not every fault was injected:\n%s", report)
			}
		})
	}
}

// The checker finds what it is for: a write of an old term accepted after
// a newer term began writing, a counter that disagrees, acknowledged writes
// that are missing, and tokens that do not grow with their terms.
func TestCheckerFindsViolations(t *testing.T) {
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
	for _, stmt := range []string{
		"INSERT INTO bench_writes (holder, term, token, at) VALUES " +
			"('c0', '1', 1, UTC_TIMESTAMP(6)), ('c1', '2', 2, UTC_TIMESTAMP(6) + INTERVAL 1 SECOND), ('c0', '1', 1, UTC_TIMESTAMP(6) + INTERVAL 2 SECOND)",
		"UPDATE bench_counter SET n = 2",
	} {
		if _, err := a.admin.Exec(stmt); err != nil {
			t.Fatal(err)
		}
	}
	now := time.Now().UnixNano()
	a.log = []event{
		{Ev: "start", ID: "c0", Term: "1", Token: 1, At: now},
		{Ev: "start", ID: "c1", Term: "2", Token: 2, At: now + 1},
		{Ev: "start", ID: "c2", Term: "3", Token: 2, At: now + 2},
	}
	for range 4 {
		a.log = append(a.log, event{Ev: "write", OK: true, At: now})
	}
	v, err := check(ctx, a)
	if err != nil {
		t.Fatal(err)
	}
	if v.Stale != 1 || v.Lost != 1 || v.WorstS < 0.9 || len(v.Violations) != 4 {
		t.Fatalf("verdict: %+v", v)
	}
	for i, want := range []string{"stale write 3 of term 1", "token 2 after token 2", "1 acknowledged writes are missing", "counter 2 but 3 write rows"} {
		if !strings.Contains(v.Violations[i], want) {
			t.Fatalf("violation %d: %q, want %q", i, v.Violations[i], want)
		}
	}
}

// -quick shortens only the timing flags that were not given, and chaos
// refuses fault kinds it does not know.
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
	if len(res.Runs) != 2 || res.Runs[0].Many == nil || res.Runs[1].Many != nil {
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
	if c := res.Runs[0].Many.Cost; c.Elections != 3 || c.Candidates != 2 || c.Connections < 6 || c.QueriesPerSec <= 0 {
		t.Errorf("many elections: %+v", c)
	}
}

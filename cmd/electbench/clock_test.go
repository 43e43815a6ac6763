package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sqlelect/election/internal/mysqltest"
)

// A short chaos run of clock faults against each of this library's
// strategies, at I = C = 200 ms, L = 2 s, S = 1 s: every clock fault twice
// and two plain SIGKILLs. A healthy leader must outlast a step of the
// server's clock: no term ends during a clock fault, no two leaders act at
// once during one, and after a clock fault that also kills the leader the
// next leads within a check interval of the slowest plain SIGKILL's
// failover; and, as ever, no stale or lost write, and Porcupine's Ok.
func TestChaosClock(t *testing.T) {
	if mysqltest.PrivateBinary() == "" {
		t.Skip("the clock faults need a private server: no mariadbd or mysqld on PATH (apt-get install mariadb-server)")
	}
	if mysqltest.FaketimeLib() == "" {
		t.Skip("the clock faults step the server's clock with libfaketime: not installed (apt-get install faketime)")
	}
	// Not the sawtooth, which takes leases a trial: the chaos runs and the
	// root package's TestClockStepsDeposeNoLeader have it.
	kinds := append(slices.DeleteFunc(slices.Clone(clockFaults), func(f string) bool { return f == fClockSawtooth }), fSIGKILL)
	for _, contender := range []string{libGetLock, libLease} {
		t.Run(contender, func(t *testing.T) {
			jsonOut := filepath.Join(t.TempDir(), "chaos.json")
			var out bytes.Buffer
			err := chaosMain(context.Background(), []string{"-contender", contender, "-faults", fmt.Sprint(2 * len(kinds)), "-seed", "7",
				"-fault-kinds", join(kinds), "-interval", "200ms", "-check-interval", "200ms", "-lease", "2s", "-margin", "1s", "-limit", "5s", "-json", jsonOut}, &out)
			// The tables, without the violations that follow, each with
			// its history: their first lines come last.
			report, _, _ := strings.Cut(out.String(), "\nVIOLATION")
			b, jerr := os.ReadFile(jsonOut)
			if jerr != nil {
				t.Fatalf("chaos: %v, and no JSON: %v\n%s", err, jerr, out.String())
			}
			var res struct {
				Faults  map[string]int `json:"faults"`
				Trials  []trial        `json:"trials"`
				Verdict verdict        `json:"verdict"`
				Acting  actingOverlap  `json:"acting_overlap"`
				Clock   clockVerdict   `json:"clock"`
			}
			if err := json.Unmarshal(b, &res); err != nil {
				t.Fatal(err)
			}
			for _, f := range kinds {
				if res.Faults[f] != 2 {
					t.Errorf("%s injected %d times, want 2", f, res.Faults[f])
				}
			}
			for i, tr := range res.Trials {
				for _, e := range tr.Deposed {
					t.Errorf("trial %d, %s: a healthy leader deposed: %s %s after the step", i+1, describeClock(tr), e, secs(e.AfterS))
				}
			}
			for _, o := range res.Acting.Overlaps {
				if forbidsOverlap(o.Fault) {
					t.Errorf("trial %d, %s: %s and %s acted at once for %s", o.Trial+1, o.Fault, o.First, o.Second, secs(o.S))
				}
			}
			switch b := res.Clock.Failover; {
			case b == nil || b.Missing != "":
				t.Errorf("no bound on the clock kills' failover: %+v", b)
			default:
				for i, tr := range res.Trials {
					if clockKills(tr.Fault) && !tr.NoLeader && (tr.FailoverS < 0 || tr.FailoverS > b.BoundS) {
						took := "none within the limit"
						if tr.FailoverS >= 0 {
							took = secs(tr.FailoverS)
						}
						t.Errorf("trial %d, %s: failover %s, past %s", i+1, describeClock(tr), took, b)
					}
				}
			}
			v := res.Verdict
			if v.Stale > 0 || v.Lost > 0 || v.Linearizable != "Ok" {
				t.Errorf("the checkers: %d stale writes, %d lost, Porcupine %q", v.Stale, v.Lost, v.Linearizable)
			}
			if err != nil || t.Failed() {
				for _, msg := range v.Violations {
					first, _, _ := strings.Cut(msg, "\n")
					report += "\nVIOLATION: " + first
				}
				t.Errorf("chaos: %v\n%s", err, report)
			}
		})
	}
}

// near reports whether x is y, but for float rounding.
func near(x, y float64) bool { return x-y < 1e-9 && y-x < 1e-9 }

// The clock faults' own verdict, from hand-made trials: a term a clock
// fault ended is a violation, and so is a clock kill's failover past the
// slowest sigkill's plus the check interval, or none; without a sigkill
// there is no bound, and the verdict says to add one.
func TestCheckClock(t *testing.T) {
	a := &arena{arenaSpec: arenaSpec{tm: timing{Interval: 100 * time.Millisecond, Check: 200 * time.Millisecond}}}
	trials := []trial{
		{Fault: fSIGKILL, At: 1, FailoverS: 2.8},
		{Fault: fClockBackKill, At: 2, FailoverS: 3.05, StepS: -10}, // within 2.9 + 0.2
		{Fault: fClockBackKill, At: 3, FailoverS: 12.8, StepS: -10}, // past it
		{Fault: fClockForwardKill, At: 4, FailoverS: -1, StepS: 10}, // none within the limit
		{Fault: fClockForwardKill, NoLeader: true},                  // struck nothing
		{Fault: fClockForward, At: 5, FailoverS: 0.2, StepS: 60, HeldS: 1, Deposed: []termEnd{{ID: "c1", Term: "7", Reason: "lock-lost", AfterS: 0.2}}},
		{Fault: fClockStrobe, At: 6, FailoverS: -1, StepS: 5, HeldS: 3},
		{Fault: fSIGKILL, At: 7, FailoverS: 2.9},
	}
	var v verdict
	cv := checkClock(a, trials, &v)
	b := cv.Failover
	if b == nil || b.SigkillRuns != 2 || b.SigkillMaxS != 2.9 || !near(b.BoundS, 3.1) || b.Over != 2 {
		t.Fatalf("bound %+v", b)
	}
	if cv.Faults[fClockForwardKill] != 1 || cv.Deposed[fClockForward] != 1 || cv.Deposed[fClockStrobe] != 0 {
		t.Errorf("faults %v, deposed %v", cv.Faults, cv.Deposed)
	}
	wants := []string{"term 7 of c1 ended lock-lost", "(trial 3): the next leader acted after 12.80 s, past 3.10 s", "(trial 4): no new leader within the limit"}
	if len(v.Violations) != len(wants) {
		t.Fatalf("violations %q, want %d", v.Violations, len(wants))
	}
	for i, want := range wants {
		if !strings.Contains(v.Violations[i], want) {
			t.Errorf("violation %d: %q, want %q", i, v.Violations[i], want)
		}
	}
	// Under LeaseRow, the latest a plain kill fails over by design,
	// L + S + C, when the run's kills were all quicker.
	v = verdict{}
	lease := &arena{arenaSpec: arenaSpec{contender: libLease, tm: timing{Interval: 100 * time.Millisecond, Check: 200 * time.Millisecond, Lease: 2 * time.Second, Margin: time.Second}}}
	if b := checkClock(lease, trials, &v).Failover; b == nil || !near(b.BoundS, 3.4) || b.Over != 2 || !strings.Contains(b.String(), "L + S + C = 3.20 s") {
		t.Errorf("under LeaseRow: bound %+v (%v)", b, b)
	}
	v = verdict{}
	if cv := checkClock(a, trials[1:4], &v); cv.Failover == nil || cv.Failover.BoundS >= 0 || !strings.Contains(cv.Failover.Missing, "add sigkill") || len(v.Violations) != 0 {
		t.Errorf("without a sigkill: %+v, %q", cv.Failover, v.Violations)
	}
}

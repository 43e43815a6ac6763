package electiongocron_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/go-co-op/gocron/v2"
	_ "github.com/go-sql-driver/mysql"

	"github.com/sqlelect/election"
	"github.com/sqlelect/election/electiongocron"
	"github.com/sqlelect/election/internal/mysqltest"
)

// server is the one server of this test binary, started by TestMain.
var server *mysqltest.Server

func TestMain(m *testing.M) {
	os.Exit(mysqltest.Main(m, func(s *mysqltest.Server) func() {
		server = s
		return nil
	}))
}

// config is the test timing (W = 2s) with identity id.
func config(id string) election.Config {
	return election.Config{Identity: id, Interval: 100 * time.Millisecond, Lease: time.Second, Margin: time.Second}
}

func candidateRows(t *testing.T, db *sql.DB) int {
	t.Helper()
	var n int
	if err := db.QueryRow("SELECT COUNT(*) FROM election_candidate").Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// waitFor polls cond for up to d.
func waitFor(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	for end := time.Now().Add(d); !cond(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(end) {
			t.Fatalf("timed out after %v waiting for %s", d, what)
		}
	}
}

// instance is one scheduler with the Elector.
type instance struct {
	g        *electiongocron.Elector
	s        gocron.Scheduler
	runs     atomic.Int64
	termless atomic.Int64 // runs that found no term
	closed   bool
}

func (in *instance) close(t *testing.T) {
	t.Helper()
	if in.closed {
		return
	}
	in.closed = true
	if err := in.s.Shutdown(); err != nil {
		t.Error(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := in.g.Close(ctx); err != nil {
		t.Error(err)
	}
}

// Three schedulers on one election: only the leader's job runs; after the
// leader's Close another one's does; Close leaves no candidate row.
func TestElectorOnlyLeaderRuns(t *testing.T) {
	db := server.Open(t, server.NewDatabase(t))
	ins := make([]*instance, 3)
	for i := range ins {
		e, err := election.New(db, "jobs", config(fmt.Sprintf("scheduler-%d", i)))
		if err != nil {
			t.Fatal(err)
		}
		in := &instance{g: electiongocron.NewElector(e)}
		in.s, err = gocron.NewScheduler(gocron.WithDistributedElector(in.g))
		if err != nil {
			t.Fatal(err)
		}
		_, err = in.s.NewJob(gocron.DurationJob(50*time.Millisecond), gocron.NewTask(func() {
			if in.g.Term() == nil {
				in.termless.Add(1)
			}
			in.runs.Add(1)
		}), gocron.WithName("tick"))
		if err != nil {
			t.Fatal(err)
		}
		in.s.Start()
		ins[i] = in
		defer in.close(t)
	}
	leader := func() int {
		l := -1
		for i, in := range ins {
			if !in.closed && in.g.IsLeader(context.Background()) == nil {
				if l >= 0 {
					t.Fatalf("instances %d and %d both lead", l, i)
				}
				l = i
			}
		}
		return l
	}
	waitFor(t, 10*time.Second, "a leader", func() bool { return leader() >= 0 })
	first := leader()
	for i, in := range ins {
		if err := in.g.IsLeader(context.Background()); i != first && !errors.Is(err, electiongocron.ErrNotLeader) {
			t.Errorf("instance %d: IsLeader = %v, want ErrNotLeader", i, err)
		}
	}
	time.Sleep(time.Second)
	for i, in := range ins {
		t.Logf("instance %d: %d runs", i, in.runs.Load())
		if i == first && in.runs.Load() < 5 {
			t.Errorf("the leader, instance %d, ran its job %d times in a second", i, in.runs.Load())
		}
		if i != first && in.runs.Load() != 0 {
			t.Errorf("instance %d does not lead but ran its job %d times", i, in.runs.Load())
		}
	}

	ins[first].close(t)
	before := ins[first].runs.Load()
	waitFor(t, 10*time.Second, "a new leader", func() bool { return leader() >= 0 })
	second := leader()
	base := make([]int64, len(ins))
	for i, in := range ins {
		base[i] = in.runs.Load()
	}
	time.Sleep(time.Second)
	for i, in := range ins {
		n := in.runs.Load() - base[i]
		t.Logf("after instance %d closed: instance %d: %d runs", first, i, n)
		switch {
		case i == second && n < 5:
			t.Errorf("the new leader, instance %d, ran its job %d times in a second", i, n)
		case i != second && n != 0:
			t.Errorf("instance %d does not lead but ran its job %d times", i, n)
		}
	}
	if got := ins[first].runs.Load(); got != before {
		t.Errorf("the closed instance ran its job %d times more", got-before)
	}
	for i, in := range ins {
		if n := in.termless.Load(); n != 0 {
			t.Errorf("instance %d: %d runs found no term", i, n)
		}
	}
	for _, in := range ins {
		in.close(t)
	}
	if n := candidateRows(t, db); n != 0 {
		t.Errorf("%d candidate rows left after Close", n)
	}
}

// JobContext ends with the term, and is cancelled at once on an instance
// that does not lead.
func TestJobContext(t *testing.T) {
	db := server.Open(t, server.NewDatabase(t))
	e, err := election.New(db, "jobctx", config("a"))
	if err != nil {
		t.Fatal(err)
	}
	g := electiongocron.NewElector(e)
	waitFor(t, 10*time.Second, "leading", func() bool { return g.IsLeader(context.Background()) == nil })
	term := g.Term()
	if term == nil || term.Token() == 0 {
		t.Fatalf("Term() = %v while leading", term)
	}
	ctx, cancel := g.JobContext(context.Background())
	defer cancel()
	if ctx.Err() != nil {
		t.Fatalf("the job context of a leader is cancelled: %v", context.Cause(ctx))
	}
	closeCtx, stop := context.WithTimeout(context.Background(), 10*time.Second)
	defer stop()
	if err := g.Close(closeCtx); err != nil {
		t.Fatal(err)
	}
	select {
	case <-ctx.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("the job context outlived the term")
	}
	if g.Term() != nil || g.IsLeader(context.Background()) == nil {
		t.Error("still leading after Close")
	}
	ctx2, cancel2 := g.JobContext(context.Background())
	defer cancel2()
	if !errors.Is(context.Cause(ctx2), electiongocron.ErrNotLeader) {
		t.Errorf("job context without a term: cause %v, want ErrNotLeader", context.Cause(ctx2))
	}
	if n := candidateRows(t, db); n != 0 {
		t.Errorf("%d candidate rows left after Close", n)
	}
}

// Two schedulers with the Locker fire the same job every second at the same
// time: it runs once per second.
func TestLockerRunsOncePerSlot(t *testing.T) {
	db := server.Open(t, server.NewDatabase(t))
	var mu sync.Mutex
	slots := map[int64][]int{} // second -> the instances that ran then
	var lockers []*electiongocron.Locker
	var scheds []gocron.Scheduler
	for i := range 2 {
		l, err := electiongocron.NewLocker(db, config(fmt.Sprintf("scheduler-%d", i)), electiongocron.WithMinHold(500*time.Millisecond))
		if err != nil {
			t.Fatal(err)
		}
		s, err := gocron.NewScheduler(gocron.WithDistributedLocker(l))
		if err != nil {
			t.Fatal(err)
		}
		_, err = s.NewJob(gocron.CronJob("* * * * * *", true), gocron.NewTask(func() {
			slot := time.Now().Unix()
			mu.Lock()
			slots[slot] = append(slots[slot], i)
			mu.Unlock()
			time.Sleep(20 * time.Millisecond) // shorter than the gap between the instances' timers
		}), gocron.WithName("report"))
		if err != nil {
			t.Fatal(err)
		}
		lockers, scheds = append(lockers, l), append(scheds, s)
	}
	for _, s := range scheds {
		s.Start()
	}
	time.Sleep(4500 * time.Millisecond)
	for _, s := range scheds {
		if err := s.Shutdown(); err != nil {
			t.Error(err)
		}
	}
	for _, l := range lockers {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		if err := l.Close(ctx); err != nil {
			t.Error(err)
		}
		cancel()
	}
	mu.Lock()
	defer mu.Unlock()
	if len(slots) < 3 {
		t.Errorf("the job ran in %d seconds of 4.5: %v", len(slots), slots)
	}
	for slot, who := range slots {
		t.Logf("second %d: instances %v", slot, who)
		if len(who) != 1 {
			t.Errorf("second %d: the job ran %d times (instances %v)", slot, len(who), who)
		}
	}
	if n := candidateRows(t, db); n != 0 {
		t.Errorf("%d candidate rows left after Close", n)
	}
}

// A Lock taken by one Locker is refused to another with ErrHeld until
// Unlock and the minimum hold have passed.
func TestLockerMinHold(t *testing.T) {
	db := server.Open(t, server.NewDatabase(t))
	a, err := electiongocron.NewLocker(db, config("a"), electiongocron.WithMinHold(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	b, err := electiongocron.NewLocker(db, config("b"), electiongocron.WithMinHold(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	start := time.Now()
	lk, err := a.Lock(ctx, "job")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.Lock(ctx, "job"); !errors.Is(err, election.ErrHeld) {
		t.Fatalf("second Lock: %v, want ErrHeld", err)
	}
	if err := lk.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Lock(ctx, "job"); !errors.Is(err, election.ErrHeld) && time.Since(start) < 900*time.Millisecond {
		t.Fatalf("Lock after Unlock, within the minimum hold: %v, want ErrHeld", err)
	}
	var lk2 gocron.Lock
	waitFor(t, 5*time.Second, "the lock after the minimum hold", func() bool {
		lk2, err = b.Lock(ctx, "job")
		return err == nil
	})
	if d := time.Since(start); d < time.Second {
		t.Errorf("the lock was free again after %v, before the minimum hold", d)
	}
	lk2.Unlock(ctx)
	for _, l := range []*electiongocron.Locker{a, b} {
		if err := l.Close(ctx); err != nil {
			t.Error(err)
		}
	}
	if _, err := a.Lock(ctx, "job"); !errors.Is(err, electiongocron.ErrClosed) {
		t.Errorf("Lock after Close: %v, want ErrClosed", err)
	}
	if n := candidateRows(t, db); n != 0 {
		t.Errorf("%d candidate rows left after Close", n)
	}
}

func TestElectionName(t *testing.T) {
	if got := electiongocron.ElectionName("gocron:", "report"); got != "gocron:report" {
		t.Errorf("short key: %q", got)
	}
	long := strings.Repeat("k", 70000)
	got := electiongocron.ElectionName("gocron:", long)
	if len(got) > 200 || !strings.HasPrefix(got, "gocron:kkk") || !strings.Contains(got, "#") {
		t.Errorf("long key: %q", got)
	}
	if other := electiongocron.ElectionName("gocron:", long+"x"); other == got {
		t.Error("two long keys share a name")
	}
	bad := electiongocron.ElectionName("gocron:", "a\x00b\xff")
	if !utf8.ValidString(bad) || strings.ContainsAny(bad, "\x00") || !strings.HasPrefix(bad, "gocron:a_b") {
		t.Errorf("unprintable key: %q", bad)
	}
}

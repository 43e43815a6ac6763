package election_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/sqlelect/election"
)

// Each fault ends a term of candidate processes; afterwards History, the
// last end Watch sent for each term, the leader's own "term ended" log
// line and its Observer name the same reason, and History and Watch the
// same time: the moment the leader stopped acting, even when it could
// write that only after its successor had started.
func TestOperatorViewsAgree(t *testing.T) {
	forEachStrategy(t, func(t *testing.T, s election.Strategy) {
		db, g := writingGroup(t, s, "views", 2)
		ctx := ctxFor(t, 2*time.Minute)
		ops := newOperatorWith(t, db, "views", func() election.Config { c := fast; c.Strategy = s; return c }())
		var (
			mu      sync.Mutex
			watched = map[uint64]election.Event{} // the last end sent per term
			seen    = map[uint64]bool{}           // the terms whose start was sent
		)
		wctx, stopWatch := context.WithCancel(ctx)
		events := ops.Watch(wctx)
		watching := make(chan struct{})
		go func() {
			defer close(watching)
			for ev := range events {
				if ev.Leading {
					mu.Lock()
					seen[ev.Token] = true
					mu.Unlock()
				}
				if !ev.Leading && ev.Token != 0 {
					mu.Lock()
					watched[ev.Token] = ev
					mu.Unlock()
				}
			}
		}()

		type fault struct {
			name string
			do   func(leader election.Record)
			want string // the reason every view must give
		}
		faults := []fault{
			{"SIGKILL", func(l election.Record) { g.signal(l.Identity, syscall.SIGKILL); g.start(l.Identity + "'") }, "lost"},
			{"SIGSTOP", func(l election.Record) {
				g.signal(l.Identity, syscall.SIGSTOP)
				waitFor(t, "a leader after the pause", 20*time.Second, func() bool {
					rec, err := ops.Leader(ctx)
					return err == nil && rec.Token > l.Token
				})
				g.signal(l.Identity, syscall.SIGCONT)
			}, "lease-expired"},
			{"demote", func(election.Record) {
				if _, err := ops.Demote(ctx); err != nil {
					t.Fatal(err)
				}
			}, "demoted"},
			{"SIGTERM", func(l election.Record) { g.signal(l.Identity, syscall.SIGTERM); g.start(l.Identity + "'") }, "resigned"},
		}
		if s == election.GetLock { // a lease holds no session to kill
			faults = append(faults, fault{"KILL CONNECTION", func(l election.Record) {
				if _, err := db.ExecContext(ctx, fmt.Sprint("KILL CONNECTION ", l.ConnID)); err != nil {
					t.Fatal(err)
				}
			}, "session-lost"})
		}
		// leading returns the record of a leader of a term after term after
		// whose history row is written: the next fault must not cut that
		// write, which also records the end of the term before.
		leading := func(after uint64) election.Record {
			var rec election.Record
			waitFor(t, "a leader", 20*time.Second, func() bool {
				var err error
				if rec, err = ops.Leader(ctx); err != nil || !rec.Leading() || rec.Token <= after {
					return false
				}
				hist, err := ops.History(ctx, 1)
				return err == nil && len(hist) == 1 && hist[0].Token == rec.Token
			})
			return rec
		}
		ended := map[uint64]fault{}
		leader := leading(0)
		// Watch's first report is the newest term only: it must have seen
		// the first one before that one ends.
		waitFor(t, "Watch to report the first term", 20*time.Second, func() bool {
			mu.Lock()
			defer mu.Unlock()
			return seen[leader.Token]
		})
		for _, f := range faults {
			t.Logf("%s of %s, term %d", f.name, leader.Identity, leader.Token)
			f.do(leader)
			ended[leader.Token] = f
			leader = leading(leader.Token) // any candidate, the one whose session was killed too
		}

		// Every ended term's leader that lived has logged and observed its end,
		// and History shows each end.
		logged, observed := map[uint64]string{}, map[uint64]string{}
		for token, f := range ended {
			if f.want == "lost" {
				continue // killed: it logs nothing
			}
			logged[token] = g.Next(func(e event) bool { return e.Ev == "logged" && e.Token == token }, 20*time.Second).Reason
			observed[token] = g.Next(func(e event) bool { return e.Ev == "observed" && e.Token == token }, 20*time.Second).Reason
		}
		var hist []election.TermRecord
		waitFor(t, "every faulted term's end in the history", 20*time.Second, func() bool {
			var err error
			if hist, err = ops.History(ctx, 0); err != nil {
				t.Fatal(err)
			}
			found := 0
			for _, h := range hist {
				if f, ok := ended[h.Token]; ok && h.Reason == f.want {
					found++
				}
			}
			return found == len(ended)
		})
		t.Logf("history: %+v", hist)
		byToken, after := map[uint64]election.TermRecord{}, map[uint64]election.TermRecord{}
		for i, h := range hist { // newest first
			byToken[h.Token] = h
			if i > 0 {
				after[h.Token] = hist[i-1]
			}
		}
		// Watch reads every Interval: give it two reads after History.
		time.Sleep(3 * fast.Interval)
		stopWatch()
		<-watching
		for token, f := range ended {
			h, next := byToken[token], after[token]
			mu.Lock()
			w := watched[token]
			mu.Unlock()
			if h.Reason != f.want || w.Reason != h.Reason || !w.At.Equal(h.Ended) {
				t.Errorf("%s ended term %d: history %q at %v, watch %q at %v; want %q in both at the same time",
					f.name, token, h.Reason, h.Ended, w.Reason, w.At, f.want)
			}
			if f.want != "lost" && (logged[token] != h.Reason || observed[token] != h.Reason) {
				t.Errorf("%s ended term %d: logged %q, observed %q, history %q", f.name, token, logged[token], observed[token], h.Reason)
			}
			if h.Ended.Before(h.Started) {
				t.Errorf("%s: term %d ended at %v, before it started at %v", f.name, token, h.Ended, h.Started)
			}
			if f.name == "SIGSTOP" && !h.Ended.Before(next.Started) {
				// Its lease ended a margin before the server let the next
				// term start; the end it wrote after SIGCONT says so.
				t.Errorf("the paused leader's term %d ended at %v, not before the next began at %v", token, h.Ended, next.Started)
			}
		}
	})
}

// A demoted leader whose code ignores its context keeps the election until
// its lease ends; that is recorded as a demotion ending at the lease's end,
// and HealthHandler reports the code that outlives its term.
func TestDemotedLeaderThatDoesNotStop(t *testing.T) {
	forEachStrategy(t, func(t *testing.T, s election.Strategy) {
		db, _ := newDB(t)
		ctx := ctxFor(t, time.Minute)
		e := newElector(t, s, db, "stubborn", "a")
		started, release := make(chan uint64, 1), make(chan struct{})
		runInBackground(t, ctx, e, func(ctx context.Context, term *election.Term) error {
			select {
			case started <- term.Token():
				<-release // ignores ctx
			default:
			}
			<-ctx.Done()
			return nil
		})
		token := <-started
		ops := newOperatorWith(t, db, "stubborn", func() election.Config { c := fast; c.Strategy = s; return c }())
		if _, err := ops.Demote(ctx); err != nil {
			t.Fatal(err)
		}
		hist, err := ops.History(ctx, 0)
		if err != nil {
			t.Fatal(err)
		}
		var h election.TermRecord
		for _, r := range hist {
			if r.Token == token {
				h = r
			}
		}
		// Demote asked at the renewal; the lease (1 s) ran from a renewal at
		// most an interval earlier.
		if h.Reason != "demoted" || h.Ended.Sub(h.Started) < fast.Lease-fast.Interval {
			t.Errorf("term %d of a leader that ignored its demotion: %q after %v, want demoted at its lease's end", token, h.Reason, h.Ended.Sub(h.Started))
		}
		rr := httptest.NewRecorder()
		waitFor(t, "HealthHandler to report the code that outlived its term", 10*time.Second, func() bool {
			rr = httptest.NewRecorder()
			e.HealthHandler().ServeHTTP(rr, httptest.NewRequest("GET", "/healthz", nil))
			return rr.Code == http.StatusServiceUnavailable
		})
		close(release)
	})
}

// A leader whose function ignores the end of Run's context (a shutdown)
// and never returns keeps the election no longer than Margin after it: the
// term is resigned without the function, renewed no more, its fenced
// writes are refused, HealthHandler answers 503, the history says resigned
// at that moment, a WARN names the function, and another candidate leads
// while the function still runs.
func TestShutdownOfALeaderThatDoesNotStop(t *testing.T) {
	forEachStrategy(t, func(t *testing.T, s election.Strategy) {
		db, _ := newDB(t)
		ctx := ctxFor(t, time.Minute)
		cfg := fast
		cfg.Strategy = s
		var renewals, afterEnd atomic.Int64
		var ended atomic.Bool
		cfg.Observer = &election.Observer{
			Renewed: func(string, time.Duration, error) {
				renewals.Add(1)
				if ended.Load() {
					afterEnd.Add(1)
				}
			},
			TermEnded: func(string, string, uint64, string) { ended.Store(true) },
		}
		logger, logs := newLogged()
		cfg.Logger = logger
		cfg.Identity = "a"
		a := newElectorWith(t, db, "shutdown", cfg)
		started, release, returned := make(chan *election.Term, 1), make(chan struct{}), make(chan error, 1)
		runCtx, shutdown := context.WithCancel(ctx)
		go func() {
			returned <- a.Run(runCtx, func(_ context.Context, term *election.Term) error {
				started <- term
				<-release // never looks at its context
				return nil
			})
		}()
		t.Cleanup(func() {
			close(release)
			<-returned
		})
		ta := <-started
		b := campaign(ctx, newElector(t, s, db, "shutdown", "b"))
		waitFor(t, "a renewal", 10*time.Second, func() bool { return renewals.Load() > 0 })
		began := time.Now()
		shutdown()
		tb := await(t, b, 20*time.Second).term // bounded by Lease + Margin; never, before
		assertTokenAfter(t, tb.Token(), ta.Token())
		select {
		case err := <-returned:
			t.Fatalf("Run returned %v while the function runs", err)
		default:
		}
		if err := fencedWrite(ctx, ta, "a"); !errors.Is(err, election.ErrFenced) {
			t.Errorf("a fenced write of the abandoned term: %v, want ErrFenced", err)
		}
		if code, body := status(a.HealthHandler()); code != http.StatusServiceUnavailable || !strings.Contains(body, "still runs") {
			t.Errorf("HealthHandler of the process whose function does not stop: %d %s", code, body)
		}
		if n := afterEnd.Load(); n > 0 {
			t.Errorf("%d renewals after the term ended", n)
		}
		if lines := logs.lines("level=WARN", "did not return within Margin", "TestShutdownOfALeaderThatDoesNotStop"); len(lines) != 1 {
			t.Errorf("no WARN naming the function: %q", logs.lines("level=WARN"))
		}
		// The new term's row is written once the term has begun.
		ha, hb := twoTerms(ctx, t, newOperator(t, db, "shutdown"), ta.Token(), tb.Token(), func(_, hb election.TermRecord) bool { return hb.Token != 0 })
		// The database's clock and this one are the same machine's.
		if ha.Reason != "resigned" || ha.Ended.Before(began.Add(-time.Millisecond)) || ha.Ended.After(hb.Started) {
			t.Errorf("the abandoned term's history: %s at %v; the shutdown began at %v, the next term at %v", ha.Reason, ha.Ended, began, hb.Started)
		}
		t.Logf("the term ended %v after the shutdown began, the next one started %v after it",
			ha.Ended.Sub(began).Round(time.Millisecond), hb.Started.Sub(began).Round(time.Millisecond))
	})
}

// A resigned term's history ends before the next term starts, however late
// its end is written: a GetLock leader frees the lock first and records its
// end after, here held back by the network until the next term has begun.
func TestResignedTermEndsBeforeTheNextStarts(t *testing.T) {
	forEachStrategy(t, func(t *testing.T, s election.Strategy) {
		dbName := server.NewDatabase(t)
		slow, proxy := viaProxy(t, dbName)
		db := server.Open(t, dbName)
		ctx := ctxFor(t, time.Minute)
		ta := await(t, campaign(ctx, newElector(t, s, slow, "late", "a")), 10*time.Second).term
		b := campaign(ctx, newElector(t, s, db, "late", "b"))
		var held atomic.Bool
		proxy.BlackholeAt(func(chunk []byte) bool { // a tap that never fires: it holds the end back
			// A COM_QUERY packet: length (3 bytes), sequence, 0x03, the text.
			if len(chunk) > 5 && chunk[4] == 3 && strings.HasPrefix(string(chunk[5:]), "UPDATE (SELECT 1) AS x") {
				held.Store(true)
				time.Sleep(200 * time.Millisecond)
			}
			return false
		})
		resignAll(t, ta)
		tb := await(t, b, 10*time.Second).term
		if !held.Load() {
			t.Fatal("the leader never sent its end: the statement's prefix is out of date")
		}
		ha, hb := twoTerms(ctx, t, newOperator(t, db, "late"), ta.Token(), tb.Token(), func(ha, hb election.TermRecord) bool {
			return ha.Reason == "resigned" && hb.Token != 0 // both rows, the first with its own end
		})
		if ha.Ended.After(hb.Started) {
			t.Errorf("term %d ended at %v, after the next one started at %v", ha.Token, ha.Ended, hb.Started)
		}
	})
}

// twoTerms polls the history that ops reads until the rows of terms a and
// b (zero values until found) satisfy ready, and returns them.
func twoTerms(ctx context.Context, t *testing.T, ops *election.Operator, a, b uint64, ready func(ha, hb election.TermRecord) bool) (ha, hb election.TermRecord) {
	t.Helper()
	waitFor(t, "the two terms' history rows", 10*time.Second, func() bool {
		hist, err := ops.History(ctx, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, h := range hist {
			switch h.Token {
			case a:
				ha = h
			case b:
				hb = h
			}
		}
		return ready(ha, hb)
	})
	return ha, hb
}

// A term's history row starts when its claim returned, between the
// record's since and the leader's first fenced write, however late the row
// itself is written.
func TestHistoryStartIsTheClaim(t *testing.T) {
	forEachStrategy(t, func(t *testing.T, s election.Strategy) {
		db, _ := newDB(t)
		ctx := ctxFor(t, time.Minute)
		ops := newOperatorWith(t, db, "start", func() election.Config { c := fast; c.Strategy = s; return c }())
		for i := range 5 {
			term := await(t, campaign(ctx, newElector(t, s, db, "start", fmt.Sprint(i))), 10*time.Second).term
			var wrote time.Time
			if err := term.Fenced(ctx, func(tx *sql.Tx) error {
				var us int64
				err := tx.QueryRowContext(ctx, "SELECT TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', UTC_TIMESTAMP(6))").Scan(&us)
				wrote = time.UnixMicro(us).UTC()
				return err
			}); err != nil {
				t.Fatal(err)
			}
			rec, err := ops.Leader(ctx)
			if err != nil {
				t.Fatal(err)
			}
			var started time.Time
			waitFor(t, "the term's history row", 10*time.Second, func() bool {
				hist, err := ops.History(ctx, 1)
				if err == nil && len(hist) == 1 && hist[0].Token == term.Token() {
					started = hist[0].Started
					return true
				}
				return false
			})
			if started.Before(rec.Since) || started.After(wrote) {
				t.Errorf("term %d: history starts at %v, the record's since is %v, its first fenced statement ran at %v",
					term.Token(), started, rec.Since, wrote)
			}
			resignAll(t, term)
		}
	})
}

// After a SIGKILL of the leader, the lost term ends before the next one
// starts, in the history and in Watch: its end is sent before the next
// term's start, and no end is sent for a term once a later one has started
// but its own.
func TestLostTermEndsBeforeTheNextStarts(t *testing.T) {
	forEachStrategy(t, func(t *testing.T, s election.Strategy) {
		db, g := writingGroup(t, s, "killed", 3)
		ops := newOperator(t, db, "killed")
		ctx := ctxFor(t, 2*time.Minute)
		wctx, stop := context.WithCancel(ctx)
		events := ops.Watch(wctx)
		leader := g.Next(is("start"), 30*time.Second)
		const kills = 4
		for i := range kills {
			waitFor(t, "every candidate to campaign", 30*time.Second, func() bool { return len(liveCandidates(t, ops)) == 3 })
			g.signal(leader.ID, syscall.SIGKILL)
			next := g.Next(is("start"), 30*time.Second)
			g.start(fmt.Sprintf("%s-%d", leader.ID, i)) // a replica in its place
			leader = next
		}
		var hist []election.TermRecord
		waitFor(t, "the terms' history", 10*time.Second, func() bool {
			var err error
			hist, err = ops.History(ctx, 0)
			return err == nil && len(hist) == kills+1 && hist[0].Token == leader.Token
		})
		for i := 1; i < len(hist); i++ { // newest first
			if prev, next := hist[i], hist[i-1]; prev.Ended.IsZero() || prev.Ended.After(next.Started) {
				t.Errorf("term %d of %s ended at %v (%s), after term %d started at %v", prev.Token, prev.Identity, prev.Ended, prev.Reason, next.Token, next.Started)
			}
		}
		// From the state Watch found at its first read (the tables appear
		// with the first campaign) to the last leader's start.
		var started uint64 // the newest term whose start was sent
		for started != leader.Token {
			select {
			case ev := <-events:
				switch {
				case ev.Leading && ev.Token > started:
					started = ev.Token
				case !ev.Leading && ev.Token < started:
					t.Errorf("the end of term %d (%s, at %v) was sent after term %d's start", ev.Token, ev.Reason, ev.At, started)
				}
			case <-time.After(10 * time.Second):
				t.Fatalf("Watch sent no event for 10s; the last term it started: %d; the last leader's: %d", started, leader.Token)
			}
		}
		stop()
		for range events {
		}
	})
}

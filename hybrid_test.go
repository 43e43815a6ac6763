package election_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/sqlelect/election"
)

func TestLeaderRecord(t *testing.T) {
	forEachStrategy(t, func(t *testing.T, s election.Strategy) {
		db, _ := newDB(t)
		ctx := ctxFor(t, time.Minute)
		name := strings.Repeat("a long election name, ünïcödé, ", 40)
		a := newElector(t, s, db, name, "a")
		observer := newOperator(t, db, name)
		if _, err := observer.Leader(ctx); !errors.Is(err, election.ErrSchema) && !errors.Is(err, election.ErrNoLeader) {
			t.Fatalf("before any term: %v", err)
		}
		term := await(t, campaign(ctx, a), 10*time.Second).term
		time.Sleep(300 * time.Millisecond) // a few keepalives
		rec, err := observer.Leader(ctx)
		if err != nil {
			t.Fatal(err)
		}
		lockOK := rec.LockConnID == rec.ConnID // GetLock: the recorded session holds the lock
		if s == election.LeaseRow {
			lockOK = rec.LockConnID == 0 // a lease takes no lock
		}
		if rec.Name != name || rec.Strategy != s.String() || rec.Identity != "a" || rec.Token != term.Token() ||
			rec.State != "leading" || !lockOK || rec.Expiry != 2*time.Second || rec.PID == 0 {
			t.Fatalf("record: %+v", rec)
		}
		if rec.RenewedAgo < 0 || rec.RenewedAgo > rec.Expiry || !rec.Renewed.After(rec.Since) {
			t.Fatalf("renewals not recorded: %+v", rec)
		}
		// Names that differ only in case or length are separate elections.
		for _, other := range []string{strings.ToUpper(name), name + "x", name[:len(name)-1]} {
			if _, err := newOperator(t, db, other).Leader(ctx); !errors.Is(err, election.ErrNoLeader) {
				t.Fatalf("election %q shares the leader of %q: %v", other[:20], name[:20], err)
			}
		}
		resignAll(t, term)
		rec, err = observer.Leader(ctx)
		if !errors.Is(err, election.ErrNoLeader) || rec.State != "resigned" || rec.Ended.IsZero() {
			t.Fatalf("after resign: %v %+v", err, rec)
		}
	})
}

// Candidates of two strategies never share an election: the second one is
// refused while the first runs, whether it learns of it from the live
// candidates or from the acting term itself; once the election is idle the
// strategy may change.
func TestMixedStrategiesRefused(t *testing.T) {
	needGetLock(t) // the other strategy
	t.Parallel()
	for _, first := range strategies {
		second := election.LeaseRow
		if first == election.LeaseRow {
			second = election.GetLock
		}
		t.Run(first.String()+"-then-"+second.String(), func(t *testing.T) {
			t.Parallel()
			db, _ := newDB(t)
			ctx := ctxFor(t, time.Minute)
			ca, cb := calm, calm
			ca.Strategy, ca.Identity, cb.Strategy, cb.Identity = first, "a", second, "b"
			a, b := newElectorWith(t, db, "mixed", ca), newElectorWith(t, db, "mixed", cb)
			ta := await(t, campaign(ctx, a), 10*time.Second).term
			before := contentsOnceLed(t, db)
			if _, err := b.Campaign(ctx); !errors.Is(err, election.ErrStrategy) {
				t.Fatalf("campaign of another strategy beside a live candidate: %v", err)
			}
			assertWroteNothing(t, db, before, "the campaign of another strategy")
			// Without the candidate row, the acting term itself refuses.
			if _, err := db.Exec("DELETE FROM election_candidate"); err != nil {
				t.Fatal(err)
			}
			before = contentsOnceLed(t, db)
			if _, err := b.Campaign(ctx); !errors.Is(err, election.ErrStrategy) || !ta.IsLeader() {
				t.Fatalf("campaign of another strategy beside an acting term: %v (first still leads: %v)", err, ta.IsLeader())
			}
			assertWroteNothing(t, db, before, "the campaign of another strategy beside an acting term")
			resignAll(t, ta)
			db.Exec("DELETE FROM election_candidate")
			tb := await(t, campaign(ctx, b), 10*time.Second).term
			assertTokenAfter(t, tb.Token(), ta.Token())
		})
	}
}

func TestCandidatesAndElections(t *testing.T) {
	forEachStrategy(t, func(t *testing.T, s election.Strategy) {
		db, _ := newDB(t)
		ctx := context.Background()
		stops := map[string]context.CancelFunc{}
		for _, id := range []string{"a", "b", "c"} {
			e := newElector(t, s, db, "cands", id)
			cctx, stop := context.WithCancel(ctx)
			stops[id] = stop
			runInBackground(t, cctx, e, func(ctx context.Context, _ *election.Term) error { <-ctx.Done(); return nil })
		}
		ops := newOperator(t, db, "cands")
		var leader string
		waitFor(t, "three live candidates, one leading", 10*time.Second, func() bool {
			cs, err := ops.Candidates(ctx)
			if err != nil || len(cs) != 3 {
				return false
			}
			leaders := 0
			for _, c := range cs {
				if !c.Alive || c.PID == 0 || c.Since.IsZero() {
					return false
				}
				if c.Leader {
					leaders++
					leader = c.Identity
				}
			}
			return leaders == 1
		})
		var follower string
		for _, id := range []string{"a", "b", "c"} {
			if id != leader {
				follower = id
			}
		}
		stops[follower]()
		waitFor(t, "the stopped candidate's row to go", 10*time.Second, func() bool {
			cs, _ := ops.Candidates(ctx)
			for _, c := range cs {
				if c.Identity == follower {
					return false
				}
			}
			return len(cs) == 2
		})
		recs, err := election.Elections(ctx, db, "")
		if err != nil || len(recs) != 1 || recs[0].Name != "cands" || recs[0].Identity != leader || !recs[0].Leading() {
			t.Fatalf("elections: %+v, %v", recs, err)
		}
	})
}

func TestHistoryIsBounded(t *testing.T) {
	forEachStrategy(t, func(t *testing.T, s election.Strategy) {
		db, _ := newDB(t)
		cfg := fast
		cfg.Strategy = s
		cfg.HistoryLimit = 5
		e := newElectorWith(t, db, "bounded", cfg)
		ctx := ctxFor(t, time.Minute)
		var tokens []uint64
		for range 40 {
			term := await(t, campaign(ctx, e), 10*time.Second).term
			tokens = append(tokens, term.Token())
			resignAll(t, term)
		}
		var rows int
		db.QueryRow("SELECT COUNT(*) FROM election_term").Scan(&rows)
		if rows > 5+16 {
			t.Fatalf("%d history rows kept with HistoryLimit 5", rows)
		}
		hist, err := newOperatorWith(t, db, "bounded", cfg).History(ctx, 0)
		if err != nil || len(hist) != 5 || hist[0].Token != tokens[39] || hist[0].Reason != "resigned" || hist[4].Token != tokens[35] {
			t.Fatalf("history: %+v, %v", hist, err)
		}
	})
}

// Watch reports every transition of a scripted sequence, including the
// no-leader gaps and terms that began and ended between two of its reads.
func TestWatchSeesEveryTransition(t *testing.T) {
	forEachStrategy(t, func(t *testing.T, s election.Strategy) {
		db, _ := newDB(t)
		ctx := ctxFor(t, time.Minute)
		a, b, c := newElector(t, s, db, "watch", "a"), newElector(t, s, db, "watch", "b"), newElector(t, s, db, "watch", "c")
		if err := election.CreateSchema(ctx, db, ""); err != nil {
			t.Fatal(err)
		}
		slow := fast
		slow.Strategy = s
		slow.Interval = 700 * time.Millisecond
		slow.Lease = 2 * time.Second
		observer := newOperatorWith(t, db, "watch", slow)
		wctx, stop := context.WithCancel(ctx)
		events := observer.Watch(wctx)
		if ev := <-events; ev.Leading || ev.Token != 0 {
			t.Fatalf("first event %+v, want no leader", ev)
		}
		ta := await(t, campaign(ctx, a), 10*time.Second).term
		resignAll(t, ta)
		tb := await(t, campaign(ctx, b), 10*time.Second).term
		go func() { <-tb.Done(); tb.Resign(ctx) }() // stop at once when demoted
		if killed, err := observer.Demote(ctx); err != nil || killed {
			t.Fatalf("demote: %v %v", killed, err)
		}
		tc := await(t, campaign(ctx, c), 10*time.Second).term
		resignAll(t, tc)
		want := []election.Event{
			{Token: ta.Token(), Identity: "a", Leading: true}, {Token: ta.Token(), Identity: "a", Reason: "resigned"},
			{Token: tb.Token(), Identity: "b", Leading: true}, {Token: tb.Token(), Identity: "b", Reason: "demoted"},
			{Token: tc.Token(), Identity: "c", Leading: true}, {Token: tc.Token(), Identity: "c", Reason: "resigned"},
		}
		for i, w := range want {
			select {
			case ev := <-events:
				if ev.Token != w.Token || ev.Identity != w.Identity || ev.Leading != w.Leading || ev.Reason != w.Reason || ev.At.IsZero() {
					t.Fatalf("event %d: %+v, want %+v", i, ev, w)
				}
			case <-time.After(10 * time.Second):
				t.Fatalf("event %d (%+v) not seen", i, w)
			}
		}
		stop()
		for range events { // closed once ctx ends
		}
	})
}

// Names and identities are data: quotes, backticks, SQL and the longest
// allowed values go through every statement and come back exactly.
func TestHostileNamesAreData(t *testing.T) {
	forEachStrategy(t, func(t *testing.T, s election.Strategy) {
		db, _ := newDB(t)
		ctx := ctxFor(t, time.Minute)
		for _, tc := range []struct{ name, id string }{
			{"x`'\"; DROP TABLE election_record; -- \\", "h`'\"; DELETE FROM election_epoch; -- \\"},
			{strings.Repeat("ü", 65535/2), strings.Repeat("ü", 255)},
		} {
			e := newElector(t, s, db, tc.name, tc.id)
			term := await(t, campaign(ctx, e), 10*time.Second).term
			rec, err := newOperator(t, db, tc.name).Leader(ctx)
			if err != nil || rec.Name != tc.name || rec.Identity != tc.id || rec.Token != term.Token() {
				t.Fatalf("record of %.20q: %v, name %.20q identity %.20q token %d", tc.name, err, rec.Name, rec.Identity, rec.Token)
			}
			resignAll(t, term)
		}
	})
}

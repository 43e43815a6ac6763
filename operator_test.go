package election_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/sqlelect/election"
)

// Demote of a healthy leader: it steps down gracefully, its function
// returns before the next leader's starts, and nothing is killed.
func TestDemoteHealthyLeader(t *testing.T) {
	forEachStrategy(t, func(t *testing.T, s election.Strategy) {
		db, _ := newDB(t)
		ctx, cancel := context.WithCancel(context.Background())
		type span struct {
			id         string
			token      uint64
			start, end time.Time
		}
		spans := make(chan span, 10)
		for _, id := range []string{"a", "b"} {
			runInBackground(t, ctx, newElector(t, s, db, "demote", id), func(ctx context.Context, term *election.Term) error {
				s := span{id: id, token: term.Token(), start: time.Now()}
				<-ctx.Done()
				time.Sleep(100 * time.Millisecond) // clean-up the next leader must wait for
				s.end = time.Now()
				spans <- s
				return nil
			})
		}
		ops := newOperator(t, db, "demote")
		waitFor(t, "a leader", 10*time.Second, func() bool { _, err := ops.Leader(ctx); return err == nil })
		before, _ := ops.Leader(ctx)
		killed, err := ops.Demote(ctxFor(t, 20*time.Second))
		if err != nil || killed {
			t.Fatalf("demote of a healthy leader: killed %v, err %v", killed, err)
		}
		old := <-spans
		waitFor(t, "the next leader", 10*time.Second, func() bool { r, err := ops.Leader(ctx); return err == nil && r.Token > before.Token })
		cancel()
		next := <-spans
		if old.token != before.Token || next.token <= old.token || !old.end.Before(next.start) {
			t.Fatalf("demoted term %d ended %v; next term %d started %v", old.token, old.end, next.token, next.start)
		}
		assertHistoryReason(t, ops, old.token, "demoted")
	})
}

// Hand-over goes to the named candidate even when another candidate is
// ahead of it in the lock's queue; naming an unknown or dead candidate is
// refused and changes nothing.
func TestHandover(t *testing.T) {
	forEachStrategy(t, func(t *testing.T, s election.Strategy) {
		db, _ := newDB(t)
		ctx := context.Background()
		starts := make(chan string, 10)
		run := func(id string) {
			runInBackground(t, ctx, newElector(t, s, db, "handover", id), func(ctx context.Context, term *election.Term) error {
				starts <- id
				<-ctx.Done()
				return nil
			})
		}
		run("a")
		if first := <-starts; first != "a" {
			t.Fatalf("first leader %s", first)
		}
		run("b")
		time.Sleep(300 * time.Millisecond) // b queues first
		run("c")
		ops := newOperator(t, db, "handover")
		waitFor(t, "three live candidates", 10*time.Second, func() bool {
			cs, err := ops.Candidates(ctx)
			alive := 0
			for _, c := range cs {
				if c.Alive {
					alive++
				}
			}
			return err == nil && alive == 3
		})
		before, err := ops.Leader(ctx)
		if err != nil {
			t.Fatal(err)
		}
		db.Exec("INSERT INTO election_candidate (lock_name, identity, host, pid, since, seen_at, expiry_us) " +
			"SELECT lock_name, 'ghost', 'gone', 1, UTC_TIMESTAMP(6) - INTERVAL 1 HOUR, UTC_TIMESTAMP(6) - INTERVAL 1 HOUR, 1000000 FROM election_record")
		// "c " is c to the tables, which ignore trailing spaces: refused,
		// not handed to c.
		for _, target := range []string{"nobody", "ghost", "c ", "c\x1b[2K"} {
			if _, err := ops.Handover(ctx, target); !errors.Is(err, election.ErrNotCandidate) {
				t.Fatalf("hand-over to %s: %v, want ErrNotCandidate", target, err)
			}
		}
		if after, err := ops.Leader(ctx); err != nil || after.Token != before.Token || after.HandoverTo != "" || after.DemotedAgo != 0 {
			t.Fatalf("a refused hand-over changed the record: %+v %v", after, err)
		}
		if killed, err := ops.Handover(ctx, "c"); err != nil || killed {
			t.Fatalf("hand-over to c: killed %v, err %v", killed, err)
		}
		select {
		case next := <-starts:
			if next != "c" {
				t.Fatalf("hand-over to c, but %s leads", next)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("c did not lead after the hand-over")
		}
		assertHistoryReason(t, ops, before.Token, "handed-over")
	})
}

// Remove is refused, changing nothing, while a term may act; once every
// candidate has stopped it deletes the election's rows, and a candidate
// that campaigns afterwards starts the election anew with a higher token.
func TestRemove(t *testing.T) {
	forEachStrategy(t, func(t *testing.T, s election.Strategy) {
		db, _ := newDB(t)
		ctx := ctxFor(t, time.Minute)
		runCtx, stop := context.WithCancel(ctx)
		runInBackground(t, runCtx, newElector(t, s, db, "retired", "a"), func(ctx context.Context, _ *election.Term) error {
			<-ctx.Done()
			return nil
		})
		reader := newOperator(t, db, "retired")
		waitFor(t, "a leader", 10*time.Second, func() bool { _, err := reader.Leader(ctx); return err == nil })
		first, _ := reader.Leader(ctx)
		before := contentsOnceLed(t, db)
		// As a user with the grants docs/operations.md gives for Remove.
		dbName := dbNameOf(t, db)
		var grants []string
		for _, table := range []string{"record", "epoch", "candidate", "term"} {
			grants = append(grants, "GRANT SELECT, DELETE ON `"+dbName+"`.election_"+table+" TO %s")
		}
		grants = append(grants, "GRANT SELECT ON `"+dbName+"`.election_lease TO %s")
		ops := newOperator(t, openAsUser(t, dbName, "remover_"+dbName, grants...), "retired")
		if err := ops.Remove(ctx); !errors.Is(err, election.ErrInUse) {
			t.Fatalf("Remove while a leads: %v, want ErrInUse", err)
		}
		assertWroteNothing(t, db, before, "a refused Remove")
		stop()
		waitFor(t, "a to stop campaigning", 10*time.Second, func() bool {
			cs, err := ops.Candidates(ctx)
			return err == nil && len(cs) == 0
		})
		if err := ops.Remove(ctx); err != nil {
			t.Fatal(err)
		}
		for table, n := range contents(t, db) {
			if n != 0 {
				t.Errorf("%s keeps %d rows after Remove", table, n)
			}
		}
		if err := ops.Remove(ctx); err != nil {
			t.Errorf("Remove of an election that does not exist: %v", err)
		}
		next := await(t, campaign(ctx, newElector(t, s, db, "retired", "b")), 10*time.Second).term
		assertTokenAfter(t, next.Token(), first.Token)
	})
}

// A candidate's Elector answers who leads, its own term included, with
// ErrNoLeader before the first term.
func TestElectorLeader(t *testing.T) {
	forEachStrategy(t, func(t *testing.T, s election.Strategy) {
		db, _ := newDB(t)
		ctx := ctxFor(t, time.Minute)
		a, b := newElector(t, s, db, "who", "a"), newElector(t, s, db, "who", "b")
		if _, err := b.Leader(ctx); !errors.Is(err, election.ErrNoLeader) {
			t.Fatalf("Leader before the first term: %v, want ErrNoLeader", err)
		}
		ta := await(t, campaign(ctx, a), 10*time.Second).term
		waiting := campaign(ctx, b)
		if r, err := b.Leader(ctx); err != nil || r.Identity != "a" || r.Token != ta.Token() {
			t.Fatalf("the waiting candidate's Leader: %+v, %v; want a in term %d", r, err, ta.Token())
		}
		resignAll(t, ta)
		tb := await(t, waiting, 10*time.Second).term
		if r, err := b.Leader(ctx); err != nil || r.Identity != "b" || r.Token != tb.Token() {
			t.Fatalf("the leader's own Leader: %+v, %v; want b in term %d", r, err, tb.Token())
		}
	})
}

// A term whose history row is not there (not written yet, or never: its
// leader's writes failed) is listed by History from the record, as Leader
// shows it, and its end too.
func TestHistoryListsTheRecordsTerm(t *testing.T) {
	forEachStrategy(t, func(t *testing.T, s election.Strategy) {
		if s == election.GetLock {
			needGetLock(t)
		}
		db, _ := newDB(t)
		ctx := ctxFor(t, time.Minute)
		term := await(t, campaign(ctx, newElector(t, s, db, "unwritten", "a")), 10*time.Second).term
		ops := newOperator(t, db, "unwritten")
		waitFor(t, "the term's history row", 10*time.Second, func() bool {
			hist, err := ops.History(ctx, 0)
			return err == nil && len(hist) == 1 && hist[0].Token == term.Token()
		})
		if _, err := db.Exec("DELETE FROM election_term"); err != nil {
			t.Fatal(err)
		}
		hist, err := ops.History(ctx, 0)
		if err != nil || len(hist) != 1 || hist[0].Token != term.Token() || hist[0].Identity != "a" || !hist[0].Ended.IsZero() {
			t.Fatalf("History with the row gone: %+v, %v; want term %d of a, going on", hist, err, term.Token())
		}
		resignAll(t, term)
		hist, err = ops.History(ctx, 0)
		if err != nil || len(hist) != 1 || hist[0].Reason != "resigned" || hist[0].Ended.IsZero() {
			t.Fatalf("History after the resignation: %+v, %v; want the term ended resigned", hist, err)
		}
	})
}

package election_test

import (
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/sqlelect/election"
)

// A connection reset between leader and server: under LeaseRow the pool
// reconnects and the term goes on. (Under GetLock it ends:
// TestConnectionResetEndsGetLockTerm.)
func TestLeaseTermSurvivesConnectionReset(t *testing.T) {
	t.Parallel()
	ta, rb, proxy := proxiedLeader(t, election.LeaseRow, "reset")
	proxy.Reset()
	time.Sleep(3 * fast.Lease)
	if !ta.IsLeader() || ta.Err() != nil || len(rb) != 0 {
		t.Fatalf("a lease term ended on a connection reset: %v", ta.Err())
	}
}

// A lease term lives by its record's renewal. The candidate heartbeat that
// goes with it may fail on its own (a reset connection in the middle of it;
// here, a missing UPDATE grant on the candidates' table): the term goes on.
func TestLeaseTermSurvivesAFailedHeartbeat(t *testing.T) {
	t.Parallel()
	dbName := server.NewDatabase(t)
	ctx := ctxFor(t, time.Minute)
	if err := election.CreateSchema(ctx, server.Open(t, dbName), ""); err != nil {
		t.Fatal(err)
	}
	db := openAsUser(t, dbName, "nohb_"+dbName, "GRANT SELECT, INSERT, DELETE ON `"+dbName+"`.* TO %s")
	admin := server.Open(t, "")
	account := "'nohb_" + dbName + "'@'%'"
	for _, table := range []string{"election_record", "election_epoch", "election_term", "election_candidate"} {
		if _, err := admin.Exec("GRANT UPDATE ON `" + dbName + "`.`" + table + "` TO " + account); err != nil {
			t.Fatal(err)
		}
	}
	cfg := fast
	cfg.Strategy, cfg.Identity, cfg.SkipCreateTables = election.LeaseRow, "a", true
	e := newElectorWith(t, db, "heartbeat", cfg)
	term, err := e.Campaign(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer term.Resign(ctx)
	if _, err := admin.Exec("REVOKE UPDATE ON `" + dbName + "`.`election_candidate` FROM " + account); err != nil {
		t.Fatal(err)
	}
	time.Sleep(3 * cfg.Lease) // heartbeats are due every Lease/2
	var ageMS int64
	if err := admin.QueryRow("SELECT TIMESTAMPDIFF(MICROSECOND, seen_at, UTC_TIMESTAMP(6)) DIV 1000 FROM `" + dbName +
		"`.election_candidate WHERE identity = 'a'").Scan(&ageMS); err != nil {
		t.Fatal(err)
	}
	if time.Duration(ageMS)*time.Millisecond < 2*cfg.Lease {
		t.Fatalf("the candidate row was renewed %d ms ago: the heartbeats did not fail, the test tests nothing", ageMS)
	}
	if !term.IsLeader() || term.Err() != nil {
		t.Fatalf("the term ended when only its candidate heartbeat failed: %v", term.Err())
	}
}

// A LeaseRow leader's keepalive waits for its process's next batched
// renewal, up to an Interval after the term's tick. A resignation does not
// wait for it: the keepalive in flight is given up, so its outcome is
// never reported. Resigned 0.9 Interval after a renewal was reported, a
// keepalive is in flight unless the term's ticks lag the batch's rounds by
// more than that; five terms in a row resign so.
func TestResignationDoesNotWaitForABatchedKeepalive(t *testing.T) {
	t.Parallel()
	db := server.Open(t, server.NewDatabase(t))
	ctx := ctxFor(t, time.Minute)
	var (
		mu      sync.Mutex
		renewed = make(chan struct{}, 100)
		during  int // renewals reported while Resign ran
		resign  bool
		waited  int // resignations during which one was
	)
	cfg := election.Config{Strategy: election.LeaseRow, Identity: "a", Interval: 400 * time.Millisecond, Lease: time.Second, Margin: time.Second}
	cfg.Observer = &election.Observer{Renewed: func(string, time.Duration, error) {
		mu.Lock()
		if resign {
			during++
		}
		mu.Unlock()
		select {
		case renewed <- struct{}{}:
		default:
		}
	}}
	e := newElectorWith(t, db, "resign-batched", cfg)
	for range 5 {
		term, err := e.Campaign(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for len(renewed) > 0 {
			<-renewed
		}
		select {
		case <-renewed:
		case <-ctx.Done():
			t.Fatal("no keepalive reported")
		}
		time.Sleep(cfg.Interval * 9 / 10)
		mu.Lock()
		resign = true
		mu.Unlock()
		err = term.Resign(ctx)
		mu.Lock()
		resign = false
		if during > 0 {
			waited++
		}
		during = 0
		mu.Unlock()
		if err != nil || !errors.Is(term.Err(), election.ErrResigned) {
			t.Fatalf("resign: %v, the term's end %v", err, term.Err())
		}
	}
	if waited > 0 {
		t.Fatalf("%d of 5 resignations waited for the keepalive in flight (its outcome was reported while Resign ran)", waited)
	}
}

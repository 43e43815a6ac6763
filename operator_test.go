package election_test

import (
	"context"
	"database/sql"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sqlelect/election"
)

// holdRecordRow blocks every write to the election's record row, as a long
// transaction of another client would, until the returned func is called.
func holdRecordRow(t *testing.T, db *sql.DB) func() {
	t.Helper()
	tx, err := db.Begin()
	if err != nil {
		t.Fatal(err)
	}
	var n int
	if err := tx.QueryRow("SELECT COUNT(*) FROM election_record FOR UPDATE").Scan(&n); err != nil {
		t.Fatal(err)
	}
	var once sync.Once
	release := func() { once.Do(func() { tx.Rollback() }) }
	t.Cleanup(release)
	return release
}

func waitFor(t *testing.T, what string, limit time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", limit, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func lastTerm(t *testing.T, e *election.Operator, token uint64) election.TermRecord {
	t.Helper()
	hist, err := e.History(ctxFor(t, 10*time.Second), 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, h := range hist {
		if h.Token == token {
			return h
		}
	}
	t.Fatalf("term %d not in the history %+v", token, hist)
	return election.TermRecord{}
}

// A leader whose keepalive is stuck inside a query (blocked on a row lock)
// loses its lease; a contender sees the stale record, cross-checks the lock
// owner and kills the session. The next term starts only after the stuck
// term ended, with a higher token.
func TestHangDetectionKillsStuckLeader(t *testing.T) {
	t.Parallel()
	db, _ := newDB(t)
	ctx := ctxFor(t, time.Minute)
	a := newElector(t, election.GetLock, db, "hang", "a")
	b := newElector(t, election.GetLock, server.Open(t, dbNameOf(t, db)), "hang", "b")
	ta := await(t, campaign(ctx, a), 10*time.Second).term
	rb := campaign(ctx, b)
	release := holdRecordRow(t, db)
	<-ta.Done()
	if !errors.Is(ta.Err(), election.ErrLeaseExpired) {
		t.Fatalf("stuck leader's term ended with %v, want ErrLeaseExpired", ta.Err())
	}
	waitFor(t, "the contender to kill the stuck session", 20*time.Second, func() bool { return b.Stats().Kills > 0 })
	release()
	r := await(t, rb, 20*time.Second)
	if r.term.Token() <= ta.Token() {
		t.Fatalf("token %d after %d", r.term.Token(), ta.Token())
	}
	if got := lastTerm(t, newOperator(t, db, "hang"), ta.Token()).Reason; got != "hang-killed" {
		t.Fatalf("stuck term's history reason %q, want hang-killed", got)
	}
}

// Without the privilege to kill the stuck leader's session, a contender
// reports it and never takes over while that session holds the lock.
func TestHangWithoutKillPrivilege(t *testing.T) {
	t.Parallel()
	db, _ := newDB(t)
	ctx := ctxFor(t, time.Minute)
	dbName := dbNameOf(t, db)
	a := newElector(t, election.GetLock, db, "hang-nopriv", "a")
	ta := await(t, campaign(ctx, a), 10*time.Second).term
	lowly := openAsUser(t, dbName, "nokill_"+dbName, "GRANT SELECT, INSERT, UPDATE, DELETE ON `"+dbName+"`.* TO %s")
	b := newElector(t, election.GetLock, lowly, "hang-nopriv", "b")
	rb := campaign(ctx, b)
	release := holdRecordRow(t, db)
	<-ta.Done()
	waitFor(t, "the refused kill to be reported", 20*time.Second, func() bool { return b.Stats().KillsDenied > 0 })
	select {
	case r := <-rb:
		t.Fatalf("took over without killing the stuck leader: %+v", r)
	case <-time.After(500 * time.Millisecond):
	}
	released := time.Now()
	release() // the stuck query finishes; its session, whose client left, ends
	r := await(t, rb, 20*time.Second)
	if r.at.Before(released) || b.Stats().Kills != 0 {
		t.Fatalf("takeover at %v, before the stuck session ended at %v (kills %d)", r.at, released, b.Stats().Kills)
	}
}

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
		var wg sync.WaitGroup
		for _, id := range []string{"a", "b"} {
			e := newElector(t, s, db, "demote", id)
			wg.Add(1)
			go func() {
				defer wg.Done()
				e.Run(ctx, func(ctx context.Context, term *election.Term) error {
					s := span{id: id, token: term.Token(), start: time.Now()}
					<-ctx.Done()
					time.Sleep(100 * time.Millisecond) // clean-up the next leader must wait for
					s.end = time.Now()
					spans <- s
					return nil
				})
			}()
		}
		t.Cleanup(func() { cancel(); wg.Wait() })
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
		if got := lastTerm(t, ops, old.token).Reason; got != "demoted" {
			t.Fatalf("history reason %q, want demoted", got)
		}
	})
}

// A leader that keeps renewing but ignores the demotion (an old or broken
// client, played here by raw SQL) is killed after its lease plus margin, and
// the next term does not start before that leader's lease has certainly
// expired, on the database clock.
func TestDemoteIgnoredLeaderIsKilled(t *testing.T) {
	t.Parallel()
	db, _ := newDB(t)
	ctx := ctxFor(t, time.Minute)
	b := newElector(t, election.GetLock, db, "rogue", "b")
	resignAll(t, await(t, campaign(ctx, b), 10*time.Second).term) // creates tables and the record
	var lock string
	if err := db.QueryRow("SELECT lock_name FROM election_record").Scan(&lock); err != nil {
		t.Fatal(err)
	}
	rogue := startRogueLeader(t, db, lock)
	rb := campaign(ctx, b)
	ops := newOperator(t, db, "rogue")
	killed, err := ops.Demote(ctxFor(t, 20*time.Second))
	if err != nil || !killed {
		t.Fatalf("demote of a leader that ignores it: killed %v, err %v", killed, err)
	}
	r := await(t, rb, 20*time.Second)
	var now string
	if err := db.QueryRow("SELECT UTC_TIMESTAMP(6)").Scan(&now); err != nil {
		t.Fatal(err)
	}
	leaseEnd := rogue.lastRenewal().Add(2 * time.Second)
	if started := parseDBTime(t, now); started.Before(leaseEnd) {
		t.Fatalf("new term (token %d) acted at %v, before the killed leader's lease ended at %v", r.term.Token(), started, leaseEnd)
	}
}

type rogueLeader struct {
	mu   sync.Mutex
	last time.Time
}

func (r *rogueLeader) lastRenewal() time.Time {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.last
}

// startRogueLeader takes the election's lock on a session of its own and
// renews the record every 100ms, ignoring demotion requests, until killed.
func startRogueLeader(t *testing.T, db *sql.DB, lock string) *rogueLeader {
	t.Helper()
	ctx := context.Background()
	conn, err := db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Raw(func(any) error { return errors.New("drop") }); conn.Close() })
	var got int
	var id uint64
	if err := conn.QueryRowContext(ctx, "SELECT GET_LOCK(?, 5), CONNECTION_ID()", lock).Scan(&got, &id); err != nil || got != 1 {
		t.Fatalf("rogue GET_LOCK: %v %d", err, got)
	}
	if _, err := conn.ExecContext(ctx, "UPDATE election_epoch SET epoch = epoch + 1 WHERE lock_name = ?", lock); err != nil {
		t.Fatal(err)
	}
	r := &rogueLeader{}
	renew := func() error {
		var now string
		if err := conn.QueryRowContext(ctx, "SELECT UTC_TIMESTAMP(6)").Scan(&now); err != nil {
			return err
		}
		_, err := conn.ExecContext(ctx, "UPDATE election_record SET state = 'leading', epoch = (SELECT epoch FROM election_epoch WHERE lock_name = ?), "+
			"holder = 'rogue', conn_id = ?, lease_us = 2000000, ended_at = NULL, renewed_at = ? WHERE lock_name = ?", lock, id, now, lock)
		if err == nil {
			r.mu.Lock()
			r.last = parseDBTime(t, now)
			r.mu.Unlock()
		}
		return err
	}
	if err := renew(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for renew() == nil {
			time.Sleep(100 * time.Millisecond)
		}
	}()
	t.Cleanup(func() { <-done })
	return r
}

func parseDBTime(t *testing.T, s string) time.Time {
	t.Helper()
	v, err := time.Parse("2006-01-02 15:04:05.999999", s)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// Hand-over goes to the named candidate even when another candidate is
// ahead of it in the lock's queue; naming an unknown or dead candidate is
// refused and changes nothing.
func TestHandover(t *testing.T) {
	forEachStrategy(t, func(t *testing.T, s election.Strategy) {
		db, _ := newDB(t)
		ctx, cancel := context.WithCancel(context.Background())
		starts := make(chan string, 10)
		var wg sync.WaitGroup
		run := func(id string) {
			e := newElector(t, s, db, "handover", id)
			wg.Add(1)
			go func() {
				defer wg.Done()
				e.Run(ctx, func(ctx context.Context, term *election.Term) error {
					starts <- id
					<-ctx.Done()
					return nil
				})
			}()
		}
		t.Cleanup(func() { cancel(); wg.Wait() })
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
		for _, target := range []string{"nobody", "ghost"} {
			if _, err := ops.Handover(ctx, target); !errors.Is(err, election.ErrNotCandidate) {
				t.Fatalf("hand-over to %s: %v, want ErrNotCandidate", target, err)
			}
		}
		if after, err := ops.Leader(ctx); err != nil || after.Token != before.Token {
			t.Fatalf("a refused hand-over changed the leader: %+v %v", after, err)
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
		if got := lastTerm(t, ops, before.Token).Reason; got != "handed-over" {
			t.Fatalf("history reason %q, want handed-over", got)
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
		observer, err := election.NewOperator(db, "watch", slow)
		if err != nil {
			t.Fatal(err)
		}
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
			{Token: 1, Identity: "a", Leading: true}, {Token: 1, Identity: "a", Reason: "resigned"},
			{Token: 2, Identity: "b", Leading: true}, {Token: 2, Identity: "b", Reason: "demoted"},
			{Token: 3, Identity: "c", Leading: true}, {Token: 3, Identity: "c", Reason: "resigned"},
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

func TestCandidatesAndElections(t *testing.T) {
	forEachStrategy(t, func(t *testing.T, s election.Strategy) {
		db, _ := newDB(t)
		ctx, cancel := context.WithCancel(context.Background())
		var wg sync.WaitGroup
		stops := map[string]context.CancelFunc{}
		for _, id := range []string{"a", "b", "c"} {
			e := newElector(t, s, db, "cands", id)
			cctx, stop := context.WithCancel(ctx)
			stops[id] = stop
			wg.Add(1)
			go func() {
				defer wg.Done()
				e.Run(cctx, func(ctx context.Context, _ *election.Term) error { <-ctx.Done(); return nil })
			}()
		}
		t.Cleanup(func() { cancel(); wg.Wait() })
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
		e, err := election.New(db, "bounded", cfg)
		if err != nil {
			t.Fatal(err)
		}
		ctx := ctxFor(t, time.Minute)
		for range 40 {
			resignAll(t, await(t, campaign(ctx, e), 10*time.Second).term)
		}
		var rows int
		db.QueryRow("SELECT COUNT(*) FROM election_term").Scan(&rows)
		if rows > 5+16 {
			t.Fatalf("%d history rows kept with HistoryLimit 5", rows)
		}
		ops, err := election.NewOperator(db, "bounded", cfg)
		if err != nil {
			t.Fatal(err)
		}
		hist, err := ops.History(ctx, 0)
		if err != nil || len(hist) != 5 || hist[0].Token != 40 || hist[0].Reason != "resigned" || hist[4].Token != 36 {
			t.Fatalf("history: %+v, %v", hist, err)
		}
	})
}

func TestLeaderHandler(t *testing.T) {
	forEachStrategy(t, func(t *testing.T, s election.Strategy) {
		db, _ := newDB(t)
		ctx := ctxFor(t, time.Minute)
		a, b := newElector(t, s, db, "http", "a"), newElector(t, s, db, "http", "b")
		term := await(t, campaign(ctx, a), 10*time.Second).term
		for _, tc := range []struct {
			e    *election.Elector
			code int
		}{{a, http.StatusOK}, {b, http.StatusServiceUnavailable}} {
			rr := httptest.NewRecorder()
			tc.e.LeaderHandler().ServeHTTP(rr, httptest.NewRequest("GET", "/leader", nil))
			if rr.Code != tc.code {
				t.Fatalf("%s: %d, want %d", tc.e.Identity(), rr.Code, tc.code)
			}
		}
		resignAll(t, term)
		rr := httptest.NewRecorder()
		a.LeaderHandler().ServeHTTP(rr, httptest.NewRequest("GET", "/leader", nil))
		if rr.Code != http.StatusServiceUnavailable {
			t.Fatalf("after resign: %d", rr.Code)
		}
	})
}

func dbNameOf(t *testing.T, db *sql.DB) string {
	t.Helper()
	var name string
	if err := db.QueryRow("SELECT DATABASE()").Scan(&name); err != nil {
		t.Fatal(err)
	}
	return name
}

// openAsUser creates a user with the given GRANT (%s stands for the user)
// and returns a pool on dbName as that user.
func openAsUser(t *testing.T, dbName, user, grant string) *sql.DB {
	t.Helper()
	admin := server.Open(t, "")
	account := "'" + user + "'@'%'"
	for _, stmt := range []string{"CREATE USER " + account + " IDENTIFIED BY 'pw'", strings.ReplaceAll(grant, "%s", account)} {
		if _, err := admin.Exec(stmt); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() { admin.Exec("DROP USER " + account) })
	cfg := server.Config(dbName)
	cfg.User, cfg.Passwd = user, "pw"
	return openDSN(t, cfg.FormatDSN())
}

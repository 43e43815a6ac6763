package election_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/sqlelect/election"
	"github.com/sqlelect/election/internal/mysqltest"
)

// After a term ends, however it ends, no session in the pool owns the lock:
// the pinned session was dropped, never returned.
func TestPoolHoldsNoLockAfterTerms(t *testing.T) {
	needGetLock(t)
	t.Parallel()
	db, _ := newDB(t)
	admin := server.Open(t, "")
	ctx := ctxFor(t, time.Minute)
	e := newElector(t, election.GetLock, db, "pool", "a")
	var lock string
	for i := range 6 {
		term := await(t, campaign(ctx, e), 10*time.Second).term
		if i%2 == 0 {
			resignAll(t, term)
		} else {
			rec, err := newOperator(t, db, "pool").Leader(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := admin.Exec(fmt.Sprint("KILL CONNECTION ", rec.ConnID)); err != nil {
				t.Fatal(err)
			}
			<-term.Done()
			resignAll(t, term)
		}
		if err := db.QueryRowContext(ctx, "SELECT lock_name FROM election_record").Scan(&lock); err != nil {
			t.Fatal(err)
		}
		assertPoolHoldsNoLock(t, db, lock)
	}
}

func assertPoolHoldsNoLock(t *testing.T, db *sql.DB, lock string) {
	t.Helper()
	ctx := ctxFor(t, 10*time.Second)
	var conns []*sql.Conn
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	for range db.Stats().Idle {
		c, err := db.Conn(ctx)
		if err != nil {
			t.Fatal(err)
		}
		conns = append(conns, c)
		var owns, timeout int
		if err := c.QueryRowContext(ctx, "SELECT IS_USED_LOCK(?) <=> CONNECTION_ID(), @@session.wait_timeout", lock).Scan(&owns, &timeout); err != nil {
			t.Fatal(err)
		}
		if owns == 1 {
			t.Fatal("a pooled session still owns the election's lock")
		}
		if timeout < 60 {
			t.Fatalf("a pooled session kept the candidate's wait_timeout %d", timeout)
		}
	}
}

// A connection reset between leader and server: under GetLock the pinned
// session is gone, so the term ends at the next keepalive and the other
// candidate leads. (Under LeaseRow the term goes on:
// TestLeaseTermSurvivesConnectionReset.)
func TestConnectionResetEndsGetLockTerm(t *testing.T) {
	needGetLock(t)
	t.Parallel()
	ta, rb, proxy := proxiedLeader(t, election.GetLock, "reset")
	proxy.Reset()
	r := await(t, rb, 30*time.Second)
	<-ta.Done()
	if !isOneOf(ta.Err(), election.ErrSessionLost, election.ErrLeaseExpired) {
		t.Fatalf("term ended with %v", ta.Err())
	}
	assertTokenAfter(t, r.term.Token(), ta.Token())
}

// KILL CONNECTION of the leader's session: the next candidate leads at once,
// while the old leader still believes it leads until its next keepalive. In
// that window its fenced writes are refused by the database, and the old
// term ends at the keepalive.
func TestKilledSessionIsFenced(t *testing.T) {
	needGetLock(t)
	t.Parallel()
	db, _ := newDB(t)
	createWrites(t, db)
	admin := server.Open(t, "")
	ctx := ctxFor(t, time.Minute)
	slow := election.Config{Identity: "a", Interval: 3 * time.Second, Lease: 8 * time.Second, Margin: time.Second}
	a := newElectorWith(t, db, "kill", slow)
	b := newElector(t, election.GetLock, db, "kill", "b")
	ta := await(t, campaign(ctx, a), 10*time.Second).term
	rec, err := newOperator(t, db, "kill").Leader(ctx)
	if err != nil {
		t.Fatal(err)
	}
	rb := campaign(ctx, b)
	time.Sleep(200 * time.Millisecond)
	killed := time.Now()
	if _, err := admin.Exec(fmt.Sprint("KILL CONNECTION ", rec.ConnID)); err != nil {
		t.Fatal(err)
	}
	tb := await(t, rb, 10*time.Second).term
	if !ta.IsLeader() || time.Since(killed) > 2*time.Second {
		t.Fatal("setup: the killed leader's next keepalive came too soon to test the window")
	}
	err = fencedWrite(ctx, ta, "a")
	var stale *election.StaleTokenError
	if !errors.As(err, &stale) {
		t.Fatalf("fenced write of the killed term: %v, want a StaleTokenError", err)
	}
	if stale.Current != tb.Token() || stale.Cause != nil {
		t.Fatalf("write in the window was not refused by the database: %+v", stale)
	}
	<-ta.Done()
	if !isOneOf(ta.Err(), election.ErrSessionLost, election.ErrLockLost) {
		t.Fatalf("killed term ended with %v", ta.Err())
	}
	if err := fencedWrite(ctx, tb, "b"); err != nil {
		t.Fatal(err)
	}
	if n := checkWrites(t, db); n != 1 {
		t.Fatalf("%d writes, want only the new leader's", n)
	}
}

func isOneOf(err error, targets ...error) bool {
	for _, target := range targets {
		if errors.Is(err, target) {
			return true
		}
	}
	return false
}

// A leader whose keepalive is stuck inside a query (blocked on a row lock)
// loses its lease; a contender sees the stale record, cross-checks the lock
// owner and kills the session. The next term starts only after the stuck
// term ended, with a higher token.
func TestHangDetectionKillsStuckLeader(t *testing.T) {
	needGetLock(t)
	t.Parallel()
	db, _ := newDB(t)
	ctx := ctxFor(t, time.Minute)
	a := newElector(t, election.GetLock, db, "hang", "a")
	b := newElector(t, election.GetLock, server.Open(t, dbNameOf(t, db)), "hang", "b")
	ta := await(t, campaign(ctx, a), 10*time.Second).term
	rb := campaign(ctx, b)
	release := mysqltest.HoldRows(t, db, "election_record")
	<-ta.Done()
	if !errors.Is(ta.Err(), election.ErrLeaseExpired) {
		t.Fatalf("stuck leader's term ended with %v, want ErrLeaseExpired", ta.Err())
	}
	waitFor(t, "the contender to kill the stuck session", 20*time.Second, func() bool { return b.Stats().Kills > 0 })
	release()
	r := await(t, rb, 20*time.Second)
	assertTokenAfter(t, r.term.Token(), ta.Token())
	assertHistoryReason(t, newOperator(t, db, "hang"), ta.Token(), "hang-killed")
}

// Without the privilege to kill the stuck leader's session, a contender
// reports it and never takes over while that session holds the lock.
func TestHangWithoutKillPrivilege(t *testing.T) {
	needGetLock(t)
	t.Parallel()
	db, _ := newDB(t)
	ctx := ctxFor(t, time.Minute)
	dbName := dbNameOf(t, db)
	a := newElector(t, election.GetLock, db, "hang-nopriv", "a")
	ta := await(t, campaign(ctx, a), 10*time.Second).term
	lowly := openAsUser(t, dbName, "nokill_"+dbName, "GRANT SELECT, INSERT, UPDATE, DELETE ON `"+dbName+"`.* TO %s")
	b := newElector(t, election.GetLock, lowly, "hang-nopriv", "b")
	rb := campaign(ctx, b)
	release := mysqltest.HoldRows(t, db, "election_record")
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

// A leader that keeps renewing but ignores the demotion (an old or broken
// client, played here by raw SQL) is killed after its lease plus margin, and
// the next term does not start before that leader's lease has certainly
// expired, on the database clock.
func TestDemoteIgnoredLeaderIsKilled(t *testing.T) {
	needGetLock(t)
	t.Parallel()
	db, _ := newDB(t)
	ctx := ctxFor(t, time.Minute)
	b := newElector(t, election.GetLock, db, "rogue", "b")
	resignAll(t, await(t, campaign(ctx, b), 10*time.Second).term) // creates tables and the record
	var lock string
	if err := db.QueryRow("SELECT lock_name FROM election_record").Scan(&lock); err != nil {
		t.Fatal(err)
	}
	rogue := startRogueLeader(t, db, lock, 2*time.Second)
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

// The lock-delay owed after a forced end outlives the term that owed it: a
// demoted leader that ignored the demotion is killed; the next term (b's)
// owes its lease, and ends before that is over, gracefully (b's Campaign's
// context ends); the term after it (c's), whose predecessor owes nothing,
// still does not act before the killed leader's lease has ended (the
// model's first finding, docs/verification.md, "What the model found").
func TestLockDelayOutlivesTheTermThatOwedIt(t *testing.T) {
	needGetLock(t)
	t.Parallel()
	db, _ := newDB(t)
	ctx := ctxFor(t, time.Minute)
	cfg := fast
	cfg.Identity = "b"
	var logs *logBuffer
	cfg.Logger, logs = newLogged()
	b := newElectorWith(t, db, "carry", cfg)
	resignAll(t, await(t, campaign(ctx, b), 10*time.Second).term)
	var lock string
	if err := db.QueryRow("SELECT lock_name FROM election_record").Scan(&lock); err != nil {
		t.Fatal(err)
	}
	// A long lease, so that b certainly claims while it still runs.
	const lease = 4 * time.Second
	rogue := startRogueLeader(t, db, lock, lease)
	ctxB, cancelB := context.WithCancel(ctx)
	defer cancelB()
	rb := campaign(ctxB, b)
	if killed, err := newOperator(t, db, "carry").Demote(ctxFor(t, 20*time.Second)); err != nil || !killed {
		t.Fatalf("demote of a leader that ignores it: killed %v, err %v", killed, err)
	}
	leaseEnd := rogue.lastRenewal().Add(lease)
	// b claims, and waits out the lock-delay; its Campaign ends meanwhile.
	waitFor(t, "b to wait out the lock-delay", 20*time.Second, func() bool { return len(logs.lines("waiting out the lock-delay")) > 0 })
	select {
	case r := <-rb:
		t.Fatalf("b's campaign returned (%v) before its lock-delay could have ended", r.err)
	default:
	}
	cancelB()
	if r := <-rb; !errors.Is(r.err, context.Canceled) {
		t.Fatalf("b's campaign, ended during its lock-delay: %v, want context.Canceled", r.err)
	}
	var state string
	if err := db.QueryRowContext(ctx, "SELECT state FROM election_record").Scan(&state); err != nil || state != "resigned" {
		t.Fatalf("b's term, ended during its lock-delay, is recorded %q (%v), want resigned: a predecessor that owes nothing itself", state, err)
	}
	r := await(t, campaign(ctx, newElector(t, election.GetLock, db, "carry", "c")), 20*time.Second)
	var now string
	if err := db.QueryRow("SELECT UTC_TIMESTAMP(6)").Scan(&now); err != nil {
		t.Fatal(err)
	}
	if started := parseDBTime(t, now); started.Before(leaseEnd) {
		t.Fatalf("c's term (token %d) acted at %v, before the killed leader's lease ended at %v", r.term.Token(), started, leaseEnd)
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
// renews the record every 100ms with the given lease, ignoring demotion
// requests, until killed.
func startRogueLeader(t *testing.T, db *sql.DB, lock string, lease time.Duration) *rogueLeader {
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
			"holder = 'rogue', conn_id = ?, lease_us = ?, ended_at = NULL, renewed_at = ? WHERE lock_name = ?", lock, id, lease.Microseconds(), now, lock)
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

// Waiting candidates send the server nothing, except the deputy, which
// watches the leader for them; when the deputy's session dies, the next
// waiter takes its place at once and still kills a leader that hangs, and
// the dead one is listed as dead at once.
func TestSilentWaitersAndTheDeputy(t *testing.T) {
	needGetLock(t)
	t.Parallel()
	db, _ := newDB(t)
	ctx := ctxFor(t, 2*time.Minute)
	dbName := dbNameOf(t, db)
	admin := server.Open(t, "")
	ops := newOperator(t, db, "silent")
	tl := await(t, campaign(ctx, newElector(t, election.GetLock, db, "silent", "leader")), 10*time.Second).term
	waiters := map[string]*election.Elector{}
	results := map[string]<-chan result{}
	for _, id := range []string{"w1", "w2", "w3", "w4"} {
		waiters[id] = newElector(t, election.GetLock, server.Open(t, dbName), "silent", id)
		results[id] = campaign(ctx, waiters[id])
	}
	waitFor(t, "every waiter to join", 20*time.Second, func() bool { return len(liveCandidates(t, ops)) == 5 })

	// Three waiters queue behind the deputy; over 20 check intervals
	// (CheckInterval is Interval) none of them sends a statement (the
	// server's query id of each stays).
	queued := func() map[int64]int64 {
		rows, err := admin.QueryContext(ctx, "SELECT ID, QUERY_ID FROM information_schema.PROCESSLIST WHERE DB = ? AND INFO LIKE 'SELECT GET_LOCK(%/deputy%'", dbName)
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		m := map[int64]int64{}
		for rows.Next() {
			var id, q int64
			if err := rows.Scan(&id, &q); err != nil {
				t.Fatal(err)
			}
			m[id] = q
		}
		return m
	}
	var before map[int64]int64
	waitFor(t, "three waiters to queue behind the deputy", 20*time.Second, func() bool { before = queued(); return len(before) == 3 })
	time.Sleep(20 * fast.Interval)
	if after := queued(); !maps.Equal(before, after) {
		t.Fatalf("queued waiters sent statements: sessions and query ids %v, then %v", before, after)
	}

	// The deputy is the one waiter not queued. It reads the record when the
	// leader could first be overdue, not every check interval: over 40 of
	// them (4 s, the lease plus margin twice) it starts a few waits (the
	// server's query id of its session changes with each), not 40.
	var deputy int64
	waitFor(t, "the deputy to wait for the election's lock", 20*time.Second, func() bool {
		err := admin.QueryRowContext(ctx, "SELECT ID FROM information_schema.PROCESSLIST WHERE DB = ? AND INFO LIKE 'SELECT GET_LOCK(%' "+
			"AND INFO NOT LIKE '%/deputy%' AND INFO NOT LIKE '%election-candidate/%'", dbName).Scan(&deputy)
		return err == nil
	})
	waits := map[int64]bool{}
	for end := time.Now().Add(40 * fast.Interval); time.Now().Before(end); time.Sleep(fast.Interval / 4) {
		var q int64
		if err := admin.QueryRowContext(ctx, "SELECT QUERY_ID FROM information_schema.PROCESSLIST WHERE ID = ?", deputy).Scan(&q); err != nil {
			t.Fatal(err)
		}
		waits[q] = true
	}
	if len(waits) > 6 {
		t.Fatalf("the deputy started %d waits in 40 check intervals, want a few (one per lease plus margin)", len(waits))
	}

	// Kill the deputy's session.
	if _, err := admin.ExecContext(ctx, fmt.Sprint("KILL CONNECTION ", deputy)); err != nil {
		t.Fatal(err)
	}
	var gone string
	for id, ch := range results {
		select {
		case r := <-ch:
			if !errors.Is(r.err, election.ErrSessionLost) {
				t.Fatalf("the deputy's campaign ended with %v, want ErrSessionLost", r.err)
			}
			gone = id
		case <-time.After(100 * time.Millisecond):
		}
		if gone != "" {
			delete(results, gone)
			break
		}
	}
	if gone == "" {
		t.Fatal("no waiter's campaign ended when the deputy's session was killed")
	}
	if live := liveCandidates(t, ops); live[gone] || len(live) != 4 {
		t.Fatalf("after its session was killed, %s is listed alive (live: %v)", gone, live)
	}
	// A queued waiter that stops campaigning is dead at once, although its
	// wait would have lasted minutes: the server ends a GET_LOCK wait whose
	// client has gone.
	quitter := newElector(t, election.GetLock, server.Open(t, dbName), "silent", "quitter")
	qctx, quit := context.WithCancel(ctx)
	quitting := campaign(qctx, quitter)
	waitFor(t, "the quitter to join", 20*time.Second, func() bool { return liveCandidates(t, ops)["quitter"] })
	quit()
	<-quitting
	waitFor(t, "the quitter to be listed dead", 20*time.Second, func() bool { return !liveCandidates(t, ops)["quitter"] })

	// The leader hangs: the new deputy kills it and a waiter leads.
	release := mysqltest.HoldRows(t, db, "election_record")
	<-tl.Done()
	waitFor(t, "a waiter to kill the stuck leader", 20*time.Second, func() bool {
		var kills uint64
		for _, e := range waiters {
			kills += e.Stats().Kills
		}
		return kills > 0
	})
	if waiters[gone].Stats().Kills != 0 {
		t.Fatalf("the killed deputy %s killed the leader", gone)
	}
	release()
	got := make(chan result, len(results))
	for _, ch := range results {
		go func() { got <- <-ch }()
	}
	r := await(t, got, 20*time.Second)
	assertTokenAfter(t, r.term.Token(), tl.Token())
	assertHistoryReason(t, ops, tl.Token(), "hang-killed")
}

// A deputy that has looked at the leader starts its term in one statement
// once the lock is its own: the claim, with no read between the GET_LOCK
// that won and it, after the leader's session was killed (the leader's
// term still leading in the record) and after a resignation (ended
// gracefully); the tokens grow, the history tells both ends, and the
// Observer's failover is the claim's round trip, not nothing.
func TestTermStartsInOneStatementAfterTheWake(t *testing.T) {
	needGetLock(t)
	t.Parallel()
	db, _ := newDB(t)
	dbName := dbNameOf(t, db)
	ctx := ctxFor(t, time.Minute)
	admin := server.Open(t, "")
	ops := newOperator(t, db, "onestatement")
	// Each candidate's statements, as its fault proxy passes them on.
	sent := func() (*sql.DB, func() []string) {
		pool, proxy := viaProxy(t, dbName)
		var mu sync.Mutex
		var stmts []string
		proxy.BlackholeAt(func(chunk []byte) bool { // a trigger that never fires
			if len(chunk) > 5 && chunk[4] == 0x03 { // COM_QUERY
				mu.Lock()
				stmts = append(stmts, string(chunk[5:]))
				mu.Unlock()
			}
			return false
		})
		return pool, func() []string { mu.Lock(); defer mu.Unlock(); return slices.Clone(stmts) }
	}
	looks := func(stmts []string) int { // reads of the record as a term start or the deputy makes them
		n := 0
		for _, q := range stmts {
			if strings.Contains(q, "FROM (SELECT 1) d LEFT JOIN (`election_record` r") {
				n++
			}
		}
		return n
	}
	startedAlone := func(who string, stmts []string) {
		t.Helper()
		claim := -1
		for i, q := range stmts {
			if strings.HasPrefix(q, "UPDATE `election_record` r JOIN `election_epoch` e") {
				claim = i
			}
		}
		if claim < 1 || !strings.HasPrefix(stmts[claim-1], "SELECT GET_LOCK(") || strings.Contains(stmts[claim-1], "/deputy") {
			t.Fatalf("%s's term did not start with the claim right after the GET_LOCK that won; its last statements:\n%s",
				who, strings.Join(stmts[max(0, claim-3):claim+1], "\n"))
		}
	}
	dbA, sentA := sent()
	dbB, sentB := sent()
	a := newElector(t, election.GetLock, dbA, "onestatement", "a")
	cfg := fast
	cfg.Strategy, cfg.Identity = election.GetLock, "b"
	failovers := make(chan time.Duration, 1)
	cfg.Observer = &election.Observer{Failover: func(_ string, d time.Duration) { failovers <- d }}
	b := newElectorWith(t, dbB, "onestatement", cfg)
	ta := await(t, campaign(ctx, a), 10*time.Second).term
	rb := campaign(ctx, b)
	waitFor(t, "b to look at the leader as the deputy", 20*time.Second, func() bool { return looks(sentB()) > 0 })
	rec, err := ops.Leader(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := admin.ExecContext(ctx, fmt.Sprint("KILL CONNECTION ", rec.ConnID)); err != nil {
		t.Fatal(err)
	}
	tb := await(t, rb, 20*time.Second).term
	startedAlone("b", sentB())
	assertTokenAfter(t, tb.Token(), ta.Token())
	if d := <-failovers; d <= 0 || d > 20*time.Second {
		t.Fatalf("b's failover: %v, want the claim's round trip", d)
	}

	resignAll(t, ta) // returns once its end is written and a is free
	before := looks(sentA())
	ra := campaign(ctx, a)
	waitFor(t, "a to look at the leader as the deputy", 20*time.Second, func() bool { return looks(sentA()) > before })
	resignAll(t, tb)
	ta2 := await(t, ra, 20*time.Second).term
	defer resignAll(t, ta2)
	startedAlone("a", sentA())
	assertTokenAfter(t, ta2.Token(), tb.Token())
	assertHistoryReason(t, ops, tb.Token(), "resigned")
}

// liveCandidates returns the identities the election lists as alive.
func liveCandidates(t *testing.T, ops *election.Operator) map[string]bool {
	t.Helper()
	cs, err := ops.Candidates(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	live := map[string]bool{}
	for _, c := range cs {
		if c.Alive {
			live[c.Identity] = true
		}
	}
	return live
}

// Two candidates with one identity: the second is refused, naming the fix,
// while the first campaigns.
func TestIdentityInUse(t *testing.T) {
	needGetLock(t)
	t.Parallel()
	db, _ := newDB(t)
	ctx := ctxFor(t, time.Minute)
	await(t, campaign(ctx, newElector(t, election.GetLock, db, "twins", "twin")), 10*time.Second)
	before := contentsOnceLed(t, db)
	_, err := newElector(t, election.GetLock, server.Open(t, dbNameOf(t, db)), "twins", "twin").Campaign(ctx)
	if !errors.Is(err, election.ErrIdentityInUse) || !strings.Contains(err.Error(), "Config.Identity") {
		t.Fatalf("second candidate with the same identity: %v, want ErrIdentityInUse naming Config.Identity", err)
	}
	assertWroteNothing(t, db, before, "the second candidate with the same identity")
}

// A DSN readTimeout (500ms) shorter than the waits (CheckInterval 1s and
// then up to lease plus margin and 1s for the deputy, an hour for a queued
// candidate) cuts them, as the driver cuts
// any statement that runs longer. A candidate that wins at once never waits
// and leads; a waiting one, deputy or queued, learns the limit from the
// first cuts, says so in one WARN, waits in steps that fit under it, fails
// no more campaigns, and leads when its turn comes. The driver's own lines
// go to slog through its connector's Logger (docs/operations.md, "Logs").
func TestReadTimeoutBelowTheWaits(t *testing.T) {
	needGetLock(t)
	const readTimeout = 500 * time.Millisecond
	timing := election.Config{Interval: 100 * time.Millisecond, Lease: time.Second, Margin: time.Second, CheckInterval: time.Second}
	// candidate returns an Elector on a pool whose DSN sets readTimeout,
	// with its log and the driver's in one buffer.
	candidate := func(t *testing.T, dbName, id string) (*election.Elector, *logBuffer) {
		logger, logs := newLogged()
		cfg := server.Config(dbName)
		cfg.ReadTimeout = readTimeout
		cfg.Logger = slog.NewLogLogger(logger.With("source", "mysql").Handler(), slog.LevelWarn)
		connector, err := mysql.NewConnector(cfg)
		if err != nil {
			t.Fatal(err)
		}
		db := sql.OpenDB(connector)
		t.Cleanup(func() { db.Close() })
		c := timing
		c.Identity, c.Logger = id, logger
		return newElectorWith(t, db, "read-timeout", c), logs
	}
	// leads runs e under Run and returns the tokens of its terms.
	leads := func(t *testing.T, e *election.Elector) <-chan uint64 {
		tokens := make(chan uint64, 1)
		runInBackground(t, context.Background(), e, func(ctx context.Context, term *election.Term) error {
			tokens <- term.Token()
			<-ctx.Done()
			return nil
		})
		return tokens
	}
	// fits waits until e has learnt the limit, then checks that it fails
	// no campaign over many steps.
	fits := func(t *testing.T, logs *logBuffer) {
		t.Helper()
		waitFor(t, "the WARN that waits fit under readTimeout", 30*time.Second, func() bool {
			return len(logs.lines("level=WARN", "readTimeout", "step=")) == 1
		})
		time.Sleep(readTimeout) // the campaign the second cut failed logs that after the WARN
		if len(logs.lines("source=mysql", "i/o timeout")) == 0 {
			t.Errorf("the driver's lines did not reach slog:\n%s", strings.Join(logs.lines(), "\n"))
		}
		failed := len(logs.lines("campaign failed"))
		time.Sleep(8 * readTimeout)
		if n := len(logs.lines("campaign failed")); n != failed || len(logs.lines("readTimeout", "level=WARN", "step=")) != 1 {
			t.Fatalf("campaigns still fail once the waits fit:\n%s", strings.Join(logs.lines(), "\n"))
		}
	}

	t.Run("leader-elect", func(t *testing.T) {
		t.Parallel()
		e, logs := candidate(t, server.NewDatabase(t), "a")
		token := <-leads(t, e)
		time.Sleep(8 * readTimeout)
		if !e.IsLeader() || len(logs.lines("level=WARN")) != 0 {
			t.Fatalf("leader %d with readTimeout=500ms: leads %v, log:\n%s", token, e.IsLeader(), strings.Join(logs.lines(), "\n"))
		}
	})
	t.Run("deputy", func(t *testing.T) {
		t.Parallel()
		db, _ := newDB(t)
		ctx := ctxFor(t, time.Minute)
		first := await(t, campaign(ctx, newElector(t, election.GetLock, db, "read-timeout", "leader")), 10*time.Second).term
		e, logs := candidate(t, dbNameOf(t, db), "deputy")
		tokens := leads(t, e)
		fits(t, logs)
		if len(logs.lines("became the deputy")) == 0 {
			t.Fatalf("not the deputy:\n%s", strings.Join(logs.lines(), "\n"))
		}
		resignAll(t, first)
		assertTokenAfter(t, <-tokens, first.Token())
	})
	t.Run("queued", func(t *testing.T) {
		t.Parallel()
		db, _ := newDB(t)
		dbName := dbNameOf(t, db)
		ctx := ctxFor(t, time.Minute)
		first := await(t, campaign(ctx, newElector(t, election.GetLock, db, "read-timeout", "leader")), 10*time.Second).term
		cfg := fast
		cfg.Identity = "deputy"
		var deputyLogs *logBuffer
		cfg.Logger, deputyLogs = newLogged()
		deputy := campaign(ctx, newElectorWith(t, server.Open(t, dbName), "read-timeout", cfg))
		waitFor(t, "the deputy", 20*time.Second, func() bool { return len(deputyLogs.lines("became the deputy")) == 1 })
		e, logs := candidate(t, dbName, "queued")
		tokens := leads(t, e)
		fits(t, logs)
		if len(logs.lines("queued for the deputy's place")) == 0 {
			t.Fatalf("not queued:\n%s", strings.Join(logs.lines(), "\n"))
		}
		resignAll(t, first)
		second := await(t, deputy, 20*time.Second).term
		resignAll(t, second)
		assertTokenAfter(t, <-tokens, second.Token())
	})
}

// A queued candidate waits in one long statement: a global
// max_statement_time (MariaDB), which a DBA may set, does not cut it off.
// Not parallel: it changes a global variable, and parallel tests start only
// once the sequential ones have finished.
func TestQueuedWaitOutlastsMaxStatementTime(t *testing.T) {
	needGetLock(t)
	db, _ := newDB(t)
	dbName := dbNameOf(t, db)
	admin := server.Open(t, "")
	ctx := ctxFor(t, time.Minute)
	if _, err := admin.Exec("SET GLOBAL max_statement_time = 1"); err != nil {
		t.Skipf("no max_statement_time on this server: %v", err)
	}
	defer admin.Exec("SET GLOBAL max_statement_time = 0")
	await(t, campaign(ctx, newElector(t, election.GetLock, db, "statement-time", "leader")), 10*time.Second)
	ops := newOperator(t, db, "statement-time")
	campaign(ctx, newElector(t, election.GetLock, server.Open(t, dbName), "statement-time", "deputy"))
	waitFor(t, "the deputy to join", 20*time.Second, func() bool { return liveCandidates(t, ops)["deputy"] })
	queued := campaign(ctx, newElector(t, election.GetLock, server.Open(t, dbName), "statement-time", "queued"))
	select {
	case r := <-queued:
		t.Fatalf("a queued candidate's campaign ended under max_statement_time = 1 s: %v", r.err)
	case <-time.After(3 * time.Second):
	}
}

// A DSN readTimeout shorter than the statements themselves (1ms) cuts
// them, which the driver reports as "invalid connection", as for a network
// fault: the campaign's error names readTimeout among the causes, under
// both strategies.
func TestReadTimeoutBelowTheStatementsIsNamed(t *testing.T) {
	forEachStrategy(t, func(t *testing.T, s election.Strategy) {
		cfg := server.Config(server.NewDatabase(t))
		cfg.ReadTimeout = time.Millisecond
		db := openDSN(t, cfg.FormatDSN())
		ctx := ctxFor(t, time.Minute)
		e := newElector(t, s, db, "read-timeout", "a")
		var err error
		for range 20 { // a statement that happened to take less than 1ms passes
			cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			var term *election.Term
			term, err = e.Campaign(cctx)
			cancel()
			if err != nil {
				break
			}
			resignAll(t, term)
		}
		if err == nil || !strings.Contains(err.Error(), "readTimeout") {
			t.Fatalf("a campaign with readTimeout=1ms: %v, want an error naming readTimeout", err)
		}
	})
}

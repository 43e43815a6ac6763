package election_test

import (
	"context"
	"database/sql"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/sqlelect/election"
)

// A process in many elections shares sessions: two pools (two processes)
// in the same 24 elections hold at most their own few sessions, one shared
// session and the pool's idle ones each. A demotion of one term on the
// shared session ends that term alone. When the shared session of the
// pool that leads is killed, every term on it ends and the other pool
// leads each of those elections; no election ever accepts a fenced write
// of a stale term.
func TestManyElectionsShareSessions(t *testing.T) {
	needGetLock(t)
	t.Parallel()
	const n = 24
	dbName := server.NewDatabase(t)
	admin := server.Open(t, dbName)
	ctx := ctxFor(t, 2*time.Minute)
	if _, err := admin.ExecContext(ctx, "CREATE TABLE writes (id BIGINT AUTO_INCREMENT PRIMARY KEY, election VARCHAR(64) NOT NULL, "+
		"token BIGINT UNSIGNED NOT NULL, holder VARCHAR(64) NOT NULL)"); err != nil {
		t.Fatal(err)
	}
	if err := election.CreateSchema(ctx, admin, ""); err != nil {
		t.Fatal(err)
	}
	runCtx, stop := context.WithCancel(ctx)
	var running sync.WaitGroup
	defer func() { stop(); running.Wait() }()
	quit := map[string]context.CancelFunc{} // by holder and election
	join := func(db *sql.DB, holder string) {
		for i := range n {
			cfg := fast
			cfg.Strategy, cfg.Identity = election.GetLock, holder
			name := fmt.Sprintf("e%02d", i)
			e := newElectorWith(t, db, name, cfg)
			ctx, cancel := context.WithCancel(runCtx)
			quit[holder+name] = cancel
			running.Add(1)
			go func() {
				defer running.Done()
				e.Run(ctx, func(ctx context.Context, term *election.Term) error {
					for w := 0; w < 5 && ctx.Err() == nil; w++ {
						term.Fenced(ctx, func(tx *sql.Tx) error {
							_, err := tx.ExecContext(ctx, "INSERT INTO writes (election, token, holder) VALUES (?, ?, ?)", name, term.Token(), holder)
							return err
						})
						time.Sleep(20 * time.Millisecond)
					}
					<-ctx.Done()
					return nil
				})
			}()
		}
	}
	ledBy := func(holder string) (elections int, bySession map[uint64]int) {
		rows, err := admin.QueryContext(ctx, "SELECT conn_id FROM election_record WHERE holder = ? AND state = 'leading' AND IS_USED_LOCK(lock_name) = conn_id", holder)
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		bySession = map[uint64]int{}
		for rows.Next() {
			var id uint64
			if err := rows.Scan(&id); err != nil {
				t.Fatal(err)
			}
			bySession[id]++
			elections++
		}
		return elections, bySession
	}
	a := server.Open(t, dbName)
	// b's own account, so that the server counts the rows b reads
	// (MariaDB's user statistics).
	b := openAsUser(t, dbName, "b_"+dbName, "GRANT ALL ON `"+dbName+"`.* TO %s")
	join(a, "a")
	waitFor(t, "a to lead every election", 30*time.Second, func() bool { led, _ := ledBy("a"); return led == n })
	join(b, "b")
	waitFor(t, "b's candidates to join", 30*time.Second, func() bool {
		var joined int
		admin.QueryRowContext(ctx, "SELECT COUNT(*) FROM election_candidate WHERE identity = 'b'").Scan(&joined)
		return joined == n
	})
	time.Sleep(5 * fast.Interval)
	// Own sessions, the sessions their leaders keep for fenced
	// transactions, one shared session, and what the pool keeps idle (2 by
	// default) for the shared session's history writes and fenced
	// transactions.
	assertSessions(t, 10*time.Second, 4+4+1+2, n, a, b)
	led, bySession := ledBy("a")
	var shared uint64
	for id, k := range bySession {
		if k > 1 {
			if shared != 0 {
				t.Fatalf("a leads on two sessions that each hold more than one election: %v", bySession)
			}
			shared = id
		}
	}
	if led != n || bySession[shared] != n-4 {
		t.Fatalf("a leads %d elections, %v by session, want %d, %d of them on one shared session", led, bySession, n, n-4)
	}
	// The shared session renews its terms through its lease: their records
	// name it and are not written at all, yet each reads as renewed within
	// the last two intervals. But an election with a candidate row that an
	// earlier version wrote (its statement names no lease_aware_at), whose
	// candidate judges a term by the record's own renewal alone, has its
	// record stamped often enough that this candidate never finds it
	// stale.
	var earlier, earlierLock string
	admin.QueryRowContext(ctx, "SELECT name, lock_name FROM election_record WHERE conn_id = ? ORDER BY name LIMIT 1", shared).Scan(&earlier, &earlierLock)
	if _, err := admin.ExecContext(ctx, "INSERT INTO election_candidate (lock_name, identity, strategy, host, pid, since, seen_at, expiry_us, "+
		"value, priority, version, healthy, waiting_since, session) VALUES (?, 'earlier', 'get_lock', 'h', 1, UTC_TIMESTAMP(6), UTC_TIMESTAMP(6), ?, "+
		"NULL, 0, NULL, NULL, UTC_TIMESTAMP(6), 'shared')", earlierLock, time.Hour.Microseconds()); err != nil {
		t.Fatal(err)
	}
	stamps := func() (leases int, stamped map[string]int64) {
		rows, err := admin.QueryContext(ctx, "SELECT name, lease_id, TIMESTAMPDIFF(MICROSECOND, '1970-01-01', renewed_at), "+
			"TIMESTAMPDIFF(MICROSECOND, renewed_at, UTC_TIMESTAMP(6)) FROM election_record WHERE conn_id = ?", shared)
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		ids, stamped := map[uint64]bool{}, map[string]int64{}
		for rows.Next() {
			var name string
			var id uint64
			var at, age int64
			if err := rows.Scan(&name, &id, &at, &age); err != nil {
				t.Fatal(err)
			}
			if name == earlier && age > (fast.Lease+fast.Margin).Microseconds() {
				t.Fatalf("%s's record was last renewed %d µs ago: its candidate of an earlier version finds it stale", name, age)
			}
			ids[id], stamped[name] = true, at
		}
		return len(ids), stamped
	}
	// From the moment the row is in, the records of the terms due are
	// checked for it; one started L + S ago (the longest the sampling
	// below can find) was due within (L + S) / 2.
	time.Sleep(fast.Lease + fast.Margin)
	leases, last := stamps()
	written := map[string]int{}
	samples := int(2 * (fast.Lease + fast.Margin) / fast.Interval)
	for range samples {
		time.Sleep(fast.Interval)
		_, now := stamps()
		for name, at := range now {
			if at != last[name] {
				written[name]++
			}
		}
		last = now
	}
	if leases != 1 || written[earlier] == 0 || len(written) != 1 {
		t.Fatalf("the shared session's %d terms name %d leases, and their records were written %v in %d intervals: want one lease, and only %s's written", n-4, leases, written, samples, earlier)
	}
	t.Logf("in %d intervals, of the shared session's %d records only %s's was written (%d times)", samples, n-4, earlier, written[earlier])
	// b's shared session waits for those terms by reading their lease, a
	// row a poll, not their records, a row each: over as many polls as
	// there are elections, it reads fewer rows than one poll reading them
	// all would each time (b's own sessions' waits add a few).
	if _, err := admin.ExecContext(ctx, "SET GLOBAL userstat = 1"); err == nil {
		readByB := func() (rows int64) {
			admin.QueryRowContext(ctx, "SELECT COALESCE(SUM(ROWS_READ), 0) FROM information_schema.USER_STATISTICS WHERE USER = ?", "b_"+dbName).Scan(&rows)
			return rows
		}
		before, polls := readByB(), n-4
		time.Sleep(time.Duration(polls) * fast.Interval) // CheckInterval
		if read := readByB() - before; read >= int64(polls*(n-4)) {
			t.Fatalf("b read %d rows in %d polls while a's shared session led %d elections: want fewer than %d", read, polls, n-4, polls*(n-4))
		} else {
			t.Logf("b read %d rows in %d polls while a's shared session led %d elections", read, polls, n-4)
		}
	}
	for i := range n {
		rec, err := newOperator(t, admin, fmt.Sprintf("e%02d", i)).Leader(ctx)
		if err != nil || rec.RenewedAgo > 2*fast.Interval {
			t.Fatalf("e%02d: %+v %v: want a leader renewed within two intervals", i, rec, err)
		}
	}
	// Candidates shows which of them share a session: each pool's first
	// four have their own.
	for _, holder := range []string{"a", "b"} {
		kinds := map[string]int{}
		for i := range n {
			cs, err := newOperator(t, admin, fmt.Sprintf("e%02d", i)).Candidates(ctx)
			if err != nil {
				t.Fatal(err)
			}
			for _, c := range cs {
				if c.Identity == holder {
					kinds[c.Session]++
				}
			}
		}
		if kinds[election.SessionOwn] != 4 || kinds[election.SessionShared] != n-4 {
			t.Errorf("%s's candidates by session: %v, want 4 %q and %d %q", holder, kinds, election.SessionOwn, n-4, election.SessionShared)
		}
	}
	// A candidate that insists on a session of its own gets one, even
	// past the pool's first four.
	cfg := fast
	cfg.Strategy, cfg.Identity, cfg.OwnSession = election.GetLock, "a", true
	own := await(t, campaign(ctx, newElectorWith(t, a, "own", cfg)), 10*time.Second).term
	var ownID uint64
	admin.QueryRowContext(ctx, "SELECT conn_id FROM election_record WHERE name = 'own'").Scan(&ownID)
	if _, bySession := ledBy("a"); ownID == 0 || ownID == shared || bySession[ownID] != 1 {
		t.Errorf("the OwnSession candidate leads on session %d, a leads %v by session; want a session of its own", ownID, bySession)
	}
	resignAll(t, own)
	// A term that ends on the shared session while the others go on frees
	// its lock and counts that in the lease: its waiter on b's shared
	// session, which watches the lease, not the lock, takes it.
	leader := func(name string) (holder string) {
		admin.QueryRowContext(ctx, "SELECT holder FROM election_record WHERE name = ? AND state = 'leading'", name).Scan(&holder)
		return holder
	}
	var resigned string
	admin.QueryRowContext(ctx, "SELECT r.name FROM election_record r JOIN election_candidate c ON c.lock_name = r.lock_name AND c.identity = 'b' "+
		"WHERE r.conn_id = ? AND c.session = ? ORDER BY r.name DESC LIMIT 1", shared, election.SessionShared).Scan(&resigned)
	quit["a"+resigned]()
	waitFor(t, "b to lead the election a left", 30*time.Second, func() bool { return leader(resigned) == "b" })
	// A demotion ends the one term it names: its renewal fails alone, the
	// others on the session go on.
	var demoted string
	admin.QueryRowContext(ctx, "SELECT name FROM election_record WHERE conn_id = ? ORDER BY name LIMIT 1", shared).Scan(&demoted)
	if _, err := newOperator(t, admin, demoted).Demote(ctx); err != nil {
		t.Fatalf("demoting %s: %v", demoted, err)
	}
	waitFor(t, "b to lead the demoted election", 30*time.Second, func() bool { return leader(demoted) == "b" })
	if _, bySession := ledBy("a"); bySession[shared] != n-4-2 {
		t.Fatalf("after leaving %s and demoting %s, a leads %v by session, want %d on the shared session %d", resigned, demoted, bySession, n-4-2, shared)
	}
	var killedLease uint64
	admin.QueryRowContext(ctx, "SELECT lease_id FROM election_record WHERE conn_id = ? LIMIT 1", shared).Scan(&killedLease)
	if _, err := admin.ExecContext(ctx, fmt.Sprintf("KILL CONNECTION %d", shared)); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "b to lead every election of the killed session", 30*time.Second, func() bool { ledB, _ := ledBy("b"); return ledB >= n-4 })
	waitFor(t, "the history to end a's terms of the killed session", 10*time.Second, func() bool {
		var ended int
		admin.QueryRowContext(ctx, "SELECT COUNT(*) FROM election_term WHERE holder = 'a' AND reason IN ('session-lost', 'lost', 'lock-lost')").Scan(&ended)
		return ended >= n-4-2
	})
	stop()
	running.Wait()
	// Each shared session deleted its lease as it closed, but the one
	// killed, whose row waits a day for a session opening to delete it.
	var left []uint64
	rows, err := admin.QueryContext(ctx, "SELECT lease_id FROM election_lease")
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var id uint64
		rows.Scan(&id)
		left = append(left, id)
	}
	rows.Close()
	if len(left) != 1 || left[0] != killedLease {
		t.Errorf("leases left: %v, want only the killed session's, %d", left, killedLease)
	}

	writes, elections := checkWritesPer(t, admin, "SELECT election, token, holder FROM writes ORDER BY id")
	if writes == 0 {
		t.Fatal("no fenced write was accepted")
	}
	t.Logf("%d fenced writes in %d elections; a led on sessions %v before the kill", writes, elections, bySession)
}

// A process joining 1100 elections beside a process that leads all of
// them costs that leader no term: the joiner checks the tables once, and
// (GetLock) takes its candidate locks in a statement per batch and writes
// its rows through a few pool sessions, so the leader's renewals never
// wait for it. Once joined, each holds a few sessions: under GetLock its
// own four, a shared one per 1000 and the pool's idle ones; under LeaseRow the
// pool's idle ones, since one statement renews every lease the process
// holds and one reads every election it waits for.
func TestJoiningIsHarmless(t *testing.T) {
	forEachStrategy(t, joiningIsHarmless)
}

func joiningIsHarmless(t *testing.T, s election.Strategy) {
	const n = 1100 // more than a shared session's 1000
	dbName := server.NewDatabase(t)
	admin := server.Open(t, dbName)
	ctx := ctxFor(t, 3*time.Minute)
	cfg := election.Config{Strategy: s, Interval: time.Second, Lease: 5 * time.Second, Margin: time.Second}
	runCtx, stop := context.WithCancel(ctx)
	var running sync.WaitGroup
	defer func() { stop(); running.Wait() }()
	var mu sync.Mutex
	var started, lost int
	join := func(db *sql.DB, holder string) {
		for i := range n {
			c := cfg
			c.Identity = holder
			e := newElectorWith(t, db, fmt.Sprintf("e%04d", i), c)
			running.Add(1)
			go func() {
				defer running.Done()
				e.Run(runCtx, func(ctx context.Context, term *election.Term) error {
					mu.Lock()
					started++
					mu.Unlock()
					<-ctx.Done()
					if runCtx.Err() == nil {
						mu.Lock()
						lost++
						mu.Unlock()
						t.Errorf("%s lost its term of %s: %v", holder, e.Name(), term.Err())
					}
					return nil
				})
			}()
		}
	}
	a := server.Open(t, dbName)
	// b's own account, so that the server counts the rows b reads
	// (MariaDB's user statistics).
	b := openAsUser(t, dbName, "b_"+dbName, "GRANT ALL ON `"+dbName+"`.* TO %s")
	join(a, "a")
	waitFor(t, "a to lead every election", time.Minute, func() bool { mu.Lock(); defer mu.Unlock(); return started == n })
	if s == election.GetLock {
		// Four of a's terms on sessions of their own, the others on
		// shared sessions of at most 1000 candidates: two.
		rows, err := admin.QueryContext(ctx, "SELECT COUNT(*) FROM election_record WHERE holder = 'a' AND state = 'leading' GROUP BY conn_id")
		if err != nil {
			t.Fatal(err)
		}
		var shared []int
		for rows.Next() {
			var k int
			if err := rows.Scan(&k); err != nil {
				t.Fatal(err)
			}
			if k > 1 {
				shared = append(shared, k)
			}
		}
		rows.Close()
		if slices.Sort(shared); len(shared) != 2 || shared[1] > 1000 || shared[0]+shared[1] != n-4 {
			t.Errorf("a's terms on shared sessions: %v, want two sessions of at most 1000, %d terms", shared, n-4)
		}
	}
	join(b, "b")
	waitFor(t, "b's candidates to join", time.Minute, func() bool {
		var joined int
		admin.QueryRowContext(ctx, "SELECT COUNT(*) FROM election_candidate WHERE identity = 'b'").Scan(&joined)
		return joined == n
	})
	time.Sleep(cfg.Lease + cfg.Margin) // every lease a's terms held when b joined has been renewed since
	most := 2 + 1                      // the pool's idle ones, and one statement in flight
	if s == election.GetLock {
		most += 4 + 2
	}
	assertSessions(t, time.Minute, most, n, a, b)
	mu.Lock()
	defer mu.Unlock()
	if lost > 0 || started != n {
		t.Errorf("%d terms lost, %d started; want none lost, %d started", lost, started, n)
	}
}

// assertSessions fails the test unless each of pools holds at most most
// sessions for its n elections within the time given: the first tries of
// candidates that just joined go through a few pool sessions at a time, and
// on a loaded server they may still run when the test looks.
func assertSessions(t *testing.T, within time.Duration, most, n int, pools ...*sql.DB) {
	t.Helper()
	deadline := time.Now().Add(within)
	for i := 0; i < len(pools); {
		st := pools[i].Stats()
		switch {
		case st.OpenConnections <= most:
			i++
		case time.Now().After(deadline):
			t.Errorf("pool %d holds %d sessions (%d in use) for %d elections after %v, want at most %d", i, st.OpenConnections, st.InUse, n, within, most)
			i++
		default:
			time.Sleep(20 * time.Millisecond)
		}
	}
}

package galeratest_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/sqlelect/election"
	"github.com/sqlelect/election/internal/galeratest"
	"github.com/sqlelect/election/internal/proctest"
)

// cluster is the one cluster of this test binary, started by TestMain.
// The tests share it, so they run one after the other; each makes a
// database of its own and leaves every node running and Synced.
var cluster *galeratest.Cluster

func TestMain(m *testing.M) {
	if os.Getenv(envChild) != "" {
		os.Exit(childMain())
	}
	os.Exit(galeratest.Main(m, func(c *galeratest.Cluster) { cluster = c }))
}

// timing is every candidate's: I = 200ms, L = 2s, S = 1s (W = 3s). On
// Galera a dead or paused node stalls every commit until the others evict
// it (5 s), so failover after a node fault takes that long whatever the
// timing; L = 2 s is the shortest the lab notes advise for node faults,
// and keeps a killed process's failover (L + S) short. The strategy is
// left unset: every candidate of the suite must settle on LeaseRow by
// itself (Auto), as a new user's would; had it settled on GetLock, the
// suite's campaigns would all be refused.
var timing = election.Config{
	Interval: 200 * time.Millisecond,
	Lease:    2 * time.Second,
	Margin:   time.Second,
}

// nodeID is the identity of the candidate that campaigns through node n.
func nodeID(n int) string { return "node-" + strconv.Itoa(n) }

// nodeOf is the node that candidate id campaigns through.
func nodeOf(t *testing.T, id string) int {
	t.Helper()
	n, err := strconv.Atoi(strings.TrimPrefix(id, "node-"))
	if err != nil {
		t.Fatalf("candidate %q campaigns through no node", id)
	}
	return n
}

func ctxFor(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// waitFor polls cond every 50ms until it holds, and fails the test after
// limit.
func waitFor(t *testing.T, what string, limit time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", limit, what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// setup waits until every node is Synced (a test before may have left one
// rejoining) and makes a fresh database with the writes table on every
// node.
func setup(t *testing.T) (*galeratest.Cluster, string) {
	t.Helper()
	c := cluster.Need(t)
	if err := c.WaitHealthy(ctxFor(t, 2*time.Minute)); err != nil {
		t.Fatal(err)
	}
	name := c.NewDatabase(t)
	if _, err := c.Node(1).Open(t, name).Exec("CREATE TABLE writes (id BIGINT AUTO_INCREMENT PRIMARY KEY, " +
		"token BIGINT UNSIGNED NOT NULL, holder VARCHAR(255) NOT NULL)"); err != nil {
		t.Fatal(err)
	}
	for n := 1; n <= galeratest.Size; n++ {
		if _, err := c.OpenSynced(t, n, name).Exec("SELECT COUNT(*) FROM writes"); err != nil {
			t.Fatalf("node %d: %v", n, err)
		}
	}
	return c, name
}

func newElector(t testing.TB, db *sql.DB, name, id string) *election.Elector {
	t.Helper()
	cfg := timing
	cfg.Identity = id
	e, err := election.New(db, name, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return e
}

// runInBackground runs e.Run with fn on a goroutine of its own until stop,
// or the test's clean-up, ends Run's context and waits until Run has
// returned.
func runInBackground(t testing.TB, e *election.Elector, fn func(context.Context, *election.Term) error) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		e.Run(ctx, fn)
	}()
	stop = func() { cancel(); <-done }
	t.Cleanup(stop)
	return stop
}

// fencedWrite records a write of holder under term's token, fenced.
func fencedWrite(ctx context.Context, term *election.Term, holder string) error {
	return term.Fenced(ctx, func(tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, "INSERT INTO writes (token, holder) VALUES (?, ?)", term.Token(), holder)
		return err
	})
}

// writeLoop makes fenced writes every 20ms until ctx ends, and logs those
// that fail while the term lasts.
func writeLoop(t testing.TB, ctx context.Context, term *election.Term, id string) {
	for ctx.Err() == nil {
		if err := fencedWrite(ctx, term, id); err != nil && ctx.Err() == nil {
			t.Logf("%s: a fenced write in term %d failed: %v", id, term.Token(), err)
		}
		sleep(ctx, 20*time.Millisecond)
	}
}

func sleep(ctx context.Context, d time.Duration) {
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}

type write struct {
	id, token uint64
	holder    string
}

// checkWrites reads the accepted writes on every node, each read after the
// node has applied all that the cluster committed, and asserts that every
// node has the same ones and that they are fenced: in commit order (id
// order: one node writes at a time, and a node that applies another's rows
// moves its AUTO_INCREMENT past them) tokens never decrease, and no token
// has two holders. It returns node 1's.
func checkWrites(t *testing.T, c *galeratest.Cluster, name string) []write {
	t.Helper()
	var first []write
	for n := 1; n <= galeratest.Size; n++ {
		rows, err := c.OpenSynced(t, n, name).Query("SELECT id, token, holder FROM writes ORDER BY id")
		if err != nil {
			t.Fatalf("node %d: %v", n, err)
		}
		var ws []write
		for rows.Next() {
			var w write
			if err := rows.Scan(&w.id, &w.token, &w.holder); err != nil {
				t.Fatal(err)
			}
			ws = append(ws, w)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			t.Fatal(err)
		}
		if n == 1 {
			first = ws
		} else if !slices.Equal(ws, first) {
			t.Errorf("node %d has %d writes and node 1 %d, or not the same ones", n, len(ws), len(first))
		}
	}
	var last uint64
	holders := map[uint64]string{}
	for _, w := range first {
		if w.token < last {
			t.Errorf("stale write accepted: write %d carries token %d after token %d was written", w.id, w.token, last)
		}
		if h, ok := holders[w.token]; ok && h != w.holder {
			t.Errorf("token %d used by two holders: %s and %s", w.token, h, w.holder)
		}
		holders[w.token], last = w.holder, w.token
	}
	return first
}

// assertGetLockRefused checks that a GetLock candidate on db (a Galera node,
// or a proxy in front of one) is refused with ErrUnsupported, by Campaign
// and by Run, and that nothing was written: no table in database name, on
// any node.
func assertGetLockRefused(t *testing.T, c *galeratest.Cluster, db *sql.DB, name string) {
	t.Helper()
	cfg := timing
	cfg.Strategy = election.GetLock
	cfg.Identity = "getlock"
	e, err := election.New(db, "refused", cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx := ctxFor(t, time.Minute)
	if _, err := e.Campaign(ctx); !errors.Is(err, election.ErrUnsupported) {
		t.Fatalf("Campaign with GetLock on Galera: %v, want ErrUnsupported", err)
	} else {
		t.Logf("Campaign: %v", err)
	}
	ran := false
	if err := e.Run(ctx, func(context.Context, *election.Term) error { ran = true; return nil }); !errors.Is(err, election.ErrUnsupported) || ran {
		t.Errorf("Run with GetLock on Galera: %v (fn ran: %v), want ErrUnsupported at once", err, ran)
	}
	for n := 1; n <= galeratest.Size; n++ {
		var tables []string
		rows, err := c.OpenSynced(t, n, name).Query("SELECT TABLE_NAME FROM information_schema.TABLES WHERE TABLE_SCHEMA = ?", name)
		if err != nil {
			t.Fatalf("node %d: %v", n, err)
		}
		for rows.Next() {
			var table string
			if err := rows.Scan(&table); err != nil {
				t.Fatal(err)
			}
			tables = append(tables, table)
		}
		rows.Close()
		if len(tables) > 0 {
			t.Errorf("node %d: the refused candidate created tables %q; a refusal must write nothing", n, tables)
		}
	}
}

// GetLock is refused on a Galera node before anything is written.
func TestGetLockRefusedWritesNothing(t *testing.T) {
	c := cluster.Need(t)
	name := c.NewDatabase(t)
	assertGetLockRefused(t, c, c.Node(1).Open(t, name), name)
}

// Three candidates in this process, one per node, take turns: each term
// makes a few fenced writes and gives the election up. At most one acts at
// a time, tokens grow strictly from term to term, and every node ends with
// the same fenced writes.
func TestOneLeaderAcrossNodes(t *testing.T) {
	c, name := setup(t)
	const wantTerms = 30
	var (
		acting atomic.Int32
		mu     sync.Mutex
		last   uint64
		terms  = map[string]int{}
		total  int
		enough = make(chan struct{})
	)
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	defer func() { cancel(); wg.Wait() }()
	for n := 1; n <= galeratest.Size; n++ {
		id := nodeID(n)
		e := newElector(t, c.Node(n).Open(t, name), "across", id)
		wg.Go(func() {
			for ctx.Err() == nil {
				err := e.Run(ctx, func(ctx context.Context, term *election.Term) error {
					if acting.Add(1) != 1 {
						t.Errorf("%s began term %d while another leader acted", id, term.Token())
					}
					defer acting.Add(-1)
					mu.Lock()
					if term.Token() <= last {
						t.Errorf("%s's term %d began after term %d", id, term.Token(), last)
					}
					last = term.Token()
					terms[id]++
					if total++; total == wantTerms {
						close(enough)
					}
					mu.Unlock()
					for range 5 {
						if ctx.Err() != nil {
							break
						}
						if err := fencedWrite(ctx, term, id); err != nil && ctx.Err() == nil {
							t.Logf("%s: a fenced write in term %d failed: %v", id, term.Token(), err)
						}
						sleep(ctx, 20*time.Millisecond)
					}
					return nil // done: Run resigns
				})
				if err != nil && ctx.Err() == nil {
					t.Errorf("%s: Run: %v", id, err)
					return
				}
				// Step aside a moment, so that the others, who read the
				// record every CheckInterval, get their turns.
				sleep(ctx, 2*timing.Interval)
			}
		})
	}
	select {
	case <-enough:
	case <-time.After(3 * time.Minute):
		t.Errorf("only %d terms after 3 minutes", total)
	}
	cancel()
	wg.Wait()
	writes := checkWrites(t, c, name)
	mu.Lock()
	defer mu.Unlock()
	t.Logf("%d terms (by candidate: %v), last token %d, %d fenced writes, the same on every node", total, terms, last, len(writes))
	if len(terms) < 2 {
		t.Errorf("only %v led: the candidates on the other nodes never won", terms)
	}
}

// electctl reads and steers an election from any node: here node 3, while
// the leader campaigns through node 2 and a follower through node 1.
func TestElectctlAgainstAnyNode(t *testing.T) {
	c, name := setup(t)
	bin := proctest.BuildElectctl(t)
	dsn := c.DSN(3, name)
	type start struct {
		id    string
		token uint64
	}
	starts := make(chan start, 10)
	lead := func(id string) func(context.Context, *election.Term) error {
		return func(ctx context.Context, term *election.Term) error {
			starts <- start{id, term.Token()}
			<-ctx.Done()
			return nil
		}
	}
	runInBackground(t, newElector(t, c.Node(2).Open(t, name), "ctl", nodeID(2)), lead(nodeID(2)))
	var first start
	select {
	case first = <-starts:
	case <-time.After(time.Minute):
		t.Fatal("no term within a minute")
	}
	runInBackground(t, newElector(t, c.Node(1).Open(t, name), "ctl", nodeID(1)), lead(nodeID(1)))

	type status struct {
		Leading bool   `json:"leading"`
		Leader  string `json:"leader"`
		Token   uint64 `json:"token"`
	}
	readStatus := func() (int, status) {
		code, out, errOut := proctest.Electctl(t, bin, dsn, "--json", "status", "ctl")
		var s status
		if code == 0 {
			if err := json.Unmarshal([]byte(out), &s); err != nil {
				t.Fatalf("status --json: %v\n%s%s", err, out, errOut)
			}
		}
		return code, s
	}
	// Node 3 applies what node 2 commits a moment later: wait for its view.
	waitFor(t, "node 3 to show node-2's term", 30*time.Second, func() bool {
		code, s := readStatus()
		return code == 0 && s.Leading && s.Leader == nodeID(2) && s.Token == first.token
	})
	if code, out, errOut := proctest.Electctl(t, bin, dsn, "status", "ctl"); code != 0 || !strings.Contains(out, nodeID(2)) {
		t.Errorf("status: exit %d, want 0 naming %s:\n%s%s", code, nodeID(2), out, errOut)
	}
	type candidate struct {
		Identity string `json:"identity"`
		Alive    bool   `json:"alive"`
		Leader   bool   `json:"leader"`
	}
	waitFor(t, "both candidates to be listed alive on node 3", 30*time.Second, func() bool {
		code, out, errOut := proctest.Electctl(t, bin, dsn, "--json", "candidates", "ctl")
		if code != 0 {
			t.Fatalf("candidates: exit %d:\n%s%s", code, out, errOut)
		}
		var cands []candidate
		if err := json.Unmarshal([]byte(out), &cands); err != nil {
			t.Fatalf("candidates --json: %v\n%s", err, out)
		}
		return slices.Equal(cands, []candidate{{nodeID(1), true, false}, {nodeID(2), true, true}})
	})
	if code, out, errOut := proctest.Electctl(t, bin, dsn, "candidates", "ctl"); code != 0 || !strings.Contains(out, nodeID(1)) || !strings.Contains(out, nodeID(2)) {
		t.Errorf("candidates: exit %d, want 0 listing both:\n%s%s", code, out, errOut)
	}
	if code, out, errOut := proctest.Electctl(t, bin, dsn, "check", "ctl", nodeID(2)); code != 0 {
		t.Errorf("check ctl %s: exit %d, want 0:\n%s%s", nodeID(2), code, out, errOut)
	}
	if code, out, errOut := proctest.Electctl(t, bin, dsn, "check", "ctl", nodeID(1)); code != 6 {
		t.Errorf("check ctl %s: exit %d, want 6 (another leads):\n%s%s", nodeID(1), code, out, errOut)
	}
	if code, out, errOut := proctest.Electctl(t, bin, dsn, "history", "ctl"); code != 0 || !strings.Contains(out, nodeID(2)) {
		t.Errorf("history: exit %d, want 0 naming %s:\n%s%s", code, nodeID(2), out, errOut)
	}
	// A node that is not Synced may show an old leader as current: electctl says so.
	root := c.Node(3).Open(t, "")
	if _, err := root.Exec("SET GLOBAL wsrep_desync = ON"); err != nil {
		t.Fatal(err)
	}
	code, out, errOut := proctest.Electctl(t, bin, dsn, "status", "ctl")
	if _, err := root.Exec("SET GLOBAL wsrep_desync = OFF"); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(errOut, "Donor/Desynced") || !strings.Contains(out, "behind:") {
		t.Errorf("status on a desynced node: exit %d, does not say it may be behind:\n%s%s", code, out, errOut)
	}
	if err := c.WaitHealthy(ctxFor(t, time.Minute)); err != nil {
		t.Fatal(err)
	}

	if code, out, errOut := proctest.Electctl(t, bin, dsn, "demote", "ctl"); code != 0 {
		t.Fatalf("demote: exit %d, want 0:\n%s%s", code, out, errOut)
	}
	var next start
	select {
	case next = <-starts:
	case <-time.After(time.Minute):
		t.Fatal("no new term within a minute of the demotion")
	}
	if next.token <= first.token {
		t.Fatalf("after the demotion: term %d of %s, after term %d", next.token, next.id, first.token)
	}
	waitFor(t, "node 3 to show the new term", 30*time.Second, func() bool {
		code, s := readStatus()
		return code == 0 && s.Leading && s.Leader == next.id && s.Token == next.token
	})
	type term struct {
		Token  uint64 `json:"token"`
		Leader string `json:"leader"`
		Reason string `json:"reason"`
	}
	code, out, errOut = proctest.Electctl(t, bin, dsn, "--json", "history", "ctl")
	var hist []term
	if err := json.Unmarshal([]byte(out), &hist); code != 0 || err != nil {
		t.Fatalf("history --json: exit %d, %v:\n%s%s", code, err, out, errOut)
	}
	if i := slices.IndexFunc(hist, func(h term) bool { return h.Token == first.token }); i < 0 || hist[i].Reason != "demoted" {
		t.Errorf("history has no term %d ended %q: %+v", first.token, "demoted", hist)
	}
	t.Logf("demoted from node 3: term %d of %s, then term %d of %s", first.token, first.id, next.token, next.id)
}

// Candidates that reach the cluster through HAProxy, the usual production
// shape.
func TestThroughHAProxy(t *testing.T) {
	c := cluster.Need(t)
	// The library reads the server's variables through the proxy, and
	// sees Galera behind it.
	t.Run("GetLock refused", func(t *testing.T) {
		name := c.NewDatabase(t)
		assertGetLockRefused(t, c, c.Proxy().Open(t, name), name)
	})
	// SIGKILL of the node that the leader's sessions go to: the proxy marks
	// it down, the sessions fail over to the next node, and a new term
	// begins there with a higher token.
	t.Run("node failure hands the election on", func(t *testing.T) {
		_, name := setup(t)
		ctx := ctxFor(t, 3*time.Minute)
		// After a restart the proxy takes node 1 back after two good
		// checks: until then new sessions would go to node 2.
		waitFor(t, "the proxy to send sessions to node 1", time.Minute, func() bool {
			n, err := c.Backend(ctx)
			return err == nil && n == 1
		})
		type start struct {
			id    string
			token uint64
			db    *sql.DB
		}
		var acting atomic.Int32
		starts := make(chan start, 100)
		for i := 1; i <= 3; i++ {
			id := "proxied-" + strconv.Itoa(i)
			db := c.Proxy().Open(t, name)
			runInBackground(t, newElector(t, db, "proxied", id), func(ctx context.Context, term *election.Term) error {
				if acting.Add(1) != 1 {
					t.Errorf("%s began term %d while another leader acted", id, term.Token())
				}
				defer acting.Add(-1)
				starts <- start{id, term.Token(), db}
				writeLoop(t, ctx, term, id)
				return nil
			})
		}
		var first start
		select {
		case first = <-starts:
		case <-time.After(time.Minute):
			t.Fatal("no term within a minute")
		}
		var backend string
		if err := first.db.QueryRowContext(ctx, "SELECT @@wsrep_node_name").Scan(&backend); err != nil {
			t.Fatal(err)
		}
		n, err := strconv.Atoi(strings.TrimPrefix(backend, "n"))
		if err != nil {
			t.Fatalf("the leader's sessions reach node %q", backend)
		}
		killed := time.Now()
		if err := c.Kill(n); err != nil {
			t.Fatal(err)
		}
		var next start
		for next.token <= first.token {
			select {
			case next = <-starts:
			case <-time.After(time.Minute):
				t.Fatalf("no new term within a minute of killing node %d\nproxy log:\n%s", n, c.ProxyLog())
			}
		}
		t.Logf("%s led term %d through the proxy on node %d; node %d SIGKILLed; %s began term %d %v later",
			first.id, first.token, n, n, next.id, next.token, time.Since(killed).Round(time.Millisecond))
		if err := c.Restart(ctx, n); err != nil {
			t.Fatal(err)
		}
		t.Logf("proxy log:\n%s", c.ProxyLog())
	})
}

// A leader process SIGKILLed: a candidate on another node takes over with
// a higher token.
func TestLeaderProcessKilled(t *testing.T) {
	c, name := setup(t)
	g := newGroup(t, name)
	for n := 1; n <= galeratest.Size; n++ {
		g.start(nodeID(n), c.DSN(n, name))
	}
	first := g.Next(is("start"), time.Minute)
	killed := time.Now()
	g.kill(first.ID)
	next := g.Next(startedAfter(first.Token), time.Minute)
	if next.ID == first.ID {
		t.Fatalf("the killed %s began term %d", first.ID, next.Token)
	}
	t.Logf("%s led term %d; SIGKILLed; %s began term %d %v later", first.ID, first.Token, next.ID, next.Token, next.Time().Sub(killed).Round(time.Millisecond))
	g.stopAll()
	g.assertOneActsAtATime()
	checkWrites(t, c, name)
	g.report()
}

// The leader's node fails: SIGKILL of its mariadbd, or SIGSTOP. The leader
// stops acting when its lease runs out, before a candidate on another node
// begins the next term; the node then rejoins (restarted, or continued) and
// its candidate is a follower.
//
// The candidates run with Lease 4 s here. A node fault stalls every commit
// until the others evict the node (5 to 6 s), so the next term cannot begin
// sooner whatever the lease; and a node rejoining stalls commits for about
// 2 s, which at Lease 2 s ended the new leader's term (seen in the lab, and
// here).
func TestLeaderNodeFaults(t *testing.T) {
	c := cluster.Need(t)
	const nodeTiming = envTiming + "=4s,1s"
	for _, fault := range []struct {
		name           string
		inject         func(n int) error
		recover        func(ctx context.Context, n int) error
		recoverMessage string
	}{
		{"SIGKILL", c.Kill, c.Restart, "restarted"},
		{"SIGSTOP", c.Pause, func(_ context.Context, n int) error { return c.Resume(n) }, "continued"},
	} {
		t.Run(fault.name, func(t *testing.T) {
			c, name := setup(t)
			ctx := ctxFor(t, 3*time.Minute)
			g := newGroup(t, name)
			for n := 1; n <= galeratest.Size; n++ {
				g.start(nodeID(n), c.DSN(n, name), nodeTiming)
			}
			first := g.Next(is("start"), time.Minute)
			n := nodeOf(t, first.ID)
			faulted := time.Now()
			if err := fault.inject(n); err != nil {
				t.Fatal(err)
			}
			end := g.Next(isFrom("end", first.ID), time.Minute)
			next := g.Next(startedAfter(first.Token), time.Minute)
			if next.ID == first.ID {
				t.Fatalf("%s began term %d through its failed node", next.ID, next.Token)
			}
			if !end.Time().Before(next.Time()) {
				t.Errorf("%s's term %d ended at %s, not before %s's term %d began at %s",
					first.ID, first.Token, end.Time().Format("15:04:05.000"), next.ID, next.Token, next.Time().Format("15:04:05.000"))
			}
			t.Logf("%s led term %d on node %d; node %s; the leader stopped %v later (%s), %s began term %d %v later",
				first.ID, first.Token, n, fault.name, end.Time().Sub(faulted).Round(time.Millisecond), end.Reason,
				next.ID, next.Token, next.Time().Sub(faulted).Round(time.Millisecond))

			if err := fault.recover(ctx, n); err != nil {
				t.Fatal(err)
			}
			if err := c.WaitHealthy(ctx); err != nil {
				t.Fatal(err)
			}
			rejoined := time.Now()
			t.Logf("node %d %s and Synced %v after the fault", n, fault.recoverMessage, rejoined.Sub(faulted).Round(time.Millisecond))
			// Its candidate campaigns again through it, as a follower: its
			// heartbeat is newer than the rejoin, and the leader is the same.
			ops, err := election.NewOperator(c.Node(nodeOf(t, next.ID)).Open(t, name), name, timing)
			if err != nil {
				t.Fatal(err)
			}
			waitFor(t, first.ID+" to campaign again", time.Minute, func() bool {
				cands, err := ops.Candidates(ctx)
				if err != nil {
					return false
				}
				i := slices.IndexFunc(cands, func(k election.Candidate) bool { return k.Identity == first.ID })
				return i >= 0 && cands[i].Alive && cands[i].SeenAgo < time.Since(rejoined)
			})
			rec, err := ops.Leader(ctx)
			switch {
			case err != nil:
				t.Errorf("after %s rejoined: %v", first.ID, err)
			case rec.Token != next.Token:
				// The rejoin stalled commits past the leader's lease: allowed,
				// and the safety checks below still hold.
				t.Logf("a term began after node %d rejoined: %s leads term %d", n, rec.Identity, rec.Token)
			case rec.Identity == first.ID:
				t.Errorf("%s leads term %d", first.ID, rec.Token)
			}
			g.stopAll()
			g.assertOneActsAtATime()
			checkWrites(t, c, name)
			g.report()
		})
	}
}

// A leader process is SIGSTOPped inside Term.Fenced, after its write and
// before its COMMIT. On Galera the next term begins on another node without
// waiting for that transaction (its shared lock on the epoch row holds only
// on its own node): after the old leader's Lease+Margin, 2.1 s here. When
// the old leader continues, its COMMIT must fail as fenced (ErrFenced) and
// its write must be on no node. Each case meets one of the three ways the
// transaction has ended by then:
//   - under the term's context, the old leader's own database/sql rolled it
//     back when it saw its term end;
//   - under context.Background(), continued before the session's
//     wait_timeout W (3 s: Lease+Margin rounded up), Galera aborted it
//     when the next term's epoch bump arrived from the other node;
//   - under context.Background(), continued after W, the server has closed
//     the session.
func TestStopInsideFenced(t *testing.T) {
	// Lease+Margin 2.1 s, W 3 s: the next term begins 0.9 s before the
	// server would close the stopped leader's session.
	const (
		lease, margin = 1500 * time.Millisecond, 600 * time.Millisecond
		w             = 3 * time.Second
	)
	for _, tc := range []struct {
		name  string
		ctx   string        // envStuck
		pause time.Duration // at least, from the stop to SIGCONT
	}{
		{"term context", "term", 0},
		{"background context", "background", 0},
		{"background context past wait_timeout", "background", w + time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, name := setup(t)
			g := newGroup(t, name)
			timed := envTiming + "=" + lease.String() + "," + margin.String()
			g.start(nodeID(1), c.DSN(1, name), envStuck+"="+tc.ctx, timed)
			first := g.Next(isFrom("start", nodeID(1)), time.Minute)
			for n := 2; n <= galeratest.Size; n++ {
				g.start(nodeID(n), c.DSN(n, name), timed)
			}
			g.Next(isFrom("inside", nodeID(1)), time.Minute)
			g.signal(nodeID(1), syscall.SIGSTOP)
			stopped := time.Now()
			next := g.Next(startedAfter(first.Token), time.Minute)
			if next.ID == nodeID(1) {
				t.Fatalf("the stopped %s began term %d", next.ID, next.Token)
			}
			t.Logf("%s stopped inside Fenced in term %d; %s began term %d %v later",
				first.ID, first.Token, next.ID, next.Token, next.Time().Sub(stopped).Round(time.Millisecond))
			time.Sleep(time.Until(stopped.Add(tc.pause)))
			g.signal(nodeID(1), syscall.SIGCONT)
			// It sees its term end, and only then lets fn return: Fenced
			// commits a transaction whose term is over.
			g.Next(isFrom("lost", nodeID(1)), time.Minute)
			g.signal(nodeID(1), syscall.SIGUSR1)
			stuck := g.Next(isFrom("stuck", nodeID(1)), time.Minute)
			t.Logf("the stale COMMIT returned: %s", stuck.Reason)
			if stuck.Reason == "<nil>" {
				t.Errorf("the stale transaction of term %d committed after term %d began", first.Token, next.Token)
			} else if !stuck.Fenced {
				t.Errorf("the stale COMMIT failed with %q, for which errors.Is(err, election.ErrFenced) is false", stuck.Reason)
			}
			g.stopAll()
			for n := 1; n <= galeratest.Size; n++ {
				var count int
				if err := c.OpenSynced(t, n, name).QueryRow("SELECT COUNT(*) FROM writes WHERE holder = ?", stuckHolder(nodeID(1))).Scan(&count); err != nil {
					t.Fatalf("node %d: %v", n, err)
				}
				if count != 0 {
					t.Errorf("node %d has the stale write of term %d", n, first.Token)
				}
			}
			checkWrites(t, c, name)
			g.report()
		})
	}
}

// A newer epoch committed on another node while a fenced transaction is
// open, its lease still valid (as when clocks drift past the margin), does
// not let the transaction commit, and the failure reads as fenced, with the
// newer epoch; no node has its row. (Here the bump reaches this node first
// and aborts the transaction on the row lock; the write set, which covers
// a COMMIT certified before the bump is applied here, is not told apart.)
func TestFencedWriteLosesToABumpOnAnotherNode(t *testing.T) {
	c, name := setup(t)
	ctx := ctxFor(t, time.Minute)
	cfg := timing
	cfg.Identity, cfg.Lease = "node-1", 20*time.Second // the lease outlasts the test
	e, err := election.New(c.Node(1).Open(t, name), "bump", cfg)
	if err != nil {
		t.Fatal(err)
	}
	term, err := e.Campaign(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer term.Resign(context.Background())
	other := c.Node(2).Open(t, name)
	err = term.Fenced(ctx, func(tx *sql.Tx) error {
		if _, err := tx.ExecContext(ctx, "INSERT INTO writes (token, holder) VALUES (?, 'overtaken')", term.Token()); err != nil {
			return err
		}
		// A newer term's bump, on node 2, while this transaction is open.
		_, err := other.ExecContext(ctx, "UPDATE election_epoch SET epoch = epoch + 1")
		return err
	})
	var stale *election.StaleTokenError
	if !errors.Is(err, election.ErrFenced) || !errors.As(err, &stale) || stale.Current <= term.Token() {
		t.Fatalf("a fenced transaction overtaken by a bump on another node: %v, want a StaleTokenError naming the newer epoch", err)
	}
	t.Logf("%v", err)
	for _, w := range checkWrites(t, c, name) {
		if w.holder == "overtaken" {
			t.Fatalf("the overtaken transaction's row was committed: %+v", w)
		}
	}
}

// On Galera a fenced transaction writes the epoch row, so a read-only one
// is refused with ErrUnsupported before anything runs, while one at read
// committed is fenced as any; Remove is refused while a term acts and,
// once nobody campaigns, deletes the election through another node.
func TestFencedTxOptionsAndRemove(t *testing.T) {
	c, name := setup(t)
	ctx := ctxFor(t, 2*time.Minute)
	e := newElector(t, c.Node(1).Open(t, name), "options", nodeID(1))
	ops, err := election.NewOperator(c.Node(2).Open(t, name), "options", timing)
	if err != nil {
		t.Fatal(err)
	}
	var first uint64
	err = e.Run(ctx, func(ctx context.Context, term *election.Term) error {
		first = term.Token()
		ran := false
		err := term.FencedTx(ctx, &sql.TxOptions{ReadOnly: true}, func(*sql.Tx) error { ran = true; return nil })
		if !errors.Is(err, election.ErrUnsupported) || ran {
			t.Errorf("a read-only fenced transaction on Galera: %v (ran %v), want ErrUnsupported before it runs", err, ran)
		}
		if err := term.FencedTx(ctx, &sql.TxOptions{Isolation: sql.LevelReadCommitted}, func(tx *sql.Tx) error {
			_, err := tx.ExecContext(ctx, "INSERT INTO writes (token, holder) VALUES (?, 'read-committed')", term.Token())
			return err
		}); err != nil {
			t.Errorf("a read-committed fenced write: %v", err)
		}
		if err := ops.Remove(ctx); !errors.Is(err, election.ErrInUse) {
			t.Errorf("Remove through node 2 while node 1 leads: %v, want ErrInUse", err)
		}
		return election.ErrStop
	})
	if !errors.Is(err, election.ErrStop) {
		t.Fatalf("Run: %v", err)
	}
	// Node 2 applies node 1's write sets a moment after they commit: the
	// candidate row that Run deleted on its way out may still show there,
	// alive, for that moment (in CI, once, under load).
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		err := ops.Remove(ctx)
		if err == nil {
			break
		}
		if !errors.Is(err, election.ErrInUse) || time.Now().After(deadline) {
			t.Fatalf("Remove once nobody campaigns: %v", err)
		}
	}
	for n := 1; n <= galeratest.Size; n++ {
		var rows int
		if err := c.OpenSynced(t, n, name).QueryRow("SELECT (SELECT COUNT(*) FROM election_record) + (SELECT COUNT(*) FROM election_epoch) + " +
			"(SELECT COUNT(*) FROM election_term) + (SELECT COUNT(*) FROM election_candidate)").Scan(&rows); err != nil || rows != 0 {
			t.Errorf("node %d after Remove: %d rows of the election, %v", n, rows, err)
		}
	}
	next, err := newElector(t, c.Node(3).Open(t, name), "options", nodeID(3)).Campaign(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer next.Resign(context.Background())
	if next.Token() <= first {
		t.Errorf("the election started anew with token %d, not above the removed one's %d", next.Token(), first)
	}
}

// Three members of a group of 8 shards, one on each node (LeaseRow, which
// Auto takes on Galera), spread the shards evenly; when one leaves (its Run
// ends, resigning its terms), the two others own every shard, evenly; and
// in every node's copy of the writes, no shard's fenced writes go back in
// tokens. A member that dies is TestShards' (processes, one server).
func TestShardsAcrossNodes(t *testing.T) {
	const n = 8
	c, name := setup(t)
	ctx := ctxFor(t, 3*time.Minute)
	stops := map[string]context.CancelFunc{}
	var wg sync.WaitGroup
	defer func() {
		for _, stop := range stops {
			stop()
		}
		wg.Wait()
	}()
	for k := 1; k <= galeratest.Size; k++ {
		cfg := timing
		cfg.Identity = nodeID(k)
		s, err := election.NewShards(c.Node(k).Open(t, name), "orders", n, cfg)
		if err != nil {
			t.Fatal(err)
		}
		mctx, stop := context.WithCancel(ctx)
		stops[cfg.Identity] = stop
		wg.Go(func() {
			s.Run(mctx, func(ctx context.Context, shard int, term *election.Term) error {
				writeLoop(t, ctx, term, strconv.Itoa(shard)+":"+cfg.Identity)
				return nil
			})
		})
	}
	admin := c.OpenSynced(t, 1, name)
	even := func(members ...string) func() bool {
		return func() bool {
			recs, err := election.Elections(ctx, admin, "")
			if err != nil {
				return false
			}
			by, led := map[string]int{}, 0
			for _, r := range recs {
				if _, ok := election.ShardOf("orders", r.Name); ok && r.Leading() {
					by[r.Identity]++
					led++
				}
			}
			for _, m := range members {
				if by[m] > (n+len(members)-1)/len(members) {
					return false
				}
				delete(by, m)
			}
			return led == n && len(by) == 0
		}
	}
	waitFor(t, "three members to own the shards evenly", time.Minute, even(nodeID(1), nodeID(2), nodeID(3)))
	stops[nodeID(1)]()
	waitFor(t, "the two others to own every shard, evenly", time.Minute, even(nodeID(2), nodeID(3)))
	for _, stop := range stops {
		stop()
	}
	wg.Wait()
	for k := 1; k <= galeratest.Size; k++ {
		rows, err := c.OpenSynced(t, k, name).Query("SELECT id, token, holder FROM writes ORDER BY id")
		if err != nil {
			t.Fatalf("node %d: %v", k, err)
		}
		last := map[string]uint64{}
		var writes int
		for rows.Next() {
			var (
				id, token uint64
				holder    string
			)
			if err := rows.Scan(&id, &token, &holder); err != nil {
				t.Fatal(err)
			}
			shard, _, _ := strings.Cut(holder, ":")
			if token < last[shard] {
				t.Errorf("node %d: shard %s accepted a stale write %d: token %d after %d", k, shard, id, token, last[shard])
			}
			last[shard] = token
			writes++
		}
		rows.Close()
		if len(last) != n {
			t.Errorf("node %d: %d fenced writes in %d shards, want writes in all %d", k, writes, len(last), n)
		}
	}
}

// TestPoliciesAcrossNodes: the leader policies with candidates on three
// nodes: the value proclaimed on one node is read on another, a leader
// hands over to a candidate of higher priority on another node, and that
// one resigns unhealthy when its check fails; the fenced writes stay
// fenced on every node.
func TestPoliciesAcrossNodes(t *testing.T) {
	c, name := setup(t)
	ctx := ctxFor(t, 2*time.Minute)
	var failing atomic.Bool
	var terms sync.Map // identity: its current *election.Term
	var stops []func()
	start := func(k int, priority int32, health func(context.Context) error) {
		cfg := timing
		cfg.Identity, cfg.Priority, cfg.PreferAfter, cfg.Health = nodeID(k), priority, 2*timing.Lease, health
		cfg.Value = "http://" + nodeID(k) + ".invalid/"
		e, err := election.New(c.Node(k).Open(t, name), name, cfg)
		if err != nil {
			t.Fatal(err)
		}
		stops = append(stops, runInBackground(t, e, func(ctx context.Context, term *election.Term) error {
			terms.Store(cfg.Identity, term)
			writeLoop(t, ctx, term, cfg.Identity)
			return nil
		}))
	}
	ops, err := election.NewOperator(c.Node(3).Open(t, name), name, timing)
	if err != nil {
		t.Fatal(err)
	}
	leads := func(id, value string) func() bool {
		return func() bool {
			rec, err := ops.Leader(ctx)
			return err == nil && rec.Identity == id && rec.Value == value
		}
	}
	start(1, 0, nil)
	waitFor(t, "node-1 to lead, its value read on node 3", 30*time.Second, leads("node-1", "http://node-1.invalid/"))
	first, _ := ops.Leader(ctx)
	start(2, 1, func(context.Context) error {
		if failing.Load() {
			return errors.New("failing, as the test says")
		}
		return nil
	})
	waitFor(t, "node-2, of a higher priority, to lead", time.Minute, leads("node-2", "http://node-2.invalid/"))
	second, _ := ops.Leader(ctx)
	failing.Store(true)
	waitFor(t, "node-1 to lead again", 30*time.Second, leads("node-1", "http://node-1.invalid/"))
	term, _ := terms.Load("node-1")
	if err := term.(*election.Term).Proclaim(ctx, "http://node-1.invalid:9090/"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the new value, read on node 3", 10*time.Second, leads("node-1", "http://node-1.invalid:9090/"))
	hist, err := ops.History(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	reasons := map[uint64]string{}
	for _, h := range hist {
		reasons[h.Token] = h.Reason
	}
	if reasons[first.Token] != "handed-over" || reasons[second.Token] != "unhealthy" {
		t.Fatalf("node-1's first term ended %q, node-2's %q; want handed-over, unhealthy", reasons[first.Token], reasons[second.Token])
	}
	cands, err := ops.Candidates(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range cands {
		if k.Identity == "node-2" && (k.Alive || k.Health != "unhealthy" || k.Priority != 1) {
			t.Fatalf("node-2 while failing: %+v, want unhealthy, not alive, priority 1", k)
		}
	}
	for _, stop := range stops { // each node's reads must see the same writes
		stop()
	}
	checkWrites(t, c, name)
}

package replicatest_test

import (
	"context"
	"database/sql"
	"errors"
	"io"
	"log"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/sqlelect/election"
	"github.com/sqlelect/election/internal/leakcheck"
	"github.com/sqlelect/election/internal/proctest"
	"github.com/sqlelect/election/internal/replicatest"
)

func TestMain(m *testing.M) {
	// The driver logs every session the primary's SIGKILL cut; the tests
	// say what matters.
	mysql.SetLogger(log.New(io.Discard, "", 0))
	os.Exit(leakcheck.Run(m))
}

// timing is every candidate's: W = ⌈L + S⌉ = 2 s.
var timing = election.Config{Interval: 100 * time.Millisecond, Lease: time.Second, Margin: 500 * time.Millisecond}

const name = "failover"

// term is one term as its leader saw it begin.
type term struct {
	token    uint64
	identity string
	server   string // "primary" or "replica"
}

// write is one write a leader made: to the downstream store through its
// Fence, or in the database through Term.Fenced (acknowledged commits).
type write struct {
	token    uint64
	identity string
	seq      int
}

// world is what the candidates did: the terms that began, the writes a
// downstream store accepted through one Fence, in the order it accepted
// them, and the fenced transactions the database acknowledged.
type world struct {
	t     *testing.T
	fence election.Fence

	mu        sync.Mutex
	terms     []term
	accepted  []write
	committed []write
	seq       int
}

// candidates runs one candidate per identity on db until stop is called;
// stop returns once every Run has returned.
func (w *world) candidates(db *sql.DB, s election.Strategy, server string, ids ...string) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for _, id := range ids {
		cfg := timing
		cfg.Strategy, cfg.Identity = s, id
		cfg.Observer = &election.Observer{TermStarted: func(_, identity string, token uint64) {
			w.mu.Lock()
			w.terms = append(w.terms, term{token, identity, server})
			w.mu.Unlock()
		}}
		e, err := election.New(db, name, cfg)
		if err != nil {
			w.t.Fatal(err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			e.Run(ctx, func(ctx context.Context, t *election.Term) error { return w.lead(ctx, db, t, id) })
		}()
	}
	return func() { cancel(); wg.Wait() }
}

// lead writes every 20 ms while the term lasts: to the downstream store,
// then in the database.
func (w *world) lead(ctx context.Context, db *sql.DB, t *election.Term, id string) error {
	for ctx.Err() == nil {
		w.mu.Lock()
		w.seq++
		wr := write{t.Token(), id, w.seq}
		if w.fence.Check(ctx, "store", wr.token) == nil {
			w.accepted = append(w.accepted, wr)
		}
		w.mu.Unlock()
		err := t.Fenced(ctx, func(tx *sql.Tx) error {
			_, err := tx.ExecContext(ctx, "INSERT INTO writes (seq, token, holder) VALUES (?, ?, ?)", wr.seq, wr.token, id)
			return err
		})
		if err == nil {
			w.mu.Lock()
			w.committed = append(w.committed, wr)
			w.mu.Unlock()
		}
		select {
		case <-ctx.Done():
		case <-time.After(20 * time.Millisecond):
		}
	}
	return nil
}

// handOn demotes the leader on db n times, each time waiting for the next
// term to begin.
func (w *world) handOn(ctx context.Context, db *sql.DB, n int) {
	w.t.Helper()
	ops, err := election.NewOperator(db, name, timing)
	if err != nil {
		w.t.Fatal(err)
	}
	for range n {
		before := w.leader(ctx, ops, 0)
		if _, err := ops.Demote(ctx); err != nil {
			w.t.Fatalf("demote: %v", err)
		}
		w.leader(ctx, ops, before)
		time.Sleep(100 * time.Millisecond) // a few writes
	}
}

// leader waits for a leader with a token above after, and returns it.
func (w *world) leader(ctx context.Context, ops *election.Operator, after uint64) uint64 {
	w.t.Helper()
	for {
		if rec, err := ops.Leader(ctx); err == nil && rec.Token > after {
			return rec.Token
		}
		select {
		case <-ctx.Done():
			w.t.Fatalf("no leader after token %d", after)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// check asserts the safety of everything the candidates did: no token
// began two terms, every term on the promoted replica has a token above
// every term of the old primary, and the store accepted writes in the
// order of their tokens, each token's from one leader.
func (w *world) check() {
	w.t.Helper()
	w.mu.Lock()
	defer w.mu.Unlock()
	seen := map[uint64]term{}
	var lastPrimary uint64
	firstReplica := ^uint64(0)
	for _, t := range w.terms {
		if o, ok := seen[t.token]; ok {
			w.t.Errorf("token %d began two terms: %+v and %+v", t.token, o, t)
		}
		seen[t.token] = t
		if t.server == "primary" {
			lastPrimary = max(lastPrimary, t.token)
		} else {
			firstReplica = min(firstReplica, t.token)
		}
	}
	if firstReplica <= lastPrimary {
		w.t.Errorf("the promoted replica issued token %d, not above the old primary's %d", firstReplica, lastPrimary)
	}
	by := map[uint64]string{}
	var last uint64
	onReplica := 0
	for _, wr := range w.accepted {
		if wr.token < last {
			w.t.Errorf("the store accepted token %d after %d", wr.token, last)
		}
		if o, ok := by[wr.token]; ok && o != wr.identity {
			w.t.Errorf("the store accepted token %d from %s and from %s", wr.token, o, wr.identity)
		}
		by[wr.token], last = wr.identity, wr.token
		if seen[wr.token].server == "replica" {
			onReplica++
		}
	}
	if onReplica == 0 {
		w.t.Error("the store accepted no write of the promoted replica's leaders: they were locked out")
	}
	w.t.Logf("%d terms (%d on the old primary, last token %d; first on the promoted replica %d), %d writes accepted downstream (%d after the failover), %d fenced commits",
		len(w.terms), len(w.terms)-len(slices.DeleteFunc(slices.Clone(w.terms), func(t term) bool { return t.server == "primary" })),
		lastPrimary, firstReplica, len(w.accepted), onReplica, len(w.committed))
}

func ctxFor(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// setup starts a pair and a database with the writes table on it, and
// returns pools on the primary and (read-only until promoted) the replica.
func setup(t *testing.T, ctx context.Context, mode replicatest.Mode) (pair *replicatest.Pair, db string, primary, replica *sql.DB) {
	pair, err := replicatest.Start(ctx, mode)
	if errors.Is(err, replicatest.ErrNoServer) { // a server of the user's own (ELECTION_TEST_DSN) cannot be failed over
		t.Skip(err)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pair.Close)
	t.Logf("%s", pair.Describe())
	db = pair.Primary.NewDatabase(t)
	primary = pair.Primary.Open(t, db)
	if _, err := primary.ExecContext(ctx, "CREATE TABLE writes (seq INT PRIMARY KEY, token BIGINT UNSIGNED NOT NULL, holder VARCHAR(64) NOT NULL)"); err != nil {
		t.Fatal(err)
	}
	if err := election.CreateSchema(ctx, primary, ""); err != nil {
		t.Fatal(err)
	}
	return pair, db, primary, pair.Replica.Open(t, db)
}

// epoch reads the election's epoch on db.
func epoch(t *testing.T, ctx context.Context, db *sql.DB) uint64 {
	var e uint64
	if err := db.QueryRowContext(ctx, "SELECT epoch FROM election_epoch").Scan(&e); err != nil {
		t.Fatal(err)
	}
	return e
}

// The replica stops receiving, terms go on on the primary (their tokens
// reach the downstream store), the primary is SIGKILLed, the replica is
// promoted and the candidates re-pointed at it: it has lost the last
// terms, yet issues no token again, and the store accepts its leaders.
// So with asynchronous replication, and with semi-synchronous replication
// once the primary has fallen back to asynchronous (the replica silent for
// longer than its timeout). electctl on the lagging replica says it is
// behind, and the history on the promoted replica shows the database's
// failover.
func TestPromotedReplicaThatLostTerms(t *testing.T) {
	for _, tc := range []struct {
		mode replicatest.Mode
		s    election.Strategy
	}{
		{replicatest.Async, election.GetLock},
		{replicatest.Async, election.LeaseRow},
		{replicatest.SemiSync, election.GetLock},
	} {
		what := map[replicatest.Mode]string{replicatest.Async: "async", replicatest.SemiSync: "semisync-fallen-back"}[tc.mode]
		t.Run(what+"/"+tc.s.String(), func(t *testing.T) {
			s := tc.s
			ctx := ctxFor(t, 3*time.Minute)
			pair, db, primary, replica := setup(t, ctx, tc.mode)
			w := &world{t: t}
			stop := w.candidates(primary, s, "primary", "a", "b")
			defer func() { stop() }()
			w.handOn(ctx, primary, 2)
			if err := pair.StopReplication(ctx); err != nil {
				t.Fatal(err)
			}
			w.handOn(ctx, primary, 3)
			if lost, kept := epoch(t, ctx, primary), epoch(t, ctx, replica); kept >= lost {
				t.Fatalf("the replica has epoch %d, the primary %d: it lost no term", kept, lost)
			}
			if tc.mode == replicatest.SemiSync {
				if on, unwaited, err := pair.SemiSync(ctx); err != nil || on || unwaited == 0 {
					t.Fatalf("the primary still waits for the replica (%v), or committed nothing without it (%d): %v", on, unwaited, err)
				}
			}

			bin := proctest.BuildElectctl(t)
			_, out, errOut := proctest.Electctl(t, bin, pair.Replica.DSN(db), "status", name)
			if !strings.Contains(errOut, "replication is stopped") || !strings.Contains(out, "behind:") {
				t.Errorf("electctl status on the lagging replica does not say it is behind:\n%s%s", out, errOut)
			}

			if err := pair.Primary.Kill(); err != nil {
				t.Fatal(err)
			}
			stop()
			if err := pair.Promote(ctx); err != nil {
				t.Fatal(err)
			}
			stop = w.candidates(replica, s, "replica", "a", "b")
			w.handOn(ctx, replica, 2)
			stop()
			w.check()

			code, out, _ := proctest.Electctl(t, bin, pair.Replica.DSN(db), "history", name)
			if code != 0 || !strings.Contains(out, "(changed)") {
				t.Errorf("electctl history on the promoted replica shows no change of server:\n%s", out)
			}
		})
	}
}

// Semi-synchronous replication loses no acknowledged commit: the replica,
// promoted after the primary was SIGKILLed while a leader wrote, has every
// fenced write the leader saw commit and every term the primary began, so
// its tokens continue the primary's.
func TestPromotedSemiSyncReplica(t *testing.T) {
	ctx := ctxFor(t, 3*time.Minute)
	pair, _, primary, replica := setup(t, ctx, replicatest.SemiSync)
	_, before, err := pair.SemiSync(ctx) // the set-up's, made before the replica connected
	if err != nil {
		t.Fatal(err)
	}
	w := &world{t: t}
	stop := w.candidates(primary, election.GetLock, "primary", "a", "b")
	defer func() { stop() }()
	w.handOn(ctx, primary, 3)
	if on, unwaited, err := pair.SemiSync(ctx); err != nil || !on || unwaited != before {
		t.Fatalf("the primary does not wait for the replica (%v), or committed %d without it: %v", on, unwaited-before, err)
	}
	if err := pair.Primary.Kill(); err != nil { // while the leader writes
		t.Fatal(err)
	}
	stop()
	if err := pair.Promote(ctx); err != nil {
		t.Fatal(err)
	}
	kept := map[write]bool{}
	rows, err := replica.QueryContext(ctx, "SELECT seq, token, holder FROM writes")
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var wr write
		if err := rows.Scan(&wr.seq, &wr.token, &wr.identity); err != nil {
			t.Fatal(err)
		}
		kept[wr] = true
	}
	rows.Close()
	w.mu.Lock()
	var last uint64
	for _, wr := range w.committed {
		if !kept[wr] {
			t.Errorf("fenced write %+v was acknowledged by the primary but is not on the promoted replica", wr)
		}
	}
	for _, tm := range w.terms {
		last = max(last, tm.token)
	}
	committed := len(w.committed)
	w.mu.Unlock()
	if e := epoch(t, ctx, replica); e < last {
		t.Errorf("the promoted replica's epoch is %d, below the primary's last term %d", e, last)
	}
	t.Logf("%d acknowledged fenced writes, all on the promoted replica (%d rows)", committed, len(kept))
	stop = w.candidates(replica, election.GetLock, "replica", "a", "b")
	w.handOn(ctx, replica, 2)
	stop()
	w.check()
}

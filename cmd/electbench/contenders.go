package main

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"flag"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/sqlelect/election"
	"github.com/sqlelect/election/internal/benchevent"
	"github.com/sqlelect/election/internal/failpoint"
)

// Contenders, as named on the command line.
const (
	libGetLock   = "getlock"      // this library, GetLock strategy
	libLease     = "lease"        // this library, LeaseRow strategy
	recipe20     = "recipe-20s"   // the single-row timeout recipe as published: 20 s
	recipeSame   = "recipe-lease" // the same recipe with our lease + margin
	plainGetLock = "plain-getlock"
)

var allContenders = []string{libGetLock, libLease, recipe20, recipeSame, plainGetLock}

// Variants of the library's contenders, for the comparison: baseline's
// candidates run another build of electbench (-baseline), beside this
// build's in one run; ranked's candidate i has Config.Priority i, so that
// at every fault a candidate of a higher priority than some waits.
const (
	baseline = "-baseline"
	ranked   = "-ranked"
)

var variantContenders = []string{libGetLock + baseline, libLease + baseline, libGetLock + ranked, libLease + ranked}

// library is the library strategy contender runs (getlock, lease), or
// contender itself if it is not this library's.
func library(contender string) string {
	return strings.TrimSuffix(strings.TrimSuffix(contender, baseline), ranked)
}

// isRanked reports whether contender's candidates have priorities.
func isRanked(contender string) bool { return strings.HasSuffix(contender, ranked) }

// isLibrary reports whether contender is this library's, of this build or
// the baseline's.
func isLibrary(contender string) bool {
	return library(contender) == libGetLock || library(contender) == libLease
}

// candidateMain is the candidate subcommand: the arena starts one per
// candidate with the contest's timing; it runs until SIGTERM.
func candidateMain(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("candidate", flag.ContinueOnError)
	contender := fs.String("contender", libGetLock, "")
	id := fs.String("id", "", "")
	dsn := fs.String("dsn", "", "")
	elections := fs.Int("elections", 1, "")
	shards := fs.Bool("shards", false, "")
	policies := fs.Bool("policies", false, "")
	priority := fs.Int("priority", 0, "")
	healthSeed := fs.Uint64("health-seed", 0, "")
	var tm timing
	fs.DurationVar(&tm.Interval, "interval", time.Second, "")
	fs.DurationVar(&tm.Lease, "lease", 5*time.Second, "")
	fs.DurationVar(&tm.Margin, "margin", time.Second, "")
	fs.DurationVar(&tm.WriteEvery, "write-every", 20*time.Millisecond, "")
	fs.DurationVar(&tm.Check, "check", 0, "")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if (*elections != 1 || *shards) && !isLibrary(*contender) {
		return fmt.Errorf("-elections %d, -shards: only this library's contenders run several elections", *elections)
	}
	var pol *policy
	switch {
	case *policies:
		if !isLibrary(*contender) {
			return errors.New("-policies: only this library's contenders have leader policies")
		}
		pol = &policy{priority: int32(*priority), healthSeed: *healthSeed}
	case *priority != 0:
		pol = &policy{priority: int32(*priority), rankOnly: true}
	}
	return runCandidate(ctx, *contender, *id, *dsn, tm, *elections, *shards, pol)
}

// runCandidate runs contender as candidate id on dsn until ctx ends; a
// library contender in elections elections, or, with shards, as a member
// of a group of that many shards, and with pol's leader policies unless
// pol is nil.
func runCandidate(ctx context.Context, contender, id, dsn string, tm timing, elections int, shards bool, pol *policy) error {
	db, err := sql.Open("mysql", dsn)
	if err != nil {
		return err
	}
	defer db.Close()
	c := &candidate{Printer: benchevent.NewPrinter(id, os.Stdout, election.ErrFenced), db: db, tm: tm, policy: pol}
	c.ObeyQuiet(ctx)
	c.trap.listen(os.Stdin, c.Emit)
	// Every election of the candidate reaches the points; only the first,
	// "bench", is faulted, so chaos runs one.
	ctx = failpoint.With(ctx, func(point string) { c.trap.reach(failpointOf(point)) })
	c.Emit(event{Ev: "ready"})
	switch contender {
	case libGetLock, libLease:
		return c.library(ctx, contender, elections, shards)
	case recipe20:
		return c.recipe(ctx, 20)
	case recipeSame:
		return c.recipe(ctx, int(math.Ceil((tm.Lease + tm.Margin).Seconds())))
	case plainGetLock:
		return c.plainLock(ctx)
	}
	return fmt.Errorf("unknown contender %q", contender)
}

// event is one line a candidate process prints.
type event = benchevent.Event

// candidate runs one contender in this process until ctx ends, printing
// events on stdout.
type candidate struct {
	*benchevent.Printer
	db     *sql.DB
	tm     timing
	policy *policy // nil: none
	writes sync.WaitGroup
	trap   trap
}

// write records one write, op, of the acting term, in one transaction: it
// sets the register, adds a row and bumps the counter. The register comes
// first: its row lock orders the transactions from there to their commit,
// so that the rows' ids are in commit order.
func write(ctx context.Context, tx *sql.Tx, holder, term string, token uint64, op string) error {
	if _, err := tx.ExecContext(ctx, "UPDATE bench_register SET token = ?, op = ?", token, op); err != nil {
		return err
	}
	if _, err := tx.ExecContext(ctx, "INSERT INTO bench_writes (holder, term, token, op, at) VALUES (?, ?, ?, ?, UTC_TIMESTAMP(6))", holder, term, token, op); err != nil {
		return err
	}
	_, err := tx.ExecContext(ctx, "UPDATE bench_counter SET n = n + 1")
	return err
}

// library runs this library's electors, all on the candidate's one
// *sql.DB: one in the election "bench", whose terms write, fenced, and with
// elections > 1 one each in "bench-1" and on, whose terms only hold. An
// elector that fails ends them all. With shards the elections are the
// shards of the group "bench" (election.Shards), and shard 0 writes.
func (c *candidate) library(ctx context.Context, contender string, elections int, shards bool) error {
	cfg := election.Config{Identity: c.ID, Interval: c.tm.Interval, Lease: c.tm.Lease, Margin: c.tm.Margin, CheckInterval: c.tm.Check}
	cfg.Strategy = election.GetLock
	if contender == libLease {
		cfg.Strategy = election.LeaseRow
	}
	if c.policy != nil {
		c.policy.apply(&cfg, c.ID, c.tm)
	}
	if shards {
		return c.member(ctx, max(1, elections), cfg)
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	errs := make([]error, max(1, elections))
	var wg sync.WaitGroup
	for i := range errs {
		wg.Go(func() {
			// The election the arena watches keeps a session of its own,
			// as an application would for the one election whose
			// failover matters most; the others share.
			name, lead, own := "bench", c.writeFenced, true
			if i > 0 {
				own = false
				name = fmt.Sprintf("bench-%d", i)
				lead = func(ctx context.Context, t *election.Term) { c.hold(ctx, name, t) }
			}
			cfg := cfg
			cfg.OwnSession = own
			errs[i] = c.elect(ctx, name, cfg, lead)
			cancel()
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

// policy holds the leader policies a library candidate runs with (chaos
// -policies).
type policy struct {
	priority   int32
	healthSeed uint64 // with the process id, draws the runs of its health check (flapping)
	rankOnly   bool   // the priority alone (a ranked contender)
}

// apply sets cfg's leader policies: the priority, a hand-over to a
// preferred candidate once a term has lasted a lease, a value naming the
// process, and a health check that flaps.
func (p *policy) apply(cfg *election.Config, id string, tm timing) {
	cfg.Priority = p.priority
	if p.rankOnly {
		return
	}
	cfg.PreferAfter = tm.Lease
	cfg.Value = fmt.Sprintf("%s pid %d", id, os.Getpid())
	// A candidate started again after a kill draws runs of its own.
	cfg.Health = newFlapping(p.healthSeed, uint64(os.Getpid()), tm.Interval).check
}

// flapping is a health check that passes and fails in runs drawn from a
// seed: passing for 5 to 29 intervals, then failing for 1 to 14, so that
// most failing runs reach HealthFailures (3 by default) and end the term
// or the campaign, and some do not. A candidate is then unhealthy about a
// quarter of the time, and all three at once seldom. The runs are laid
// out in time from when it was made, not counted in checks: a process
// paused (SIGSTOP) finds the schedule where the clock is.
type flapping struct {
	mu       sync.Mutex
	rng      *rand.Rand
	interval time.Duration
	start    time.Time
	failing  bool          // in the current run
	until    time.Duration // the current run's end, since start
}

// errFlapping is the failure of a flapping check.
var errFlapping = errors.New("failing, as the flapping schedule says")

// newFlapping returns the schedule drawn from seed and stream for a check
// made every interval.
func newFlapping(seed, stream uint64, interval time.Duration) *flapping {
	// A failing run that ends at once: the schedule opens with a passing one.
	return &flapping{rng: rand.New(rand.NewPCG(seed, stream)), interval: interval, start: time.Now(), failing: true}
}

// check is the Config.Health.
func (f *flapping) check(context.Context) error {
	if f.failingAt(time.Since(f.start)) {
		return errFlapping
	}
	return nil
}

// failingAt reports whether the check fails at d after start; d must not
// go back.
func (f *flapping) failingAt(d time.Duration) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	for d >= f.until {
		f.failing = !f.failing
		n := 5 + f.rng.IntN(25)
		if f.failing {
			n = 1 + f.rng.IntN(14)
		}
		f.until += time.Duration(n) * f.interval
	}
	return f.failing
}

// elect runs one elector in the election name until ctx ends or it fails;
// lead is each term.
func (c *candidate) elect(ctx context.Context, name string, cfg election.Config, lead func(context.Context, *election.Term)) error {
	e, err := election.New(c.db, name, cfg)
	if err != nil {
		return fmt.Errorf("election %s: %w", name, err)
	}
	err = e.Run(ctx, func(ctx context.Context, t *election.Term) error {
		lead(ctx, t)
		return nil
	})
	if err == nil || ctx.Err() != nil {
		return nil
	}
	return fmt.Errorf("election %s: %w", name, err)
}

// member is a member of the group "bench" of n shards until ctx ends or a
// shard fails: shard 0's terms write, fenced, the others' only hold.
func (c *candidate) member(ctx context.Context, n int, cfg election.Config) error {
	s, err := election.NewShards(c.db, "bench", n, cfg)
	if err != nil {
		return err
	}
	err = s.Run(ctx, func(ctx context.Context, shard int, t *election.Term) error {
		if shard == 0 {
			c.writeFenced(ctx, t)
		} else {
			c.hold(ctx, election.ShardName("bench", shard), t)
		}
		return nil
	})
	if ctx.Err() != nil {
		return nil
	}
	return err
}

// writeFenced is a term of the election the arena watches: it writes,
// fenced, every WriteEvery until the term ends.
func (c *candidate) writeFenced(ctx context.Context, t *election.Term) {
	term := fmt.Sprint(t.Token())
	// The time comes before the look at the lease: if the lease was valid
	// at that time, no later term had begun by then, however long this
	// process is paused before the event is printed.
	at := time.Now().UnixNano()
	c.Emit(event{Ev: "start", Term: term, Token: t.Token(), OK: t.IsLeader(), At: at})
	for ctx.Err() == nil {
		if !c.Quiet() {
			c.Record(ctx, term, t.Token(), func(op string) error {
				return t.Fenced(ctx, func(tx *sql.Tx) error { return write(ctx, tx, c.ID, term, t.Token(), op) })
			})
		}
		sleep(ctx, c.tm.WriteEvery)
	}
	// In the words of the history (lock-lost, session-lost, ...), which the
	// chaos report sets beside the history's own.
	c.Emit(event{Ev: "end", Term: term, Reason: t.Reason()})
}

// hold is a term of one of the other elections: it only says it began and
// lasts until it ends, and why it ended.
func (c *candidate) hold(ctx context.Context, name string, t *election.Term) {
	c.Emit(event{Ev: "other-start", Election: name, Term: fmt.Sprint(t.Token()), Token: t.Token()})
	<-ctx.Done()
	c.Emit(event{Ev: "other-end", Election: name, Term: fmt.Sprint(t.Token()), Reason: t.Reason()})
}

// acting is a hand-rolled leader's belief that it leads, and the writes it
// makes while it believes so: unfenced, as in the recipes people use.
type acting struct {
	c      *candidate
	seq    int
	term   string
	cancel context.CancelFunc
}

// leading reports whether the hand-rolled leader believes it leads.
func (a *acting) leading() bool { return a.cancel != nil }

// start begins a term and its writes, which go on until stop.
func (a *acting) start(ctx context.Context) {
	a.seq++
	// A restarted candidate counts again from 1: the pid keeps terms apart.
	a.term = fmt.Sprintf("%s#%d.%d", a.c.ID, os.Getpid(), a.seq)
	a.c.Emit(event{Ev: "start", Term: a.term})
	wctx, cancel := context.WithCancel(ctx)
	a.cancel = cancel
	a.c.writes.Add(1)
	go func(term string) {
		defer a.c.writes.Done()
		for wctx.Err() == nil {
			if !a.c.Quiet() {
				a.c.Record(wctx, term, 0, func(op string) error { return a.c.unfencedWrite(wctx, term, op) })
			}
			sleep(wctx, a.c.tm.WriteEvery)
		}
	}(a.term)
}

// unfencedWrite is one write of a hand-rolled leader, in a transaction of
// its own.
func (c *candidate) unfencedWrite(ctx context.Context, term, op string) error {
	tx, err := c.db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	if err := write(ctx, tx, c.ID, term, 0, op); err != nil {
		tx.Rollback()
		return err
	}
	return tx.Commit()
}

// stop ends the term, if any, once its last write has returned.
func (a *acting) stop(reason string) {
	if a.cancel == nil {
		return
	}
	a.cancel()
	a.c.writes.Wait()
	a.cancel = nil
	a.c.Emit(event{Ev: "end", Term: a.term, Reason: reason})
}

// recipe is the single-row timeout recipe as commonly published: every
// interval, one upsert that takes over the row when the leader has not
// been seen for n seconds, then a read of who leads. No local lease, no
// deadline on the statements, no fencing.
func (c *candidate) recipe(ctx context.Context, n int) error {
	if _, err := c.db.ExecContext(ctx, "CREATE TABLE IF NOT EXISTS service_election ("+
		"anchor TINYINT UNSIGNED NOT NULL PRIMARY KEY, service_id VARCHAR(128) NOT NULL, last_seen_active TIMESTAMP NOT NULL)"); err != nil {
		return err
	}
	a := &acting{c: c}
	defer a.stop("exit")
	tick := time.NewTicker(c.tm.Interval)
	defer tick.Stop()
	for {
		_, err := c.db.ExecContext(ctx, fmt.Sprintf("INSERT INTO service_election (anchor, service_id, last_seen_active) VALUES (1, ?, NOW()) "+
			"ON DUPLICATE KEY UPDATE service_id = IF(last_seen_active < NOW() - INTERVAL %d SECOND, VALUES(service_id), service_id), "+
			"last_seen_active = IF(service_id = VALUES(service_id), VALUES(last_seen_active), last_seen_active)", n), c.ID)
		var leader int
		if err == nil {
			err = c.db.QueryRowContext(ctx, "SELECT COUNT(*) FROM service_election WHERE anchor = 1 AND service_id = ?", c.ID).Scan(&leader)
		}
		switch {
		case ctx.Err() != nil:
			return nil
		case err == nil && leader == 1 && !a.leading():
			a.start(ctx)
		case (err != nil || leader == 0) && a.leading():
			a.stop(fmt.Sprint("poll: ", err))
		}
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
	}
}

// plainLock is GET_LOCK as commonly hand-rolled: a pinned session, a ping
// every interval, no session wait_timeout, no fencing.
func (c *candidate) plainLock(ctx context.Context) error {
	a := &acting{c: c}
	defer a.stop("exit")
	for ctx.Err() == nil {
		conn, err := c.db.Conn(ctx)
		if err != nil {
			sleep(ctx, c.tm.Interval)
			continue
		}
		var got sql.NullInt64
		for ctx.Err() == nil && err == nil && got.Int64 != 1 {
			err = conn.QueryRowContext(ctx, "SELECT GET_LOCK('bench', 1)").Scan(&got)
		}
		if err == nil && ctx.Err() == nil {
			a.start(ctx)
			for err == nil {
				if sleep(ctx, c.tm.Interval); ctx.Err() != nil {
					break
				}
				err = conn.PingContext(ctx)
			}
			a.stop(fmt.Sprint("ping: ", err))
		}
		// Discard the session rather than pool it: a pooled one could
		// still hold the lock.
		conn.Raw(func(any) error { return driver.ErrBadConn })
		conn.Close()
	}
	return nil
}

// sleep waits d or until ctx ends.
func sleep(ctx context.Context, d time.Duration) {
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}

package main

import (
	"bufio"
	"cmp"
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/sqlelect/election"
	"github.com/sqlelect/election/internal/faultproxy"
	"github.com/sqlelect/election/internal/galeratest"
	"github.com/sqlelect/election/internal/mysqltest"
)

// arenaSpec says which candidates an arena runs.
type arenaSpec struct {
	contender  string
	tm         timing
	candidates int // processes
	// elections is how many elections each process is a candidate in, on
	// its one *sql.DB (library contenders); 0 means 1. Only the first,
	// "bench", writes and is faulted and checked.
	elections int
	// shards makes the elections the shards of one group (election.Shards):
	// "bench/0" writes and is faulted and checked; the group's hand-overs
	// move it as they move the others.
	shards bool
	// policies runs library candidates with leader policies (chaos
	// -policies): candidate i with priority i mod 3, and a health check
	// that flaps on a schedule drawn from seed+i.
	policies bool
	seed     uint64
	// faults are those the arena may inject; they decide whether each
	// candidate needs its own user and fault proxy (isolating).
	faults []string
	// cluster, if set, is the Galera cluster behind srv (its HAProxy):
	// candidate i connects to node i mod 3, and the node faults hit it.
	cluster *galeratest.Cluster
	// baseline is the electbench binary of another build that the
	// baseline contenders' candidates run (getlock-baseline).
	baseline string
	// etcdBins run the etcd contenders, whose arena starts an etcd of its
	// own instead of using srv: candidate i connects to node i mod its
	// nodes.
	etcdBins etcdBinaries
}

// arena runs the candidates of one contender: one process per candidate,
// and, if isolated, one database user (but for etcd) and one fault proxy
// per candidate, so that a fault hits the leader alone.
type arena struct {
	arenaSpec
	isolated bool
	srv      *mysqltest.Server
	db       string
	admin    *sql.DB // root, on the arena's database
	self     string  // this binary, re-executed as a candidate
	// nodes are the servers the candidates connect to (srv, or the
	// cluster's nodes), nodeAdmins root pools on each.
	nodes      []*mysqltest.Server
	nodeAdmins []*sql.DB
	// etcd is the private etcd of an etcd contender; srv, db, admin and
	// nodes are then unset.
	etcd *etcdCluster

	clockRand *rand.Rand // draws the clock faults' steps from the seed

	mu      sync.Mutex
	procs   map[string]*proc
	events  chan event
	pending []event
	log     []event   // every event, for the checker's report
	reads   []regRead // the register as the parent read it (chaos)
}

// proc is one candidate. Its user and proxy outlive its process, so that a
// candidate killed by a fault comes back the same.
type proc struct {
	id      string
	index   int               // in the order made
	node    int               // its server, in arena.nodes or arena.etcd.nodes
	user    string            // its database user (MySQL)
	proxy   *faultproxy.Proxy // nil unless the arena is isolated
	cmd     *exec.Cmd
	stdin   io.WriteCloser // arms and springs the candidate's trap
	drained chan struct{}  // closed once cmd's output has been read to its end
	killed  *atomic.Int64  // when the parent SIGKILLed cmd (Unix ns), 0 if it did not
}

// clockStream is the stream of the seed's random numbers that draws the
// clock faults' steps: chaos deals the faults from stream 0.
const clockStream = 1

// newArena creates the contender's database on srv, or for etcd starts
// its etcd, and starts the spec's candidates.
func newArena(ctx context.Context, srv *mysqltest.Server, spec arenaSpec) (*arena, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	a := &arena{arenaSpec: spec, isolated: isolating(spec.faults), self: self, procs: map[string]*proc{}, events: make(chan event, 1<<16),
		clockRand: rand.New(rand.NewPCG(spec.seed, clockStream))}
	if isEtcd(spec.contender) {
		nodes := 1
		if spec.contender == etcd3 {
			nodes = 3
		}
		if a.etcd, err = startEtcd(ctx, spec.etcdBins.server, nodes); err != nil {
			return nil, err
		}
	} else if err := a.openDatabase(ctx, srv); err != nil {
		return nil, err
	}
	for i := range spec.candidates {
		if err := a.spawn(ctx, fmt.Sprintf("c%d", i)); err != nil {
			a.close()
			return nil, fmt.Errorf("after %d of %d candidates: %w", i, spec.candidates, err)
		}
	}
	return a, nil
}

// openDatabase creates the arena's database on srv afresh, opens the root
// pools, and, unless the arena is isolated, creates the user all
// candidates share.
func (a *arena) openDatabase(ctx context.Context, srv *mysqltest.Server) error {
	a.srv, a.db = srv, "bench_"+strings.ReplaceAll(a.contender, "-", "_")
	if err := a.createDatabase(ctx); err != nil {
		return err
	}
	var err error
	cfg := srv.Config(a.db)
	a.nodes = []*mysqltest.Server{srv}
	if a.cluster != nil {
		// Reads that see every write the cluster committed before them.
		cfg.Params = map[string]string{"wsrep_sync_wait": "15"}
		a.nodes = []*mysqltest.Server{a.cluster.Node(1), a.cluster.Node(2), a.cluster.Node(3)}
	}
	if a.admin, err = sql.Open("mysql", cfg.FormatDSN()); err != nil {
		return err
	}
	for _, n := range a.nodes {
		admin, err := sql.Open("mysql", n.DSN(a.db))
		if err != nil {
			a.close()
			return err
		}
		a.nodeAdmins = append(a.nodeAdmins, admin)
	}
	if !a.isolated {
		if err := a.createUser(ctx, a.user("all")); err != nil {
			a.admin.Close()
			return err
		}
	}
	return nil
}

// createDatabase creates the arena's database afresh, with the tables the
// acting leaders write to.
func (a *arena) createDatabase(ctx context.Context) error {
	root, err := sql.Open("mysql", a.srv.DSN(""))
	if err != nil {
		return err
	}
	defer root.Close()
	for _, stmt := range []string{
		"DROP DATABASE IF EXISTS " + a.db, "CREATE DATABASE " + a.db,
		"CREATE TABLE " + a.db + ".bench_writes (id BIGINT AUTO_INCREMENT PRIMARY KEY, holder VARCHAR(64) NOT NULL, " +
			"term VARCHAR(96) NOT NULL, token BIGINT UNSIGNED NOT NULL, op VARCHAR(96) NOT NULL, at DATETIME(6) NOT NULL)",
		// One row each; the keys are for Galera, which replicates rows by key.
		"CREATE TABLE " + a.db + ".bench_counter (k TINYINT NOT NULL PRIMARY KEY, n BIGINT NOT NULL)",
		"INSERT INTO " + a.db + ".bench_counter VALUES (1, 0)",
		"CREATE TABLE " + a.db + ".bench_register (k TINYINT NOT NULL PRIMARY KEY, token BIGINT UNSIGNED NOT NULL, op VARCHAR(96) NOT NULL)",
		"INSERT INTO " + a.db + ".bench_register VALUES (1, 0, '')",
	} {
		if _, err := root.ExecContext(ctx, stmt); err != nil {
			return fmt.Errorf("setting up %s: %w", a.db, err)
		}
	}
	return nil
}

// spawn starts candidate id (again, after a kill, under the same user).
func (a *arena) spawn(ctx context.Context, id string) error {
	p := a.proc(id)
	if p == nil {
		var err error
		if p, err = a.newProc(ctx, id); err != nil {
			return err
		}
	}
	cmd := a.command(p)
	out, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	in, err := cmd.StdinPipe()
	if err != nil {
		return err
	}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("starting candidate %s: %w", id, err)
	}
	drained, killed := make(chan struct{}), new(atomic.Int64)
	go func() {
		a.read(out)
		// A killed leader prints no end: its term acted until its
		// process was SIGKILLed, or else until its output ended
		// (actingSpans).
		a.events <- event{Ev: "exit", ID: id, At: cmp.Or(killed.Load(), time.Now().UnixNano())}
		close(drained)
	}()
	p.cmd, p.stdin, p.drained, p.killed = cmd, in, drained, killed
	a.mu.Lock()
	a.procs[id] = p
	a.mu.Unlock()
	return nil
}

// newProc creates candidate id: if the arena is isolated, with its own
// database user (but for etcd) and fault proxy, else with the shared user.
func (a *arena) newProc(ctx context.Context, id string) (*proc, error) {
	a.mu.Lock()
	index := len(a.procs)
	a.mu.Unlock()
	addrs := a.addrs()
	p := &proc{id: id, index: index, node: index % len(addrs)} // round robin
	if a.etcd == nil {
		p.user = a.user("all")
		if a.isolated {
			p.user = a.user(id)
			if err := a.createUser(ctx, p.user); err != nil {
				return nil, err
			}
		}
	}
	if !a.isolated {
		return p, nil
	}
	proxy, err := faultproxy.Start(addrs[p.node])
	if err != nil {
		return nil, fmt.Errorf("starting the fault proxy of %s: %w", id, err)
	}
	p.proxy = proxy
	return p, nil
}

// addrs are the addresses of the servers the candidates connect to, in
// the order of their nodes.
func (a *arena) addrs() []string {
	if a.etcd != nil {
		return a.etcd.clients()
	}
	var addrs []string
	for _, n := range a.nodes {
		addrs = append(addrs, n.Addr())
	}
	return addrs
}

// user names the database user of the arena's candidate id.
func (a *arena) user(id string) string {
	return strings.ReplaceAll(a.contender, "-", "") + "_" + id
}

// createUser creates the database user name afresh, with every right on the
// arena's database.
func (a *arena) createUser(ctx context.Context, name string) error {
	for _, stmt := range []string{
		"DROP USER IF EXISTS '" + name + "'@'%'",
		"CREATE USER '" + name + "'@'%' IDENTIFIED BY 'bench'",
		"GRANT ALL ON " + a.db + ".* TO '" + name + "'@'%'",
	} {
		if _, err := a.admin.ExecContext(ctx, stmt); err != nil {
			return fmt.Errorf("creating user %s: %w", name, err)
		}
	}
	return nil
}

// command is the candidate process of p: electbench-etcd for etcd, else
// this binary connecting as p's user; through p's proxy if it has one.
func (a *arena) command(p *proc) *exec.Cmd {
	var cmd *exec.Cmd
	if a.etcd != nil {
		cmd = a.etcdCommand(p)
	} else {
		cmd = a.mysqlCommand(p)
	}
	// One OS thread per candidate keeps a thousand candidate processes cheap.
	cmd.Env = append(os.Environ(), "GOMAXPROCS=1")
	// Stderr stays nil, /dev/null: a writer would cost a pipe and a
	// goroutine per candidate.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	return cmd
}

// mysqlCommand is candidate p's process for a MySQL contender: this binary
// (or the baseline's) as its candidate subcommand.
func (a *arena) mysqlCommand(p *proc) *exec.Cmd {
	cfg := a.nodes[p.node].Config(a.db)
	cfg.User, cfg.Passwd = p.user, "bench"
	if p.proxy != nil {
		cfg.Addr = p.proxy.Addr()
	}
	bin := a.self
	if strings.HasSuffix(a.contender, baseline) {
		bin = a.baseline
	}
	cmd := exec.Command(bin, "candidate", "-contender", library(a.contender), "-id", p.id, "-dsn", cfg.FormatDSN(),
		"-interval", a.tm.Interval.String(), "-lease", a.tm.Lease.String(), "-margin", a.tm.Margin.String(),
		"-write-every", a.tm.WriteEvery.String(), "-check", a.tm.Check.String(), "-elections", strconv.Itoa(max(1, a.elections)), "-shards="+strconv.FormatBool(a.shards))
	switch {
	case a.policies:
		cmd.Args = append(cmd.Args, "-policies", "-priority", strconv.Itoa(p.index%3), "-health-seed", strconv.FormatUint(a.seed+uint64(p.index), 10))
	case isRanked(a.contender):
		cmd.Args = append(cmd.Args, "-priority", strconv.Itoa(p.index))
	}
	return cmd
}

// highestBut is the highest index, a ranked candidate's priority, among
// the candidates but id.
func (a *arena) highestBut(id string) int {
	a.mu.Lock()
	defer a.mu.Unlock()
	top := -1
	for _, p := range a.procs {
		if p.id != id {
			top = max(top, p.index)
		}
	}
	return top
}

// read passes the events a candidate prints to the arena until its output
// ends; lines that are not events are skipped.
func (a *arena) read(out io.Reader) {
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		var e event
		if json.Unmarshal(sc.Bytes(), &e) == nil {
			a.events <- e
		}
	}
}

// proc returns candidate id, or nil before it was spawned.
func (a *arena) proc(id string) *proc {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.procs[id]
}

// all returns the candidate processes.
func (a *arena) all() []*proc {
	a.mu.Lock()
	defer a.mu.Unlock()
	procs := make([]*proc, 0, len(a.procs))
	for _, p := range a.procs {
		procs = append(procs, p)
	}
	return procs
}

// wait waits until p's process has ended and its output has been read: Wait
// closes the pipe, so it must not cut the reader off (see
// exec.Cmd.StdoutPipe).
func (p *proc) wait() error {
	<-p.drained
	return p.cmd.Wait()
}

// kill SIGKILLs p's process, and notes when.
func (p *proc) kill() {
	p.killed.CompareAndSwap(0, time.Now().UnixNano())
	p.cmd.Process.Kill()
}

// stop waits up to limit for p's process to end, then kills it.
func (p *proc) stop(limit time.Duration) {
	done := make(chan struct{})
	go func() {
		p.wait()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(limit):
		p.kill()
		<-done
	}
}

// signalAll sends sig to every candidate process.
func (a *arena) signalAll(sig syscall.Signal) {
	for _, p := range a.all() {
		p.cmd.Process.Signal(sig)
	}
}

// next returns the first event, pending or arriving within limit, for which
// match is true; others stay pending.
func (a *arena) next(match func(event) bool, limit time.Duration) (event, bool) {
	for i, e := range a.pending {
		if match(e) {
			a.pending = append(a.pending[:i], a.pending[i+1:]...)
			return e, true
		}
	}
	timeout := time.After(limit)
	for {
		select {
		case e := <-a.events:
			a.log = append(a.log, e)
			if match(e) {
				return e, true
			}
			a.pending = append(a.pending, e)
		case <-timeout:
			return event{}, false
		}
	}
}

// take logs e and keeps it pending.
func (a *arena) take(e event) {
	a.log = append(a.log, e)
	a.pending = append(a.pending, e)
}

// drain takes every event already received.
func (a *arena) drain() {
	for {
		select {
		case e := <-a.events:
			a.take(e)
		default:
			return
		}
	}
}

// await collects events until done, which reads the log, holds, or limit
// passes; it reports whether done held.
func (a *arena) await(limit time.Duration, done func() bool) bool {
	deadline := time.Now().Add(limit)
	for {
		a.drain()
		if done() {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		a.next(func(event) bool { return false }, 50*time.Millisecond)
	}
}

// checked is the name of the election the arena checks: its writers'.
func (a *arena) checked() string {
	if a.shards {
		return election.ShardName("bench", 0)
	}
	return "bench"
}

// campaigning waits, up to limit, until every candidate of this library's
// contenders campaigns (Operator.Candidates: alive), so that a kill's
// failover is the protocol's, not a candidate's pause before it campaigns
// again after the last fault (a server restart drops every session, and
// each candidate's Run waits its backoff). Other contenders have no
// candidate rows: it returns at once.
func (a *arena) campaigning(ctx context.Context, limit time.Duration) {
	if !isLibrary(a.contender) {
		return
	}
	op, err := election.NewOperator(a.admin, a.checked(), election.Config{})
	if err != nil {
		return
	}
	a.mu.Lock()
	want := len(a.procs)
	a.mu.Unlock()
	a.await(limit, func() bool {
		cs, err := op.Candidates(ctx)
		alive := 0
		for _, c := range cs {
			if c.Alive {
				alive++
			}
		}
		return err == nil && alive >= want
	})
}

// leader waits until some candidate leads and has written, and returns its
// start event.
func (a *arena) leader(limit time.Duration) (event, bool) {
	var cur event
	ok := a.await(limit, func() bool {
		var found bool
		cur, found = a.actingLeader()
		return found
	})
	return cur, ok
}

// actingLeader returns the start event of the newest term that has not
// ended, once that term is 200 ms old and has written. A term ends with its
// end event or with its process: a killed leader prints no end, and its
// term must not pass for the leader until the next term's begins.
func (a *arena) actingLeader() (event, bool) {
	ended := map[string]bool{}
	terms := map[string][]string{} // each candidate's, so far
	for _, e := range a.log {
		switch e.Ev {
		case "start":
			terms[e.ID] = append(terms[e.ID], e.Term)
		case "end":
			ended[e.Term] = true
		case "exit":
			for _, t := range terms[e.ID] {
				ended[t] = true
			}
			delete(terms, e.ID)
		}
	}
	var cur *event
	for i := len(a.log) - 1; i >= 0; i-- {
		if e := a.log[i]; e.Ev == "start" && !ended[e.Term] {
			cur = &a.log[i]
			break
		}
	}
	if cur == nil {
		return event{}, false
	}
	for _, e := range a.log {
		if e.Ev == "write" && e.OK && e.Term == cur.Term && time.Since(time.Unix(0, cur.At)) > 200*time.Millisecond {
			return *cur, true
		}
	}
	return event{}, false
}

// ready waits until every candidate process has said it is ready (before
// that, the signals of signalAll would end it).
func (a *arena) ready(limit time.Duration) bool {
	want := len(a.all())
	return a.await(limit, func() bool { return a.readied() >= want })
}

// readied counts the candidates that have said they are ready.
func (a *arena) readied() int { return a.distinct("ready", func(e event) string { return e.ID }) }

// othersLed waits until each of the elections beyond the first
// (arenaSpec.elections) has had a leader, so that their campaigns are over.
func (a *arena) othersLed(limit time.Duration) bool {
	return a.await(limit, func() bool {
		return a.distinct("other-start", func(e event) string { return e.Election }) >= a.elections-1
	})
}

// census says how far the candidates got, for an error: how many are
// ready, their terms and writes, and why the last term ended.
func (a *arena) census() string {
	n := map[string]int{}
	last := "-"
	for _, e := range a.log {
		switch {
		case e.Ev == "write" && !e.OK:
			n["failed"]++
		case e.Ev == "end":
			last = e.Reason
		}
		n[e.Ev]++
	}
	return fmt.Sprintf("%d of %d candidates ready; %d terms began, %d ended, the last because %q; %d writes acknowledged, %d failed",
		a.readied(), len(a.all()), n["start"], n["end"], last, n["write"]-n["failed"], n["failed"])
}

// distinct counts the distinct keys of the logged events of kind ev.
func (a *arena) distinct(ev string, key func(event) string) int {
	seen := map[string]bool{}
	for _, e := range a.log {
		if e.Ev == ev {
			seen[key(e)] = true
		}
	}
	return len(seen)
}

// stopAll ends every candidate gracefully, then for sure, and takes their
// last events.
func (a *arena) stopAll() {
	procs := a.all()
	for _, p := range procs {
		p.cmd.Process.Signal(syscall.SIGCONT)
		p.cmd.Process.Signal(syscall.SIGTERM)
	}
	stopped := make(chan struct{})
	go func() {
		var wg sync.WaitGroup
		for _, p := range procs {
			wg.Go(func() { p.stop(5 * time.Second) })
		}
		wg.Wait()
		close(stopped)
	}()
	// Take events meanwhile: a reader stuck on a full channel would never
	// see its process's output end.
	for {
		select {
		case e := <-a.events:
			a.take(e)
		case <-stopped:
			a.drain()
			return
		}
	}
}

// close stops the candidates and releases their proxies and the admin
// connections, or the etcd.
func (a *arena) close() {
	a.stopAll()
	a.mu.Lock()
	for _, p := range a.procs {
		if p.proxy != nil {
			p.proxy.Close()
		}
	}
	a.mu.Unlock()
	if a.admin != nil {
		a.admin.Close()
	}
	for _, admin := range a.nodeAdmins {
		admin.Close()
	}
	if a.etcd != nil {
		a.etcd.close()
	}
}

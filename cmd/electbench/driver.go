package main

import (
	"bufio"
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/sqlelect/election/internal/faultproxy"
	"github.com/sqlelect/election/internal/mysqltest"
)

// Faults, as named on the command line.
const (
	fSIGKILL  = "sigkill"
	fSIGTERM  = "sigterm"
	fSIGSTOP  = "sigstop"
	fBlackH   = "blackhole"
	fReset    = "reset"
	fKillConn = "kill-connection"
	fRestart  = "restart"
)

var allFaults = []string{fSIGKILL, fSIGTERM, fSIGSTOP, fBlackH, fReset, fKillConn, fRestart}

// arena runs the candidates of one contender: one process, one database
// user and one fault proxy per candidate, so that a fault hits the leader
// alone.
type arena struct {
	srv       *mysqltest.Server
	contender string
	db        string
	tm        timing
	admin     *sql.DB // root, on the arena's database
	self      string  // this binary, re-executed as a candidate

	mu      sync.Mutex
	procs   map[string]*proc
	events  chan event
	pending []event
	log     []event // every event, for the checker's report
}

type proc struct {
	id    string
	user  string
	proxy *faultproxy.Proxy
	cmd   *exec.Cmd
}

func newArena(ctx context.Context, srv *mysqltest.Server, contender string, tm timing, n int) (*arena, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	a := &arena{srv: srv, contender: contender, tm: tm, self: self,
		db: "bench_" + strings.ReplaceAll(contender, "-", "_"), procs: map[string]*proc{}, events: make(chan event, 1<<16)}
	root, err := sql.Open("mysql", srv.DSN(""))
	if err != nil {
		return nil, err
	}
	defer root.Close()
	for _, stmt := range []string{
		"DROP DATABASE IF EXISTS " + a.db, "CREATE DATABASE " + a.db,
		"CREATE TABLE " + a.db + ".bench_writes (id BIGINT AUTO_INCREMENT PRIMARY KEY, holder VARCHAR(64) NOT NULL, " +
			"term VARCHAR(96) NOT NULL, token BIGINT UNSIGNED NOT NULL, at DATETIME(6) NOT NULL)",
		"CREATE TABLE " + a.db + ".bench_counter (n BIGINT NOT NULL)",
		"INSERT INTO " + a.db + ".bench_counter VALUES (0)",
	} {
		if _, err := root.ExecContext(ctx, stmt); err != nil {
			return nil, fmt.Errorf("setting up %s: %w", a.db, err)
		}
	}
	if a.admin, err = sql.Open("mysql", srv.DSN(a.db)); err != nil {
		return nil, err
	}
	for i := range n {
		if err := a.spawn(ctx, fmt.Sprintf("c%d", i)); err != nil {
			a.close()
			return nil, err
		}
	}
	return a, nil
}

// spawn starts candidate id (again, after a kill, under the same user).
func (a *arena) spawn(ctx context.Context, id string) error {
	a.mu.Lock()
	p := a.procs[id]
	a.mu.Unlock()
	if p == nil {
		p = &proc{id: id, user: fmt.Sprintf("%s_%s", strings.ReplaceAll(a.contender, "-", ""), id)}
		for _, stmt := range []string{
			"DROP USER IF EXISTS '" + p.user + "'@'%'",
			"CREATE USER '" + p.user + "'@'%' IDENTIFIED BY 'bench'",
			"GRANT ALL ON " + a.db + ".* TO '" + p.user + "'@'%'",
		} {
			if _, err := a.admin.ExecContext(ctx, stmt); err != nil {
				return fmt.Errorf("creating user %s: %w", p.user, err)
			}
		}
		proxy, err := faultproxy.Start(a.srv.Addr())
		if err != nil {
			return err
		}
		p.proxy = proxy
	}
	cfg := a.srv.Config(a.db)
	cfg.User, cfg.Passwd, cfg.Addr = p.user, "bench", p.proxy.Addr()
	cmd := exec.Command(a.self, "candidate", "-contender", a.contender, "-id", id, "-dsn", cfg.FormatDSN(),
		"-interval", a.tm.Interval.String(), "-lease", a.tm.Lease.String(), "-margin", a.tm.Margin.String(),
		"-write-every", a.tm.WriteEvery.String(), "-check", a.tm.Check.String())
	// One OS thread per candidate keeps a thousand candidate processes cheap.
	cmd.Env = append(os.Environ(), "GOMAXPROCS=1")
	cmd.Stderr = io.Discard
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	if err := cmd.Start(); err != nil {
		return err
	}
	p.cmd = cmd
	a.mu.Lock()
	a.procs[id] = p
	a.mu.Unlock()
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			var e event
			if json.Unmarshal(sc.Bytes(), &e) == nil {
				a.events <- e
			}
		}
	}()
	return nil
}

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

// drain moves every event already received into pending.
func (a *arena) drain() {
	for {
		select {
		case e := <-a.events:
			a.log = append(a.log, e)
			a.pending = append(a.pending, e)
		default:
			return
		}
	}
}

// leader waits until some candidate leads and has written, and returns its
// start event.
func (a *arena) leader(limit time.Duration) (event, bool) {
	deadline := time.Now().Add(limit)
	a.drain()
	// The newest start whose term has not ended.
	var cur *event
	for {
		ended := map[string]bool{}
		for _, e := range a.log {
			if e.Ev == "end" {
				ended[e.Term] = true
			}
		}
		cur = nil
		for i := len(a.log) - 1; i >= 0; i-- {
			if e := a.log[i]; e.Ev == "start" && !ended[e.Term] {
				cur = &a.log[i]
				break
			}
		}
		if cur != nil {
			for _, e := range a.log {
				if e.Ev == "write" && e.OK && e.Term == cur.Term && time.Since(time.Unix(0, cur.At)) > 200*time.Millisecond {
					return *cur, true
				}
			}
		}
		if time.Now().After(deadline) {
			return event{}, false
		}
		a.next(func(event) bool { return false }, 50*time.Millisecond)
	}
}

// trial is the outcome of one injected fault.
type trial struct {
	Contender string  `json:"contender"`
	Fault     string  `json:"fault"`
	FailoverS float64 `json:"failover_s"`       // to the next acting leader; -1: none within the limit
	KnewS     float64 `json:"old_knew_s"`       // until the old leader's term ended; -1: never seen
	NoLeader  bool    `json:"no_leader_before"` // nobody led within the limit before the fault
}

// ready waits until every candidate process has said it is ready (before
// that, the signals of signalAll would end it).
func (a *arena) ready(limit time.Duration) bool {
	deadline := time.Now().Add(limit)
	want := len(a.all())
	for {
		a.drain()
		seen := map[string]bool{}
		for _, e := range a.log {
			if e.Ev == "ready" {
				seen[e.ID] = true
			}
		}
		if len(seen) >= want {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		a.next(func(event) bool { return false }, 50*time.Millisecond)
	}
}

// inject applies fault to the current leader, waits for the next acting
// leader, heals, and returns the trial.
func (a *arena) inject(ctx context.Context, fault string, limit time.Duration) (trial, error) {
	tr := trial{Contender: a.contender, Fault: fault, FailoverS: -1, KnewS: -1}
	old, ok := a.leader(limit)
	if !ok {
		// A contender that left a zombie leader, or none, after the last
		// fault: there is nobody to fault; say so and go on.
		tr.NoLeader = true
		return tr, nil
	}
	p := a.proc(old.ID)
	t0 := time.Now()
	switch fault {
	case fSIGKILL:
		p.cmd.Process.Kill()
	case fSIGTERM:
		p.cmd.Process.Signal(syscall.SIGTERM)
	case fSIGSTOP:
		p.cmd.Process.Signal(syscall.SIGSTOP)
	case fBlackH:
		p.proxy.Blackhole()
	case fReset:
		p.proxy.Reset()
	case fKillConn:
		rows, err := a.admin.QueryContext(ctx, "SELECT id FROM information_schema.PROCESSLIST WHERE user = ?", p.user)
		if err != nil {
			return tr, err
		}
		var ids []int64
		for rows.Next() {
			var id int64
			rows.Scan(&id)
			ids = append(ids, id)
		}
		rows.Close()
		for _, id := range ids {
			a.admin.ExecContext(ctx, fmt.Sprintf("KILL CONNECTION %d", id))
		}
	case fRestart:
		if err := a.srv.Kill(); err != nil {
			return tr, err
		}
		if err := a.srv.Boot(ctx); err != nil {
			return tr, err
		}
	}
	newTerm := func(e event) bool { return e.Ev == "start" && e.Term != old.Term && e.At > t0.UnixNano() }
	if e, ok := a.next(newTerm, limit); ok {
		tr.FailoverS = time.Unix(0, e.At).Sub(t0).Seconds()
	}
	// Heal, then give the old leader time to learn that it lost.
	switch fault {
	case fSIGKILL, fSIGTERM:
		p.cmd.Wait()
		if err := a.spawn(ctx, old.ID); err != nil {
			return tr, err
		}
	case fSIGSTOP:
		p.cmd.Process.Signal(syscall.SIGCONT)
	case fBlackH:
		p.proxy.Restore()
	}
	if fault != fSIGKILL {
		if e, ok := a.next(func(e event) bool { return e.Ev == "end" && e.Term == old.Term }, min(limit, 3*a.tm.Interval+5*time.Second)); ok {
			tr.KnewS = time.Unix(0, e.At).Sub(t0).Seconds()
		}
	}
	return tr, nil
}

// stopAll ends every candidate gracefully, then for sure.
func (a *arena) stopAll() {
	procs := a.all()
	for _, p := range procs {
		p.cmd.Process.Signal(syscall.SIGCONT)
		p.cmd.Process.Signal(syscall.SIGTERM)
	}
	for _, p := range procs {
		done := make(chan struct{})
		go func() { p.cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			p.cmd.Process.Kill()
			<-done
		}
	}
	time.Sleep(100 * time.Millisecond)
	a.drain()
}

func (a *arena) close() {
	a.stopAll()
	a.mu.Lock()
	for _, p := range a.procs {
		p.proxy.Close()
	}
	a.mu.Unlock()
	a.admin.Close()
}

//go:build linux

package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/sqlelect/election"
)

// The tests of electctl run start it as processes of their own (the test
// binary as electctl, see electctlCmd), against the real server, with the
// test binary as the command too (childMain). They assert safety and exit
// codes, never how long anything took; the windows they measure are
// logged (go test -v -run TestRun).

func init() { runChild = childMain }

// childEvent is what a command records, one JSON line each, in DIR/log.
type childEvent struct {
	Ev    string `json:"ev"` // start, signal, env, overlap, overlap-over
	Token uint64 `json:"token"`
	ID    string `json:"id"` // the candidate's identity
	PID   int    `json:"pid"`
	What  string `json:"what,omitempty"`
	At    int64  `json:"at"` // wall clock, Unix ns: all processes share the machine's
}

func (e childEvent) time() time.Time { return time.Unix(0, e.At) }

// held keeps the commands' lock files open (and locked) for their lives.
var held []*os.File

// childMain is the command that the tests have electctl run, with args:
//
//	serve CODE   run until SIGTERM, SIGINT, SIGHUP or SIGQUIT, then exit CODE;
//	             SIGUSR1 is recorded and ignored
//	stubborn     ignore SIGTERM, SIGINT and SIGHUP: only SIGKILL ends it
//	exit CODE    exit CODE at once
//	killself     die of SIGKILL
//	env          record the ELECTION_ variables, exit 0
//
// Every command holds DIR/lock (flock) for its whole life and takes it
// without waiting when it starts: if it cannot, another command still
// lives, and it records an overlap. The kernel releases the lock when the
// process is gone, whatever killed it. It also holds DIR/life-TOKEN, on
// which the tests wait to learn when it died.
func childMain(dir string, args []string) (int, bool) {
	token, _ := strconv.ParseUint(os.Getenv(envToken), 10, 64)
	if token == 0 || len(args) == 0 || args[0] == watchdogCommand || args[0] == gateCommand {
		return 0, false // electctl and its own processes, which inherit asChild too
	}
	id := os.Getenv(envIdentity)
	log, err := os.OpenFile(filepath.Join(dir, "log"), os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		panic(err)
	}
	note := func(ev, what string) {
		b, _ := json.Marshal(childEvent{Ev: ev, Token: token, ID: id, PID: os.Getpid(), What: what, At: time.Now().UnixNano()})
		log.Write(append(b, '\n')) // one write: O_APPEND keeps lines whole
	}
	lock, err := os.OpenFile(filepath.Join(dir, "lock"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		panic(err)
	}
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		note("overlap", err.Error())
		syscall.Flock(int(lock.Fd()), syscall.LOCK_EX)
		note("overlap-over", "")
	}
	life, err := os.OpenFile(filepath.Join(dir, fmt.Sprintf("life-%d", token)), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		panic(err)
	}
	syscall.Flock(int(life.Fd()), syscall.LOCK_EX)
	held = append(held, lock, life)
	// Signals are caught before "start" is recorded: a test signals only
	// once it has read it.
	sigs := make(chan os.Signal, 8)
	switch args[0] {
	case "serve":
		signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP, syscall.SIGQUIT, syscall.SIGUSR1)
	case "stubborn":
		signal.Ignore(syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP)
	}
	note("start", strings.Join(args, " "))
	code := func() int {
		if len(args) < 2 {
			return 0
		}
		n, _ := strconv.Atoi(args[1])
		return n
	}
	switch args[0] {
	case "serve":
		for sig := range sigs {
			note("signal", signalName(sig.(syscall.Signal)))
			if sig != syscall.SIGUSR1 {
				return code(), true
			}
		}
	case "stubborn":
		for {
			time.Sleep(time.Hour)
		}
	case "exit":
		return code(), true
	case "killself":
		syscall.Kill(os.Getpid(), syscall.SIGKILL)
		time.Sleep(time.Hour)
	case "env":
		var vars []string
		for _, kv := range os.Environ() {
			if strings.HasPrefix(kv, "ELECTION_") && !strings.HasPrefix(kv, envDSN+"=") {
				vars = append(vars, kv)
			}
		}
		note("env", strings.Join(vars, " "))
		return 0, true
	}
	return 99, true
}

// childLog reads what the commands recorded in dir.
func childLog(t *testing.T, dir string) []childEvent {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, "log"))
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	var evs []childEvent
	// A line being written may be read in part: only whole lines count.
	lines := strings.Split(string(b), "\n")
	for _, line := range lines[:len(lines)-1] {
		var ev childEvent
		if err := json.Unmarshal([]byte(line), &ev); err != nil {
			t.Fatalf("%q: %v", line, err)
		}
		evs = append(evs, ev)
	}
	return evs
}

// events returns the events of kind ev in dir, once there are at least n,
// waiting up to 30s (a bound against hanging, not an assertion).
func events(t *testing.T, dir, ev string, n int) []childEvent {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		var got []childEvent
		for _, e := range childLog(t, dir) {
			if e.Ev == ev {
				got = append(got, e)
			}
		}
		if len(got) >= n {
			return got
		}
		if time.Now().After(deadline) {
			t.Fatalf("fewer than %d %q events within 30s: %+v", n, ev, childLog(t, dir))
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// noOverlap fails the test if a command started while another lived.
func noOverlap(t *testing.T, dir string) {
	t.Helper()
	for _, e := range childLog(t, dir) {
		if strings.HasPrefix(e.Ev, "overlap") {
			t.Errorf("the command of term %d (%s) started while another one lived: %+v", e.Token, e.ID, e)
		}
	}
}

// watchDeath returns when the command of term token is gone: it waits for
// the command's life lock, which the kernel releases as the process ends.
func watchDeath(t *testing.T, dir string, token uint64) <-chan time.Time {
	t.Helper()
	f, err := os.Open(filepath.Join(dir, fmt.Sprintf("life-%d", token)))
	if err != nil {
		t.Fatal(err)
	}
	died := make(chan time.Time, 1)
	go func() {
		defer f.Close()
		syscall.Flock(int(f.Fd()), syscall.LOCK_EX)
		died <- time.Now()
	}()
	return died
}

// receive waits up to 30s for a time on ch.
func receive(t *testing.T, ch <-chan time.Time, what string) time.Time {
	t.Helper()
	select {
	case at := <-ch:
		return at
	case <-time.After(30 * time.Second):
		t.Fatalf("%s: not within 30s", what)
		return time.Time{}
	}
}

// self is the test binary, which is the command when asChild is set.
func self(t *testing.T) string {
	t.Helper()
	bin, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	return bin
}

// fastRun is the timing the process tests give electctl run: W = 2s, and
// a grace of min(1s, 900ms) − 250ms = 650ms.
var fastRun = []string{"--interval", "100ms", "--lease", "1s", "--margin", "1s"}

// runProc is one electctl run process.
type runProc struct {
	id   string
	cmd  *exec.Cmd
	mu   sync.Mutex
	err  bytes.Buffer // its stderr
	done chan struct{}
}

func (p *runProc) Write(b []byte) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.err.Write(b)
}

func (p *runProc) stderr() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.err.String()
}

func (p *runProc) signal(t *testing.T, sig syscall.Signal) {
	t.Helper()
	if err := p.cmd.Process.Signal(sig); err != nil {
		t.Fatalf("signal %v to %s: %v", sig, p.id, err)
	}
}

// wait returns the exit code of p, 128+N if signal N killed it.
func (p *runProc) wait(t *testing.T) int {
	t.Helper()
	select {
	case <-p.done:
	case <-time.After(30 * time.Second):
		t.Fatalf("electctl run %s did not exit within 30s:\n%s", p.id, p.stderr())
	}
	if ws, ok := p.cmd.ProcessState.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return 128 + int(ws.Signal())
	}
	return p.cmd.ProcessState.ExitCode()
}

// startRun starts electctl run as candidate id on the cluster's database,
// with the fast timing, its commands recording into dir; args are run's
// flags, NAME, -- and the command.
func (c *cluster) startRun(t *testing.T, dir, id string, args ...string) *runProc {
	t.Helper()
	full := append(append([]string{"run", "--identity", id}, fastRun...), args...)
	p := &runProc{id: id, done: make(chan struct{})}
	p.cmd = electctlCmd(t, context.Background(), []string{envDSN + "=" + c.dsn, asChild + "=" + dir}, full...)
	p.cmd.Stderr = p
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		p.cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		// SIGKILL: its watchdog then kills what it ran.
		p.cmd.Process.Signal(syscall.SIGCONT)
		p.cmd.Process.Kill()
		<-p.done
		if t.Failed() {
			t.Logf("electctl run %s:\n%s", id, p.stderr())
		}
	})
	return p
}

func TestRunCommandsNeverOverlap(t *testing.T) {
	c := newCluster(t)
	dir := t.TempDir()
	serve := []string{"--again", "jobs", "--", self(t), "serve", "0"}
	procs := map[string]*runProc{}
	for _, id := range []string{"a", "b"} {
		procs[id] = c.startRun(t, dir, id, serve...)
	}

	// The leader's electctl is SIGKILLed: the kernel kills its command
	// (parent-death signal) as it closes electctl's session.
	first := events(t, dir, "start", 1)[0]
	died := watchDeath(t, dir, first.Token)
	killed := time.Now()
	procs[first.ID].signal(t, syscall.SIGKILL)
	second := events(t, dir, "start", 2)[1]
	dead1 := receive(t, died, "the command of the SIGKILLed electctl ends")
	if second.ID == first.ID || second.Token <= first.Token {
		t.Fatalf("after the SIGKILL of %s: %+v", first.ID, second)
	}

	// The next leader's electctl is SIGSTOPped: it can neither renew nor
	// stop its command; its watchdog kills the command before the server
	// drops the session (W = L + S) and a third candidate leads.
	procs["c"] = c.startRun(t, dir, "c", serve...)
	waitCandidates(t, c, "jobs", 2)
	died = watchDeath(t, dir, second.Token)
	stopped := time.Now()
	procs[second.ID].signal(t, syscall.SIGSTOP)
	third := events(t, dir, "start", 3)[2]
	dead2 := receive(t, died, "the command of the SIGSTOPped electctl ends")
	if third.ID != "c" || third.Token <= second.Token {
		t.Fatalf("after the SIGSTOP of %s: %+v", second.ID, third)
	}
	// Resumed, it finds its term over and its command killed by the
	// watchdog, says so, and campaigns again (--again).
	procs[second.ID].signal(t, syscall.SIGCONT)
	for deadline := time.Now().Add(30 * time.Second); !strings.Contains(procs[second.ID].stderr(), "watchdog=killed"); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the resumed electctl did not report its watchdog's kill:\n%s", procs[second.ID].stderr())
		}
	}

	// SIGTERM: the leader's command exits 0 on it, and so does its
	// electctl; the waiting one exits 128+15 and starts nothing.
	procs["c"].signal(t, syscall.SIGTERM)
	procs[second.ID].signal(t, syscall.SIGTERM)
	if code := procs["c"].wait(t); code != 0 {
		t.Errorf("the leader's electctl exited %d after SIGTERM, want its command's 0:\n%s", code, procs["c"].stderr())
	}
	if code := procs[second.ID].wait(t); code != 128+15 {
		t.Errorf("the waiting electctl exited %d after SIGTERM, want 143:\n%s", code, procs[second.ID].stderr())
	}

	noOverlap(t, dir)
	if starts := events(t, dir, "start", 3); len(starts) != 3 {
		t.Errorf("%d commands started, want 3: %+v", len(starts), starts)
	}
	if !dead1.Before(second.time()) || !dead2.Before(third.time()) {
		t.Errorf("a command started before its predecessor was gone: dead %v, next started %v; dead %v, next started %v",
			dead1, second.time(), dead2, third.time())
	}
	t.Logf("SIGKILL of the leader's electctl: its command was gone after %v, the next command started after %v (%v later)",
		dead1.Sub(killed), second.time().Sub(killed), second.time().Sub(dead1))
	t.Logf("SIGSTOP of the leader's electctl: its watchdog had killed its command after %v, the next command started after %v (%v later)",
		dead2.Sub(stopped), third.time().Sub(stopped), third.time().Sub(dead2))
}

func TestRunExitCodes(t *testing.T) {
	c := newCluster(t)
	dir := t.TempDir()
	env := []string{envDSN + "=" + c.dsn, asChild + "=" + dir}
	bin := self(t)
	for _, tc := range []struct {
		args []string
		code int
		want string // in stderr
	}{
		{[]string{"codes", "--", bin, "exit", "7"}, 7, "exit=7"},
		{[]string{"codes", "--", bin, "killself"}, 128 + 9, "signal=SIGKILL"},
		{[]string{"--shell", "codes", "--", "exit", "3"}, 3, "exit=3"},
		{[]string{"--identity", "me", "codes", "--", bin, "env"}, 0, "identity=me"},
		{[]string{"missing", "--", filepath.Join(dir, "nosuch")}, 127, "no such file"},
		{[]string{"missing", "--", dir}, 126, "is a directory"},
		{[]string{"missing", "--", "nosuch-command-here"}, 127, "not found in $PATH: give its path"},
	} {
		code, out, errOut := electctl(t, env, append([]string{"run"}, tc.args...)...)
		if code != tc.code || !strings.Contains(errOut, tc.want) {
			t.Errorf("run %q: exit %d, want %d and %q in:\n%s%s", tc.args, code, tc.code, tc.want, out, errOut)
		}
	}
	// A command that exits ends its term as resigned, in electctl run's
	// line as in the history.
	code, _, errOut := electctl(t, env, "run", "resigns", "--", bin, "exit", "0")
	_, hist, _ := c.ctl("history", "resigns")
	if code != 0 || !strings.Contains(errOut, "reason=resigned ") || !strings.Contains(hist, "resigned") {
		t.Errorf("a command that exited: exit %d, its term's end in electctl run's line and in the history:\n%s%s", code, errOut, hist)
	}
	// A command that cannot run is found out before campaigning.
	if code, _, errOut := c.ctl("history", "missing"); code != exitNotFound {
		t.Errorf("a command not found made a term: history exit %d\n%s", code, errOut)
	}
	envs := events(t, dir, "env", 1)
	vars := " " + envs[0].What + " "
	for _, kv := range []string{
		envName + "=codes", envIdentity + "=me", fmt.Sprintf("%s=%d", envToken, envs[0].Token),
		envInterval + "=1s", envLease + "=5s", envMargin + "=1s", envGrace + "=750ms",
	} {
		if !strings.Contains(vars, " "+kv+" ") {
			t.Errorf("the command's environment lacks %s: %s", kv, vars)
		}
	}
}

func TestRunNonblockConflict(t *testing.T) {
	c := newCluster(t)
	dir := t.TempDir()
	a := c.startRun(t, dir, "a", "jobs", "--", self(t), "serve", "0")
	first := events(t, dir, "start", 1)[0]
	env := []string{envDSN + "=" + c.dsn, asChild + "=" + dir}
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"--nonblock"}, 1, fmt.Sprintf("a leads (token %d); not waiting (--nonblock)", first.Token)},
		{[]string{"--nonblock", "--conflict-exit-code", "75"}, 75, "a leads"},
		{[]string{"--timeout", "300ms", "--conflict-exit-code", "75"}, 75, "after --timeout 300ms"},
	} {
		args := append(append([]string{"run"}, tc.args...), "jobs", "--", self(t), "exit", "9")
		code, out, errOut := electctl(t, env, args...)
		if code != tc.code || !strings.Contains(errOut, tc.want) {
			t.Errorf("%q: exit %d, want %d and %q in:\n%s%s", args, code, tc.code, tc.want, out, errOut)
		}
	}
	a.signal(t, syscall.SIGTERM)
	if code := a.wait(t); code != 0 {
		t.Errorf("the leader exited %d after SIGTERM, want 0", code)
	}
	if starts := events(t, dir, "start", 1); len(starts) != 1 || starts[0].ID != "a" {
		t.Errorf("a command ran that should not have: %+v", starts)
	}

	// --hold: the command has exited, yet its term is held, so that a
	// cron whose clock runs behind does not run it again.
	h := c.startRun(t, dir, "h", "--hold", "1h", "jobs", "--", self(t), "exit", "6")
	hold := events(t, dir, "start", 2)[1]
	for deadline := time.Now().Add(30 * time.Second); !strings.Contains(h.stderr(), fmt.Sprintf("term %d ended", hold.Token)); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the command did not end:\n%s", h.stderr())
		}
	}
	args := []string{"run", "--nonblock", "jobs", "--", self(t), "exit", "9"}
	if code, out, errOut := electctl(t, env, args...); code != 1 || !strings.Contains(errOut, fmt.Sprintf("h leads (token %d)", hold.Token)) {
		t.Errorf("%q while the term is held: exit %d, want 1 and who leads in:\n%s%s", args, code, out, errOut)
	}
	h.signal(t, syscall.SIGTERM) // ends the hold; the exit code is still the command's
	if code := h.wait(t); code != 6 {
		t.Errorf("electctl --hold exited %d after SIGTERM, want its command's 6:\n%s", code, h.stderr())
	}
}

// --priority: when the leader's instance stops, the waiting candidate of
// the highest priority leads next, though an equal of the leader waited
// longer: a rolling deploy's new instance, started before the old stop.
func TestRunPriority(t *testing.T) {
	c := newCluster(t)
	dir := t.TempDir()
	a := c.startRun(t, dir, "a", "jobs", "--", self(t), "serve", "0")
	events(t, dir, "start", 1)
	c.startRun(t, dir, "b", "jobs", "--", self(t), "serve", "0")
	waitCandidates(t, c, "jobs", 2)
	c.startRun(t, dir, "new", "--priority", "1", "--candidate-version", "v2", "jobs", "--", self(t), "serve", "0")
	waitCandidates(t, c, "jobs", 3)
	_, out, _ := c.ctl("candidates", "jobs", "--json")
	var cands []candidateView
	if err := json.Unmarshal([]byte(out), &cands); err != nil || !slices.ContainsFunc(cands, func(k candidateView) bool {
		return k.Identity == "new" && k.Priority == 1 && k.Version == "v2"
	}) {
		t.Errorf("electctl candidates does not show new's priority and version (%v):\n%s", err, out)
	}
	a.signal(t, syscall.SIGTERM)
	if code := a.wait(t); code != 0 {
		t.Errorf("the leader exited %d after SIGTERM, want 0", code)
	}
	if next := events(t, dir, "start", 2)[1]; next.ID != "new" {
		t.Errorf("%s leads after a stopped, want new, of the higher priority", next.ID)
	}
}

func TestRunForwardsSignals(t *testing.T) {
	c := newCluster(t)
	dir := t.TempDir()
	a := c.startRun(t, dir, "a", "jobs", "--", self(t), "serve", "5")
	events(t, dir, "start", 1)
	b := c.startRun(t, dir, "b", "jobs", "--", self(t), "serve", "0")
	waitCandidates(t, c, "jobs", 2)

	// Waiting, electctl honours the signal: it exits, starting nothing.
	b.signal(t, syscall.SIGTERM)
	if code := b.wait(t); code != 128+15 || !strings.Contains(b.stderr(), "SIGTERM while waiting to lead: exiting without starting the command") {
		t.Errorf("the waiting candidate exited %d after SIGTERM, want 143:\n%s", code, b.stderr())
	}
	// Leading, it forwards them: SIGUSR1 leaves the command running,
	// SIGHUP ends it, and electctl exits with its code.
	a.signal(t, syscall.SIGUSR1)
	events(t, dir, "signal", 1)
	a.signal(t, syscall.SIGHUP)
	if code := a.wait(t); code != 5 {
		t.Errorf("electctl exited %d after forwarding SIGHUP, want its command's 5:\n%s", code, a.stderr())
	}
	var got []string
	for _, e := range childLog(t, dir) {
		switch {
		case e.ID == "b":
			t.Errorf("the candidate stopped while waiting started a command: %+v", e)
		case e.Ev == "signal":
			got = append(got, e.What)
		}
	}
	if strings.Join(got, " ") != "SIGUSR1 SIGHUP" {
		t.Errorf("the command received %q, want SIGUSR1 SIGHUP", got)
	}
}

func TestRunTermLostStopsCommand(t *testing.T) {
	c := newCluster(t)
	dir := t.TempDir()
	// A command that ignores SIGTERM is killed after the grace when its
	// leader is demoted, and is gone before the next leader's starts.
	a := c.startRun(t, dir, "a", "jobs", "--", self(t), "stubborn")
	first := events(t, dir, "start", 1)[0]
	b := c.startRun(t, dir, "b", "jobs", "--", self(t), "serve", "4")
	waitCandidates(t, c, "jobs", 2)
	died := watchDeath(t, dir, first.Token)
	if code, out, errOut := c.ctl("demote", "jobs"); code != exitOK {
		t.Fatalf("demote: %d\n%s%s", code, out, errOut)
	}
	if code := a.wait(t); code != 128+9 || !strings.Contains(a.stderr(), "reason=demoted") || !strings.Contains(a.stderr(), "sent=SIGTERM,SIGKILL") {
		t.Errorf("the demoted electctl exited %d, want 137 (its command killed after the grace):\n%s", code, a.stderr())
	}
	second := events(t, dir, "start", 2)[1]
	if dead := receive(t, died, "the demoted leader's command ends"); second.ID != "b" || !dead.Before(second.time()) {
		t.Errorf("the next command (%+v) started before the demoted one was gone (%v)", second, dead)
	}

	// The server ends the leader's session (a DBA's KILL): electctl learns
	// of it at its next keepalive and stops its command with SIGTERM.
	op, err := election.NewOperator(c.db, "jobs", election.Config{})
	if err != nil {
		t.Fatal(err)
	}
	rec, err := op.Leader(context.Background())
	if err != nil || rec.Identity != "b" {
		t.Fatalf("leader: %+v %v", rec, err)
	}
	if _, err := c.db.Exec(fmt.Sprintf("KILL CONNECTION %d", rec.ConnID)); err != nil {
		t.Fatal(err)
	}
	if code := b.wait(t); code != 4 || !strings.Contains(b.stderr(), "reason=session-lost") || !strings.Contains(b.stderr(), "sent=SIGTERM ") {
		t.Errorf("electctl whose session was killed exited %d, want its command's 4 after SIGTERM:\n%s", code, b.stderr())
	}
	if sigs := events(t, dir, "signal", 1); sigs[0].Token != second.Token || sigs[0].What != "SIGTERM" {
		t.Errorf("the command got %+v, want SIGTERM", sigs)
	}
	noOverlap(t, dir)
}

// Every refused invocation of run names the fix, and touches nothing: the
// DSN reaches a real, empty database, which stays empty.
func TestRunUsage(t *testing.T) {
	dbName := server.NewDatabase(t)
	defer assertNoTables(t, dbName, "a refused electctl run")
	for args, want := range map[string]string{
		"run jobs true":                                            "then -- and the command",
		"run jobs --":                                              "then -- and the command",
		"run -- true":                                              "then -- and the command",
		"run --grace 5s jobs -- true":                              "lower --grace or raise --margin to 6.667s and --lease to 7.667s",
		"run --grace 2s --lease 10s jobs -- true":                  "raise --margin to 2.667s",
		"run --grace 1s --margin 3s --lease 2s jobs -- x":          "raise --lease to 2.75s",
		"run --nonblock --timeout 1s jobs -- true":                 "give one of them",
		"run --nonblock --again jobs -- true":                      "give one of them",
		"run --margin 50ms jobs -- true":                           "--margin 50ms is below 100ms",
		"run --interval 500ms --lease 1s --margin 3s jobs -- true": "leaves no time to stop CMD",
		"run --conflict-exit-code 256 jobs -- true":                "not an exit code",
		"run --timeout -1s jobs -- true":                           "--timeout -1s is negative",
		"run --hold -1s jobs -- true":                              "--hold -1s is negative",
		"run --priority 2147483648 jobs -- true":                   "--priority 2147483648 is out of range",
	} {
		var out, errOut bytes.Buffer
		code := run(context.Background(), append([]string{"--dsn", server.DSN(dbName)}, strings.Fields(args)...), &out, &errOut)
		if code != exitUsage || !strings.Contains(errOut.String(), want) {
			t.Errorf("%s: exit %d, want %d and %q in:\n%s%s", args, code, exitUsage, want, out.String(), errOut.String())
		}
	}
	var out bytes.Buffer
	if code := run(context.Background(), []string{"help", "run"}, &out, &out); code != exitOK ||
		!strings.HasPrefix(out.String(), "usage: electctl run [flags] NAME -- CMD [ARG...]") || !strings.Contains(out.String(), "ELECTION_TOKEN") {
		t.Errorf("help run: %d\n%s", code, out.String())
	}
}

func TestRunBudget(t *testing.T) {
	if b := budgetFor(time.Second, 5*time.Second, time.Second); b != (budget{allowance: 250 * time.Millisecond, maxGrace: 750 * time.Millisecond,
		watchdog: 875 * time.Millisecond, beat: 62500 * time.Microsecond}) {
		t.Errorf("default timing: %+v", b)
	}
	// The fix an error names must fit the grace that was refused.
	for _, tc := range []struct{ grace, interval, lease, margin time.Duration }{
		{5 * time.Second, time.Second, 5 * time.Second, time.Second},
		{time.Second, 100 * time.Millisecond, time.Second, time.Second},
		{10 * time.Second, time.Second, 60 * time.Second, 2 * time.Second},
		{time.Second, time.Second, 2 * time.Second, 3 * time.Second},
	} {
		msg := budgetFor(tc.interval, tc.lease, tc.margin).graceTooLong(tc.grace, tc.interval, tc.lease, tc.margin)
		lease, margin := tc.lease, tc.margin
		if _, v, ok := strings.Cut(msg, "--margin to "); ok {
			margin, _ = time.ParseDuration(strings.Fields(v)[0])
		}
		if _, v, ok := strings.Cut(msg, "--lease to "); ok {
			lease, _ = time.ParseDuration(strings.Fields(v)[0])
		}
		if b := budgetFor(tc.interval, lease, margin); b.maxGrace < tc.grace {
			t.Errorf("%+v: the fix (--lease %v --margin %v) allows only %v:\n%s", tc, lease, margin, b.maxGrace, msg)
		}
	}
}

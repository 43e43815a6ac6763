//go:build linux

package main

// electctl run NAME -- CMD [ARG...]: campaign for NAME and run CMD only
// while this process leads, the shape of flock(1) and consul lock. Unlike
// etcdctl lock, which leaves its child running when the lock is lost, the
// child is stopped when the term ends, and is gone before another candidate
// can lead, within the timing contract:
//
//   - The term's context is cancelled when its local lease ends, and the next
//     leader cannot start before L + S after the last confirmed renewal,
//     that is S after that cancellation (docs/protocol.md). A demoted
//     leader keeps the lock until it resigns, or at the latest until its
//     lease ends, at least L − I after the demotion. So on the term's end
//     the child's process group gets SIGTERM, then SIGKILL after a grace
//     that ends an allowance A = S/4 before the smaller of those, which
//     leaves A for noticing the end, delivering the signals and the
//     leader's clock running slow: grace ≤ min(S, L − I) − A.
//   - electctl SIGKILLed: the child was started with the parent-death
//     signal SIGKILL, so the kernel kills it as electctl dies, in the same
//     exit that closes electctl's session; the next leader needs that close
//     to reach the server, a new term (several statements) and a child of
//     its own (a fork and two execs) first. The watchdog below, woken by
//     the same exit, kills the rest of the child's process group.
//   - electctl SIGSTOPped (or frozen by anything that stops its threads): it
//     can neither renew nor stop its child, and the server drops its session
//     W = ⌈L + S⌉ after its last keepalive, after which another candidate
//     leads. A stopped process cannot act, so a second process does: the
//     watchdog (watchdog.go), electctl started again in a process group of
//     its own, which SIGKILLs the child's process group unless electctl
//     renews a deadline in time. electctl renews it every A/4 with its
//     monotonic clock's time plus S − A/2, and only while its term's lease
//     is valid: the lease then ends after that time, so the next leader
//     starts more than S after it, and the watchdog has killed the child
//     A/2 before. The child runs only once the watchdog has armed that
//     deadline (it starts through a gate, see start). If the watchdog
//     dies, electctl stops the command and exits 1: it could no longer be
//     stopped in time if electctl froze.
//
// Not covered: a watchdog stopped or killed together with electctl (a
// SIGSTOP to both, a cgroup freeze, a paused VM: nothing on the host can
// act then), descendants that leave the child's process group (setsid, a
// process group of their own, a daemon that double-forks), and a child
// the kernel cannot kill at once (in uninterruptible sleep: it dies when
// that ends). When the server ends the leader's session (a KILL, a restart,
// a proxy reset) the next leader starts at once, while this one learns of
// it at its next keepalive, within I: that window is what the term's
// fencing token, in the child's environment, is for.

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"log/slog"
	"math"
	"os"
	"os/exec"
	"os/signal"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/cenkalti/backoff/v4"
	"github.com/go-sql-driver/mysql"

	"github.com/sqlelect/election"
)

// runOptions are run's flags and its command.
type runOptions struct {
	nonblock, again, shell bool
	grace                  time.Duration
	hold                   time.Duration // lead at least this long after the term began
	lease, margin          time.Duration
	identity, version      string
	priority               int
	conflict               int      // exit code when another candidate leads
	argv                   []string // the command and its arguments, after --
	dashed                 bool     // a -- was given
}

// runHelp follows the flags in electctl help run.
const runHelp = `
CMD runs (exec'd, no shell unless --shell) only while this process leads NAME,
in a process group of its own, with stdin, stdout and stderr passed through,
and with the term in its environment:
  ELECTION_NAME      the election
  ELECTION_TOKEN     the term's fencing token: send it with writes, check it with Fence
  ELECTION_IDENTITY  this candidate (--identity)
  ELECTION_INTERVAL, ELECTION_LEASE, ELECTION_MARGIN  the timing (--interval, --lease, --margin)
  ELECTION_GRACE     how long CMD has after SIGTERM before SIGKILL (--grace)
When the term ends (lease expired, demoted, session lost) CMD's process group
gets SIGTERM, then SIGKILL after --grace. If electctl is killed the kernel
kills CMD; if it is stopped, its watchdog kills CMD's group before another
candidate can lead. SIGINT, SIGTERM, SIGHUP and SIGQUIT are forwarded to CMD's
group while it runs, and end electctl (no further CMD, no re-campaign) once it
has exited; before CMD runs they end the wait. SIGUSR1 and SIGUSR2 are
forwarded, and ignored while waiting; one ignored at start (nohup) stays
ignored. One line on stderr when a term starts
its command, one when the command ends (reason, exit code, signals sent; with
--hold, how much longer the term is held).

exit codes: CMD's (128+N when a signal N killed it); before CMD ran:
--conflict-exit-code (1) another candidate leads (--nonblock, --timeout),
126 CMD cannot be run, 127 CMD not found, 128+N signal N ended the wait,
1 error, 2 usage, 4 the DSN's database not found, 5 refused (login, grants)
`

// The child's environment: the term it runs in.
const (
	envName     = "ELECTION_NAME"
	envToken    = "ELECTION_TOKEN"
	envIdentity = "ELECTION_IDENTITY"
	envInterval = "ELECTION_INTERVAL"
	envLease    = "ELECTION_LEASE"
	envMargin   = "ELECTION_MARGIN"
	envGrace    = "ELECTION_GRACE"
)

// Exit codes of run before its command ran, as a shell gives them.
const (
	exitCannotRun = 126
	exitNoCommand = 127
	exitSignal    = 128 // + the signal's number
)

// minMargin is the least --margin run accepts: the child's grace, the
// watchdog's deadline and its heartbeat are cut from it.
const minMargin = 100 * time.Millisecond

// selfExe starts electctl again, the very binary that runs (not what its
// path names now, which an upgrade may have replaced): the watchdog and
// the gate speak this binary's protocol.
const selfExe = "/proc/self/exe"

// runFlags defines run's flags into c.
func (c *cli) runFlags(fs *flag.FlagSet) {
	o := &c.run
	fs.DurationVar(&c.interval, "interval", election.DefaultInterval, "how often the leader renews its term (Config.Interval)")
	fs.DurationVar(&o.lease, "lease", election.DefaultLease, "how long the leader may act after a confirmed renewal (Config.Lease)")
	fs.DurationVar(&o.margin, "margin", election.DefaultMargin, "time between the lease's end and the earliest next leader (Config.Margin), at least "+minMargin.String()+"; CMD's --grace is cut from it")
	fs.DurationVar(&o.grace, "grace", 0, "time CMD has to exit after SIGTERM when the term ends, before SIGKILL; 0 given: SIGKILL at once\n(default and most: min(margin, lease−interval) − margin/4, 750ms with the default timing)")
	fs.StringVar(&o.identity, "identity", "", "this candidate's identity, for status and handover (default host-pid-random)")
	fs.IntVar(&o.priority, "priority", 0, "rank for leadership, higher first (Config.Priority): whenever a term ends, the live candidate of the highest\npriority leads next; for a rolling deploy, start the new instances with a higher one before stopping the old")
	fs.StringVar(&o.version, "candidate-version", "", "the version shown beside this candidate in electctl candidates (Config.Version), as v2")
	fs.BoolVar(&o.nonblock, "nonblock", false, "exit at once with --conflict-exit-code if another candidate leads")
	fs.DurationVar(&o.hold, "hold", 0, "after CMD exits, keep leading until this long after the term began, so that a later --nonblock (a cron\nwhose clock runs behind) finds it held, as TryRun's atLeast does")
	fs.BoolVar(&o.again, "again", false, "campaign again after CMD exits or the term ends, and run CMD again when leading; until a signal")
	fs.BoolVar(&o.shell, "shell", false, "run the words after -- as one script with sh -c")
	fs.IntVar(&o.conflict, "conflict-exit-code", 1, "exit code when another candidate leads (--nonblock, --timeout), 0 to 255")
}

// validateRun checks run's flags; it returns what is wrong, or "".
func (c *cli) validateRun(given map[string]bool) string {
	o := &c.run
	switch {
	case o.nonblock && given["timeout"]:
		return "--nonblock does not wait and --timeout bounds the wait: give one of them"
	case o.nonblock && o.again:
		return "--nonblock gives up when another candidate leads, --again waits to lead again: give one of them"
	case o.priority < math.MinInt32 || o.priority > math.MaxInt32:
		return fmt.Sprintf("--priority %d is out of range: give %d to %d", o.priority, math.MinInt32, math.MaxInt32)
	case o.conflict < 0 || o.conflict > 255:
		return fmt.Sprintf("--conflict-exit-code %d is not an exit code: give 0 to 255", o.conflict)
	case c.interval <= 0 || o.lease <= 0 || o.margin <= 0:
		return fmt.Sprintf("--interval %v, --lease %v and --margin %v must be positive; leave them out for the defaults %v, %v and %v",
			c.interval, o.lease, o.margin, election.DefaultInterval, election.DefaultLease, election.DefaultMargin)
	case o.margin < minMargin:
		return fmt.Sprintf("--margin %v is below %v: CMD's grace and the watchdog's deadline are cut from it; raise it", o.margin, minMargin)
	case o.hold < 0:
		return fmt.Sprintf("--hold %v is negative; give how long to keep leading after the term began, as 10m", o.hold)
	case o.grace < 0:
		return fmt.Sprintf("--grace %v is negative; give how long CMD has after SIGTERM, or 0 for SIGKILL at once", o.grace)
	}
	// The library checks the timings themselves (New); what it accepts may
	// still leave no time to stop a child.
	b := budgetFor(c.interval, o.lease, o.margin)
	if b.maxGrace <= 0 {
		return fmt.Sprintf("--lease %v leaves no time to stop CMD after a demotion: it must exceed --interval %v by more than --margin/4 (%v); raise --lease",
			o.lease, c.interval, b.allowance)
	}
	if !given["grace"] {
		o.grace = b.maxGrace
	} else if o.grace > b.maxGrace {
		return b.graceTooLong(o.grace, c.interval, o.lease, o.margin)
	}
	return ""
}

// budget is how run spends the timing contract when a term ends; see the
// top of this file.
type budget struct {
	allowance time.Duration // A = S/4: noticing the end, delivering signals, a slow clock
	maxGrace  time.Duration // min(S, L − I) − A: the longest SIGTERM-to-SIGKILL
	watchdog  time.Duration // S − A/2: how long a heartbeat keeps the watchdog from killing
	beat      time.Duration // A/4: how often electctl renews the watchdog's deadline
}

func budgetFor(interval, lease, margin time.Duration) budget {
	a := margin / 4
	return budget{allowance: a, maxGrace: min(margin, lease-interval) - a, watchdog: margin - a/2, beat: a / 4}
}

// graceTooLong says why grace does not fit and which timings would fit it.
func (b budget) graceTooLong(grace, interval, lease, margin time.Duration) string {
	// S − S/4 ≥ grace, and L − I − S/4 ≥ grace with that S.
	needMargin := max(margin, ceilMillis((grace*4+2)/3))
	needLease := max(lease, ceilMillis(grace+interval+needMargin/4))
	fix := fmt.Sprintf("--margin to %v", needMargin)
	switch {
	case needMargin == margin:
		fix = fmt.Sprintf("--lease to %v", needLease)
	case needLease != lease:
		fix += fmt.Sprintf(" and --lease to %v", needLease)
	}
	return fmt.Sprintf("--grace %v is too long for these timings: when a term ends CMD must be gone within --margin %v of the lease's end, "+
		"and within --lease − --interval %v of a demotion, less --margin/4 (%v) for noticing the end and delivering the signals, so --grace is at most %v; "+
		"lower --grace or raise %s", grace, margin, lease-interval, b.allowance, b.maxGrace, fix)
}

// ceilMillis rounds d up to a whole millisecond, for messages.
func ceilMillis(d time.Duration) time.Duration {
	return (d + time.Millisecond - 1).Truncate(time.Millisecond)
}

// runCommand is electctl run: it campaigns for name and runs the command
// while leading, and returns the exit code.
func (c *cli) runCommand(name string, dsn *mysql.Config) int {
	o := &c.run
	path, argv, err := o.command()
	if err != nil {
		// Before campaigning: a term won for a command that cannot run would
		// only keep the others waiting.
		fmt.Fprintf(c.errOut, "electctl run: %v\n", err)
		if errors.Is(err, exec.ErrNotFound) || errors.Is(err, fs.ErrNotExist) {
			return exitNoCommand
		}
		return exitCannotRun
	}
	cfg := election.Config{
		Interval: c.interval, Lease: o.lease, Margin: o.margin, Identity: o.identity, TablePrefix: c.prefix,
		Priority: int32(o.priority), Version: o.version,
		// The library's warnings (a campaign failed and is retried, a
		// keepalive failed); the terms get run's own lines.
		Logger: slog.New(slog.NewTextHandler(c.errOut, &slog.HandlerOptions{Level: slog.LevelWarn})),
	}
	e, err := election.New(c.db, name, cfg)
	if err != nil {
		return c.fail(err)
	}
	r := &runner{
		c: c, name: name, dsn: dsn, e: e, path: path, argv: argv,
		b: budgetFor(c.interval, o.lease, o.margin), stopping: make(chan struct{}),
	}
	return r.main()
}

// command resolves the command to run: its path and argv.
func (o *runOptions) command() (string, []string, error) {
	if o.shell {
		// One script, as consul lock and ssh join their words.
		return "/bin/sh", []string{"sh", "-c", strings.Join(o.argv, " ")}, nil
	}
	path, err := exec.LookPath(o.argv[0])
	if errors.Is(err, exec.ErrNotFound) {
		return "", nil, fmt.Errorf("%w: give its path, or --shell to run it with sh -c", err)
	}
	if err != nil {
		return "", nil, err
	}
	return path, o.argv, nil
}

// Why a wait (a Run or TryRun call) was cancelled.
var (
	errShutdown = errors.New("a signal ended the wait")
	errTimedOut = errors.New("--timeout passed")
	errDone     = errors.New("no further term")
	errWatchdog = errors.New("the watchdog is gone")
	errTermOver = errors.New("the term ended before the command started")
)

// runner is one electctl run: the election, the command, the watchdog, and
// what the signals and the terms did.
type runner struct {
	c    *cli
	name string
	dsn  *mysql.Config
	e    *election.Elector
	path string
	argv []string
	b    budget
	wd   *watchdog

	mu         sync.Mutex
	cancelWait context.CancelCauseFunc // ends the current wait: the ping, Run or TryRun
	child      *child                  // the command, while it runs
	shutdown   os.Signal               // the first signal that asked electctl to end
	stopping   chan struct{}           // closed with shutdown set
	timedOut   bool                    // --timeout passed before the first term
	led        bool                    // a command has run
	code       int                     // the last command's exit code
	ran        time.Duration           // how long it ran
	wdErr      error                   // why the watchdog is gone
}

// stopSignals end electctl; forwarded to the command while it runs.
var stopSignals = []os.Signal{syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT}

// main runs the whole command: the watchdog, the signals, the database, the
// campaigns; it returns the exit code.
func (r *runner) main() int {
	sigs := make(chan os.Signal, 16)
	for _, sig := range append(stopSignals, syscall.SIGUSR1, syscall.SIGUSR2) {
		// A signal electctl was started ignoring (nohup) stays ignored,
		// and so the command inherits it ignored too.
		if !signal.Ignored(sig) {
			signal.Notify(sigs, sig)
		}
	}
	defer signal.Stop(sigs)
	wd, err := startWatchdog()
	if err != nil {
		fmt.Fprintf(r.c.errOut, "electctl run: %v\n", err)
		return exitError
	}
	r.wd = wd
	defer wd.close()
	done := make(chan struct{})
	relayed := make(chan struct{})
	go func() {
		defer close(relayed)
		r.relay(sigs, done)
	}()
	defer func() {
		close(done)
		<-relayed
	}()
	// A log line written to a closed pipe must not kill electctl, and the
	// command with it: caught (not ignored, which the command would
	// inherit), the write fails instead.
	pipe := make(chan os.Signal, 1)
	signal.Notify(pipe, syscall.SIGPIPE)
	defer signal.Stop(pipe)
	if r.c.timeout > 0 {
		// --timeout bounds the wait for the first term, from the start, as
		// flock -w bounds the one wait it has.
		t := time.AfterFunc(r.c.timeout, func() {
			r.mu.Lock()
			if !r.led {
				r.timedOut = true
				r.cancelWaitLocked(errTimedOut)
			}
			r.mu.Unlock()
		})
		defer t.Stop()
	}
	if code, ok := r.reach(); !ok {
		return code
	}
	return r.campaign()
}

// relay acts on signals and on the watchdog's end until done: it forwards
// a signal to the command's process group while the command runs, and else
// ends the wait for a signal that stops electctl.
func (r *runner) relay(sigs <-chan os.Signal, done <-chan struct{}) {
	wdDead := r.wd.dead
	for {
		select {
		case <-done:
			return
		case <-wdDead:
			wdDead = nil
			r.mu.Lock()
			r.wdErr = r.wd.why()
			if r.child == nil && r.cancelWait != nil {
				r.cancelWait(errWatchdog)
			}
			r.mu.Unlock()
		case sig := <-sigs:
			r.mu.Lock()
			stops := sig != syscall.SIGUSR1 && sig != syscall.SIGUSR2
			if stops && r.shutdown == nil {
				r.shutdown = sig
				close(r.stopping)
			}
			switch {
			case r.child != nil:
				r.child.signal(sig.(syscall.Signal))
			case stops && r.cancelWait != nil:
				r.cancelWait(errShutdown)
			}
			r.mu.Unlock()
		}
	}
}

// reach pings the database, within --timeout if given (30s if not), or
// until a signal; ok is false if it failed, with the exit code.
func (r *runner) reach() (code int, ok bool) {
	var bound time.Duration
	if r.c.timeout == 0 {
		bound = 30 * time.Second
	}
	ctx, cancel := r.wait(bound)
	defer cancel()
	err := r.c.db.PingContext(ctx)
	if err == nil {
		return 0, true
	}
	if cause := context.Cause(ctx); errors.Is(cause, errTimedOut) {
		err = fmt.Errorf("no answer within --timeout %v", r.c.timeout)
	} else if code, ok := r.ended(ctx); ok {
		return code, false
	}
	if line, code, ok := r.c.refused(err); ok {
		fmt.Fprintf(r.c.errOut, "electctl: %s\n", line)
		return code, false
	}
	fmt.Fprintf(r.c.errOut, "electctl: cannot reach %s: %v\n", redact(r.dsn), err)
	return exitError, false
}

// wait starts a wait that relay can end, bounded by d if positive; the
// returned cancel must be called when it is over.
func (r *runner) wait(d time.Duration) (context.Context, func()) {
	ctx, cancel := context.WithCancelCause(context.Background())
	r.mu.Lock()
	r.cancelWait = cancel
	switch {
	case r.shutdown != nil:
		cancel(errShutdown)
	case r.wdErr != nil:
		cancel(errWatchdog)
	case r.timedOut:
		cancel(errTimedOut)
	}
	r.mu.Unlock()
	var timer *time.Timer
	if d > 0 {
		timer = time.AfterFunc(d, func() { cancel(context.DeadlineExceeded) })
	}
	return ctx, func() {
		if timer != nil {
			timer.Stop()
		}
		r.mu.Lock()
		r.cancelWait = nil
		r.mu.Unlock()
		cancel(nil)
	}
}

// ended gives the exit code for a wait that relay or a term ended; ok is
// false if ctx was not ended so.
func (r *runner) ended(ctx context.Context) (int, bool) {
	if ctx.Err() == nil {
		return 0, false
	}
	switch cause := context.Cause(ctx); {
	case errors.Is(cause, errShutdown):
		r.mu.Lock()
		sig := r.shutdown.(syscall.Signal)
		r.mu.Unlock()
		fmt.Fprintf(r.c.errOut, "electctl run: %s: %s while waiting to lead: exiting without starting the command\n", shown(r.name), signalName(sig))
		return exitSignal + int(sig), true
	case errors.Is(cause, errTimedOut):
		return r.conflict(fmt.Sprintf("gave up waiting after --timeout %v", r.c.timeout)), true
	case errors.Is(cause, errWatchdog):
		fmt.Fprintf(r.c.errOut, "electctl run: %s: %v; without it a stopped electctl could not stop the command, so electctl stops\n", shown(r.name), r.wd.why())
		return exitError, true
	case errors.Is(cause, errDone):
		r.mu.Lock()
		defer r.mu.Unlock()
		if r.wdErr != nil {
			fmt.Fprintf(r.c.errOut, "electctl run: %s: %v; the command was stopped, as a stopped electctl could no longer stop it\n", shown(r.name), r.wdErr)
			return exitError, true
		}
		return r.code, true
	}
	return 0, false
}

// campaign campaigns, runs the command in each term (see lead), and
// decides after each whether to go on; it returns the exit code.
func (r *runner) campaign() int {
	pause := backoff.NewExponentialBackOff()
	pause.InitialInterval, pause.MaxInterval, pause.MaxElapsedTime = r.c.interval, r.c.run.lease, 0
	for {
		ctx, cancel := r.wait(0)
		var err error
		if r.c.run.nonblock {
			err = r.e.TryRun(ctx, 0, r.lead)
		} else {
			err = r.e.Run(ctx, r.lead)
		}
		code, ended := r.ended(ctx)
		cancel()
		switch {
		case ended:
			return code
		case errors.Is(err, election.ErrHeld):
			return r.conflict("not waiting (--nonblock)")
		case err != nil:
			return r.c.fail(err)
		}
		// TryRun returned nil: the command exited while the term lasted,
		// and --again asks for another. (Run campaigns again by itself,
		// after a pause of its own.) Pause first, longer while commands keep
		// failing fast, so that a command that exits at once does not spin
		// and another candidate may take a turn.
		r.mu.Lock()
		ran := r.ran
		r.mu.Unlock()
		if ran > r.c.run.lease {
			pause.Reset()
		}
		select {
		case <-time.After(pause.NextBackOff()):
		case <-r.stopping:
		case <-r.wd.dead:
		}
	}
}

// cancelWaitLocked ends the current wait, if any; r.mu is held.
func (r *runner) cancelWaitLocked(cause error) {
	if r.cancelWait != nil {
		r.cancelWait(cause)
	}
}

// conflict reports who leads instead of this candidate, and returns
// --conflict-exit-code.
func (r *runner) conflict(what string) int {
	op, err := election.NewOperator(r.c.db, r.name, election.Config{TablePrefix: r.c.prefix})
	var rec election.Record
	if err == nil {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		rec, err = op.Leader(ctx)
		cancel()
	}
	who := fmt.Sprintf("%s leads (token %d)", shown(rec.Identity), rec.Token)
	switch {
	case errors.Is(err, election.ErrNoLeader):
		who = "nobody leads, yet this candidate could not (see the warnings above)"
	case err != nil:
		who = fmt.Sprintf("this candidate does not lead (who does cannot be read: %v)", err)
	}
	fmt.Fprintf(r.c.errOut, "electctl run: %s: %s; %s\n", shown(r.name), who, what)
	return r.c.run.conflict
}

// lead is Run's function: it runs the command in term t, stops it when the
// term ends, and logs a line when each begins and ends. It returns nil
// always: Run then resigns if the term lasts, and campaigns again (at once
// if the term was lost, after a pause if the command exited), unless lead
// ended the wait.
func (r *runner) lead(_ context.Context, t *election.Term) error {
	began := time.Now() // the term's start, near enough, for --hold
	r.mu.Lock()
	switch {
	case r.shutdown != nil:
		// No command once shutdown began: the signal came after the wait
		// was won but before the command started.
		r.cancelWaitLocked(errShutdown)
		r.mu.Unlock()
		return nil
	case r.timedOut:
		r.mu.Unlock()
		return nil
	case r.wdErr != nil:
		r.cancelWaitLocked(errWatchdog)
		r.mu.Unlock()
		return nil
	}
	// Started with r.mu held: relay either finds no command (and ends the
	// wait) or this one (and forwards the signal to it).
	ch, err := r.start(t)
	if err != nil {
		r.mu.Unlock()
		return r.notStarted(t, err)
	}
	r.child, r.led = ch, true
	r.mu.Unlock()
	fmt.Fprintf(r.c.errOut, "electctl run: %s: term %d started: identity=%s pid=%d\n", shown(r.name), t.Token(), shown(r.e.Identity()), ch.pid)

	// The command exited while the term lasts (Run resigns it then), or
	// the term ended, or the watchdog is gone (Run's wait is ended).
	exited, wdGone := false, false
	select {
	case <-ch.done:
		// Killed by the watchdog while electctl was stopped, or the term
		// ended at that moment, if the term does not last.
		exited = t.IsLeader()
	case <-t.Done():
	case <-r.wd.dead:
		wdGone = true
	}
	reason := termReason(t)
	if exited || wdGone {
		reason = "resigned"
	}
	ch.end(r.c.run.grace)
	killed := ch.quit(r.wd)
	ran := ch.stopped.Sub(ch.started)
	var hold time.Duration
	if exited {
		hold = time.Until(began.Add(r.c.run.hold)).Round(time.Millisecond)
	}
	held := ""
	if hold > 0 {
		held = fmt.Sprintf(" hold=%v", hold)
	}
	fmt.Fprintf(r.c.errOut, "electctl run: %s: term %d ended: reason=%s pid=%d exit=%d%s ran=%v%s\n",
		shown(r.name), t.Token(), reason, ch.pid, ch.exitCode(), ch.how(killed), ran.Round(time.Millisecond), held)
	if hold > 0 {
		// The term is held (--hold) with the command still registered: a
		// signal now finds it gone, and electctl exits with its code.
		select {
		case <-time.After(hold):
		case <-t.Done():
		case <-r.stopping:
		case <-r.wd.dead:
		}
	}

	r.mu.Lock()
	if wdGone {
		r.wdErr = r.wd.why()
	}
	r.child = nil
	r.code, r.ran = ch.exitCode(), ran
	if !r.c.run.again || r.shutdown != nil || r.wdErr != nil {
		r.cancelWaitLocked(errDone)
	}
	r.mu.Unlock()
	return nil
}

// notStarted handles a command that could not be started in term t.
func (r *runner) notStarted(t *election.Term, err error) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	switch {
	case errors.Is(err, errTermOver):
		// Nothing ran: Run campaigns again, as the command is still to run.
		fmt.Fprintf(r.c.errOut, "electctl run: %s: term %d ended before the command started (%s)\n", shown(r.name), t.Token(), termReason(t))
	case r.wd.gone():
		r.wdErr = r.wd.why()
		r.cancelWaitLocked(errWatchdog)
	default:
		fmt.Fprintf(r.c.errOut, "electctl run: %s: term %d: cannot start %s: %v\n", shown(r.name), t.Token(), shown(r.path), err)
		r.code, r.led = exitCannotRun, true
		r.cancelWaitLocked(errDone)
	}
	return nil
}

// termReason names why term t ended, as electctl history does; a term
// whose lease ran out before its timer fired has not ended yet.
func termReason(t *election.Term) string {
	if reason := t.Reason(); reason != "" {
		return reason
	}
	return "lease-expired"
}

// env is the command's environment: electctl's, with the term's variables
// in place of any it inherited.
func (r *runner) env(t *election.Term) []string {
	o := &r.c.run
	vars := map[string]string{
		envName: r.name, envToken: strconv.FormatUint(t.Token(), 10), envIdentity: r.e.Identity(),
		envInterval: r.c.interval.String(), envLease: o.lease.String(), envMargin: o.margin.String(), envGrace: o.grace.String(),
	}
	var env []string
	for _, kv := range os.Environ() {
		if k, _, _ := strings.Cut(kv, "="); vars[k] == "" {
			env = append(env, kv)
		}
	}
	for _, k := range []string{envName, envToken, envIdentity, envInterval, envLease, envMargin, envGrace} {
		env = append(env, k+"="+vars[k])
	}
	return env
}

// child is the command while it runs: a process group led by its process.
type child struct {
	pid     int           // also its process group's id
	done    chan struct{} // closed once the process has been waited for
	state   *os.ProcessState
	started time.Time
	stopped time.Time     // when it was waited for; set before done is closed
	sent    []string      // the signals electctl sent it to stop it
	stop    chan struct{} // ends the heartbeat
	beating sync.WaitGroup
}

// start starts the command for term t. It goes through a gate, electctl
// itself (gateMain), which execs the command only once the watchdog has
// armed the kill of its process group: a command must never run unguarded,
// not even for the moment between fork and arming, in which electctl
// might be stopped.
//
// The parent-death signal is the forking *thread's*: Linux sends it when the
// thread that forked the child exits, not when the process does. The Go
// runtime ends a thread only when a goroutine locked to it exits, so the
// fork runs in a goroutine locked to its thread, which then waits for the
// child there: that thread lives until the child is gone, and the signal
// fires only when electctl dies.
func (r *runner) start(t *election.Term) (*child, error) {
	gateR, gateW, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	defer gateW.Close()
	cmd := exec.Command(selfExe)
	cmd.Args = append([]string{"electctl", gateCommand, r.path}, r.argv...)
	cmd.Env = r.env(t)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	cmd.ExtraFiles = []*os.File{gateR}
	// A process group of its own, so that signals reach all it starts, and
	// a terminal's Ctrl-C or Ctrl-Z reaches electctl, not the command.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	ch := &child{done: make(chan struct{}), stop: make(chan struct{})}
	started := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread() // after Wait: the child is gone
		if err := cmd.Start(); err != nil {
			started <- err
			return
		}
		started <- nil
		cmd.Wait()
		ch.state, ch.stopped = cmd.ProcessState, time.Now()
		close(ch.done)
	}()
	err = <-started
	gateR.Close()
	if err != nil {
		return nil, err
	}
	ch.pid = cmd.Process.Pid
	abandon := func(err error) (*child, error) {
		ch.signal(syscall.SIGKILL)
		<-ch.done
		r.wd.disarm(ch.pid)
		return nil, err
	}
	// The deadline counts from before the lease is checked: the lease is
	// then known to end after it. A watchdog that read the arm too late
	// (a loaded machine) armed nothing: arm again, while the term lasts.
	for {
		now := mono()
		if !t.IsLeader() {
			return abandon(errTermOver)
		}
		late, err := r.wd.arm(ch.pid, now+int64(r.b.watchdog))
		if err != nil {
			return abandon(err)
		}
		if !late {
			break
		}
	}
	if !t.IsLeader() {
		return abandon(errTermOver)
	}
	if _, err := gateW.Write([]byte{'1'}); err != nil {
		return abandon(fmt.Errorf("the gate did not take the go-ahead: %w", err))
	}
	ch.started = time.Now()
	ch.beating.Add(1)
	go r.heartbeat(t, ch)
	return ch, nil
}

// heartbeat renews the watchdog's deadline for ch every beat while t's
// lease is valid, until ch.stop is closed. It stops renewing when the term
// ends: electctl stops the command itself then, and if it is stopped before
// it has, the watchdog kills the command at the last deadline.
func (r *runner) heartbeat(t *election.Term, ch *child) {
	defer ch.beating.Done()
	tick := time.NewTicker(r.b.beat)
	defer tick.Stop()
	for {
		select {
		case <-ch.stop:
			return
		case <-tick.C:
		}
		now := mono()
		if !t.IsLeader() {
			return
		}
		r.wd.beat(ch.pid, now+int64(r.b.watchdog))
	}
}

// signal sends sig to the child's process group.
func (ch *child) signal(sig syscall.Signal) {
	syscall.Kill(-ch.pid, sig)
}

// exited reports whether the child's process has been waited for.
func (ch *child) exited() bool {
	select {
	case <-ch.done:
		return true
	default:
		return false
	}
}

// dead reports whether the child's process has ended, waited for or not (a
// zombie: killed by the watchdog while electctl was stopped, say).
func (ch *child) dead() bool {
	if ch.exited() {
		return true
	}
	ended, err := exitedNoWait(ch.pid)
	return err != nil || ended // ECHILD: just waited for
}

// groupAlive reports whether any process is left in the child's group (a
// process of another user that cannot be signalled counts).
func (ch *child) groupAlive() bool {
	err := syscall.Kill(-ch.pid, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}

// end makes sure the child and its process group are gone: SIGTERM (and
// SIGCONT, so that a stopped process can act on it), then SIGKILL to
// whatever is left after grace; it returns once the child has been waited
// for. The group's other processes have been sent SIGKILL, which they
// cannot outlive once the kernel runs them; zombies not yet reaped by
// their new parent do not act.
func (ch *child) end(grace time.Duration) {
	if ch.dead() {
		<-ch.done // about to be waited for: a dead process is signalled no more
	}
	if ch.exited() && !ch.groupAlive() {
		return
	}
	if grace > 0 {
		ch.sent = append(ch.sent, "SIGTERM")
		ch.signal(syscall.SIGTERM)
		ch.signal(syscall.SIGCONT)
		deadline := time.NewTimer(grace)
		defer deadline.Stop()
		poll := time.NewTicker(10 * time.Millisecond)
		defer poll.Stop()
	wait:
		for !ch.exited() || ch.groupAlive() {
			select {
			case <-deadline.C:
				break wait
			case <-ch.done:
			case <-poll.C:
			}
		}
	}
	if !ch.exited() || ch.groupAlive() {
		ch.sent = append(ch.sent, "SIGKILL")
		ch.signal(syscall.SIGKILL)
	}
	<-ch.done
}

// quit ends the heartbeat and disarms the watchdog, once the child is gone;
// it reports whether the watchdog killed the child.
func (ch *child) quit(wd *watchdog) bool {
	close(ch.stop)
	ch.beating.Wait() // no beat may re-arm the watchdog after this
	killed, _ := wd.disarm(ch.pid)
	return killed
}

// exitCode is the child's exit code as a shell gives it: 128+N when signal
// N killed it.
func (ch *child) exitCode() int {
	ws, ok := ch.state.Sys().(syscall.WaitStatus)
	if ok && ws.Signaled() {
		return exitSignal + int(ws.Signal())
	}
	return ch.state.ExitCode()
}

// how says, for the term's log line, which signal killed the child and who
// sent the signals.
func (ch *child) how(killedByWatchdog bool) string {
	var s string
	if ws, ok := ch.state.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		s = " signal=" + signalName(ws.Signal())
	}
	if len(ch.sent) > 0 {
		s += " sent=" + strings.Join(ch.sent, ",")
	}
	if killedByWatchdog {
		s += " watchdog=killed"
	}
	return s
}

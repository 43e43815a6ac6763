//go:build linux

package main

// run's watchdog and gate: electctl started again by electctl run, with a
// command of its own (internalCommand).
//
// The watchdog kills the command's process group when electctl cannot:
// when electctl stopped renewing a deadline (it is stopped, or starved), or
// died. It is a process of its own, in a process group of its own, so that
// what stops electctl (SIGSTOP, a terminal's Ctrl-Z to electctl's group)
// does not stop it. It speaks lines over a socket pair on its fd 3:
//
//	                      <- ready             once, when it has started
//	arm PGID DEADLINE     -> armed PGID        kill PGID's group at DEADLINE
//	                      -> late PGID         DEADLINE had passed: not armed
//	beat PGID DEADLINE                         move the deadline (PGID armed)
//	disarm PGID           -> disarmed PGID K   K=1 if it killed the group
//
// DEADLINE is in nanoseconds of CLOCK_MONOTONIC, which every process of a
// machine shares and the leases are measured on: a deadline stays exact
// however late the watchdog reads it. It kills when the newest deadline
// electctl sent has passed: before it kills it reads every line electctl
// has written. A late arm is refused rather than acted on, since nothing
// runs before it is armed (electctl then arms again with a fresh deadline).
// At end of file (electctl died, or closed the socket when done) it kills
// an armed group, and exits.
//
// The gate is the command's first process: it waits for a byte on its fd 3
// and then execs the command, so that the command runs only once the
// watchdog has armed its group (see runner.start). Exec keeps its pid, its
// process group and its parent-death signal.

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// The internal commands; not listed, not for people.
const (
	watchdogCommand = "__run-watchdog"
	gateCommand     = "__run-gate"
)

// watchdogReply bounds how long electctl waits for the watchdog's answer:
// it is a local process with nothing else to do. watchdogReady bounds its
// start, which on a loaded machine may take a while.
const (
	watchdogReply = 5 * time.Second
	watchdogReady = 30 * time.Second
)

// internalCommand runs the watchdog or the gate if args name one; ok is
// false otherwise.
func internalCommand(args []string) (code int, ok bool) {
	if len(args) == 0 {
		return 0, false
	}
	switch args[0] {
	case watchdogCommand:
		return watchdogMain(), true
	case gateCommand:
		return gateMain(args[1:]), true
	}
	return 0, false
}

// mono reads CLOCK_MONOTONIC, in nanoseconds: the clock Go's monotonic time,
// and so the term's lease, is measured on, shared by every process.
func mono() int64 {
	ts, err := clockGettime()
	if err != nil {
		panic(err) // never on Linux
	}
	return ts.Nano()
}

// watchdog is electctl's end of its watchdog.
type watchdog struct {
	proc    *exec.Cmd
	conn    *os.File
	wmu     sync.Mutex // one line at a time
	rmu     sync.Mutex // one request awaiting its reply at a time
	replies chan string
	dead    chan struct{} // closed when the watchdog is gone (or closed)
	err     error         // why, set before dead is closed
	closing bool          // set by close, under wmu: its end is no failure
	reaped  chan struct{}
}

// startWatchdog starts the watchdog process.
func startWatchdog() (*watchdog, error) {
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("cannot make the watchdog's socket: %w", err)
	}
	// Close-on-exec: no command inherits electctl's end, so that the
	// watchdog sees end of file exactly when electctl is gone.
	// Non-blocking, so that Go's poller reads it and Close ends a read
	// under way: a blocking read would hold the descriptor open.
	if err := syscall.SetNonblock(fds[0], true); err != nil {
		syscall.Close(fds[0])
		syscall.Close(fds[1])
		return nil, fmt.Errorf("cannot make the watchdog's socket: %w", err)
	}
	mine, theirs := os.NewFile(uintptr(fds[0]), "watchdog"), os.NewFile(uintptr(fds[1]), "electctl")
	defer theirs.Close()
	cmd := exec.Command(selfExe)
	cmd.Args = []string{"electctl", watchdogCommand}
	cmd.Stderr = os.Stderr // its reports, and a crash
	cmd.ExtraFiles = []*os.File{theirs}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		mine.Close()
		return nil, fmt.Errorf("cannot start the watchdog (electctl again, as %s): %w", selfExe, err)
	}
	w := &watchdog{proc: cmd, conn: mine, replies: make(chan string), dead: make(chan struct{}), reaped: make(chan struct{})}
	go func() {
		cmd.Wait()
		close(w.reaped)
	}()
	go w.read()
	// Before any campaign: a term is not won for a command that could not
	// be guarded, and a slow start is not taken for a slow arm.
	select {
	case reply := <-w.replies:
		if reply == "ready" {
			return w, nil
		}
		w.fail()
		err = fmt.Errorf("the watchdog said %q, not ready", reply)
	case <-w.dead:
		err = w.err
	case <-time.After(watchdogReady):
		w.fail()
		err = fmt.Errorf("the watchdog (pid %d) was not ready within %v", cmd.Process.Pid, watchdogReady)
	}
	w.close()
	return nil, err
}

// read passes the watchdog's replies on until its end.
func (w *watchdog) read() {
	in := bufio.NewScanner(w.conn)
	for in.Scan() {
		select {
		case w.replies <- in.Text():
		case <-w.reaped:
		}
	}
	w.wmu.Lock()
	closing := w.closing
	w.wmu.Unlock()
	if closing {
		w.err = errors.New("the watchdog was closed")
	} else {
		// Give the exit status a moment, to say how it ended.
		select {
		case <-w.reaped:
			w.err = fmt.Errorf("the watchdog (pid %d) ended: %v", w.proc.Process.Pid, w.proc.ProcessState)
		case <-time.After(time.Second):
			w.err = fmt.Errorf("the watchdog (pid %d) closed its socket", w.proc.Process.Pid)
		}
	}
	close(w.dead)
}

// gone reports whether the watchdog has ended.
func (w *watchdog) gone() bool {
	select {
	case <-w.dead:
		return true
	default:
		return false
	}
}

// why says why the watchdog is gone; nil while it is not.
func (w *watchdog) why() error {
	if !w.gone() {
		return nil
	}
	return w.err
}

// send writes one line.
func (w *watchdog) send(line string) error {
	w.wmu.Lock()
	defer w.wmu.Unlock()
	_, err := io.WriteString(w.conn, line+"\n")
	return err
}

// request sends line and returns the reply, which must start with one of
// want.
func (w *watchdog) request(line string, want ...string) (string, error) {
	w.rmu.Lock()
	defer w.rmu.Unlock()
	if err := w.send(line); err != nil {
		return "", fmt.Errorf("the watchdog: %w", err)
	}
	select {
	case reply := <-w.replies:
		for _, p := range want {
			if strings.HasPrefix(reply, p) {
				return reply, nil
			}
		}
		w.fail()
		return "", fmt.Errorf("the watchdog answered %q to %q", reply, line)
	case <-w.dead:
		return "", w.err
	case <-time.After(watchdogReply):
		// An answer that comes late would be taken for the next one's.
		w.fail()
		return "", fmt.Errorf("the watchdog (pid %d) did not answer within %v", w.proc.Process.Pid, watchdogReply)
	}
}

// fail kills a watchdog that does not keep to the protocol; its end is
// then reported as any other.
func (w *watchdog) fail() {
	w.proc.Process.Kill()
}

// arm has the watchdog kill process group pgid at deadline unless beats
// move it; it returns once the watchdog has armed, or with late set if
// the deadline had passed when the watchdog read it (nothing is armed).
func (w *watchdog) arm(pgid int, deadline int64) (late bool, err error) {
	reply, err := w.request(fmt.Sprintf("arm %d %d", pgid, deadline), fmt.Sprintf("armed %d", pgid), fmt.Sprintf("late %d", pgid))
	return strings.HasPrefix(reply, "late"), err
}

// beat moves the deadline of the armed group pgid. A failure shows as the
// watchdog's end.
func (w *watchdog) beat(pgid int, deadline int64) {
	w.send(fmt.Sprintf("beat %d %d", pgid, deadline))
}

// disarm stops the watchdog from killing group pgid, and reports whether it
// had killed it.
func (w *watchdog) disarm(pgid int) (killed bool, err error) {
	reply, err := w.request(fmt.Sprintf("disarm %d", pgid), fmt.Sprintf("disarmed %d ", pgid))
	return strings.HasSuffix(reply, " 1"), err
}

// close ends the watchdog: it sees end of file and exits.
func (w *watchdog) close() {
	w.wmu.Lock()
	w.closing = true
	w.conn.Close()
	w.wmu.Unlock()
	select {
	case <-w.reaped:
	case <-time.After(watchdogReply):
		w.proc.Process.Kill()
		<-w.reaped
	}
	<-w.dead
}

// watchdogMain is the watchdog process; see the top of this file. It is a
// loop around poll(2) on its socket, with the armed deadline as timeout,
// so that when the deadline passes it reads what electctl has written
// since before it decides.
func watchdogMain() int {
	// Signals meant for electctl's terminal or session are not for it; a
	// SIGTERM or SIGKILL meant for it ends it, and electctl then stops its
	// command (see runner.relay).
	signal.Ignore(syscall.SIGINT, syscall.SIGHUP, syscall.SIGQUIT, syscall.SIGTSTP, syscall.SIGTTIN, syscall.SIGTTOU,
		syscall.SIGUSR1, syscall.SIGUSR2, syscall.SIGPIPE)
	const fd = 3
	if _, err := syscall.GetsockoptInt(fd, syscall.SOL_SOCKET, syscall.SO_TYPE); err != nil {
		fmt.Fprintln(os.Stderr, "electctl: "+watchdogCommand+" is started by electctl run, not by hand")
		return exitUsage
	}
	w := &watch{parent: os.Getppid()}
	if err := syscall.SetNonblock(fd, true); err != nil {
		fmt.Fprintf(os.Stderr, "electctl run: watchdog: %v\n", err)
		return exitError
	}
	w.reply("ready")
	for {
		timeout := -1 // nothing armed: wait for electctl
		if w.armed != 0 {
			timeout = int(max(0, (w.deadline-mono()+int64(time.Millisecond)-1)/int64(time.Millisecond)))
		}
		if err := pollIn(fd, timeout); err != nil && err != syscall.EINTR {
			w.kill(fmt.Sprintf("cannot wait for electctl (pid %d): %v", w.parent, err))
			return exitError
		}
		eof, err := w.read()
		if err != nil {
			fmt.Fprintf(os.Stderr, "electctl run: watchdog: %v\n", err)
			w.kill("electctl broke the protocol")
			return exitError
		}
		if eof {
			w.kill(fmt.Sprintf("electctl (pid %d) is gone", w.parent))
			return exitOK
		}
		if w.armed != 0 && mono() >= w.deadline {
			w.kill(fmt.Sprintf("electctl (pid %d) did not renew its deadline: stopped or starved, it could not stop the command before another candidate may lead", w.parent))
		}
	}
}

// watch is the watchdog's state.
type watch struct {
	parent   int    // electctl
	armed    int    // the process group to kill, 0 if none
	deadline int64  // when, on CLOCK_MONOTONIC
	killed   int    // the group it killed last
	buf      []byte // what has been read of a line
}

// read reads and acts on every line electctl has written so far; eof is
// set once electctl's end is closed.
func (w *watch) read() (eof bool, err error) {
	var b [4096]byte
	for {
		n, err := syscall.Read(3, b[:])
		switch {
		case n > 0:
			w.buf = append(w.buf, b[:n]...)
			continue
		case err == syscall.EINTR:
			continue
		case err == syscall.EAGAIN:
		case err != nil:
			return true, nil // reset: electctl is gone as surely
		default:
			eof = true
		}
		break
	}
	for {
		line, rest, ok := strings.Cut(string(w.buf), "\n")
		if !ok {
			return eof, nil
		}
		w.buf = []byte(rest)
		if err := w.do(line); err != nil {
			return eof, err
		}
	}
}

// do acts on one line.
func (w *watch) do(line string) error {
	verb, pgid, deadline, err := parseWatchdogLine(line)
	if err != nil {
		return err
	}
	switch verb {
	case "arm":
		if deadline <= mono() {
			w.reply(fmt.Sprintf("late %d", pgid))
			return nil
		}
		w.armed, w.deadline = pgid, deadline
		w.reply(fmt.Sprintf("armed %d", pgid))
	case "beat":
		if pgid == w.armed { // not a beat for a group no longer armed
			w.deadline = deadline
		}
	case "disarm":
		k := 0
		if w.killed == pgid {
			k = 1
		}
		if w.armed == pgid {
			w.armed = 0
		}
		w.reply(fmt.Sprintf("disarmed %d %d", pgid, k))
	}
	return nil
}

// reply writes a line to electctl, which reads it at once: one reply is
// awaited at a time, far below what the socket buffers.
func (w *watch) reply(line string) {
	b := []byte(line + "\n")
	for len(b) > 0 {
		n, err := syscall.Write(3, b)
		if err == syscall.EINTR || err == syscall.EAGAIN {
			time.Sleep(time.Millisecond)
			continue
		}
		if err != nil {
			return // electctl is gone: the next read says so
		}
		b = b[n:]
	}
}

// kill kills the armed process group, if any, and says so.
func (w *watch) kill(why string) {
	if w.armed == 0 {
		return
	}
	syscall.Kill(-w.armed, syscall.SIGKILL)
	fmt.Fprintf(os.Stderr, "electctl run: watchdog: killed the command's process group %d: %s\n", w.armed, why)
	w.killed, w.armed = w.armed, 0
}

// parseWatchdogLine reads one line of the protocol.
func parseWatchdogLine(line string) (verb string, pgid int, deadline int64, err error) {
	f := strings.Fields(line)
	if len(f) < 2 {
		return "", 0, 0, fmt.Errorf("cannot read %q", line)
	}
	verb = f[0]
	pgid, err = strconv.Atoi(f[1])
	if err != nil || pgid <= 1 {
		return "", 0, 0, fmt.Errorf("bad process group in %q", line)
	}
	switch {
	case (verb == "arm" || verb == "beat") && len(f) == 3:
		deadline, err = strconv.ParseInt(f[2], 10, 64)
		if err != nil {
			return "", 0, 0, fmt.Errorf("bad deadline in %q", line)
		}
	case verb == "disarm" && len(f) == 2:
	default:
		return "", 0, 0, fmt.Errorf("cannot read %q", line)
	}
	return verb, pgid, deadline, nil
}

// gateMain is the gate: args are the command's path and argv. It waits for
// electctl's go-ahead on fd 3, then execs the command; end of file instead
// means electctl gave up, and nothing runs.
func gateMain(args []string) int {
	var st syscall.Stat_t
	if err := syscall.Fstat(3, &st); err != nil || st.Mode&syscall.S_IFMT != syscall.S_IFIFO || len(args) < 2 {
		fmt.Fprintln(os.Stderr, "electctl: "+gateCommand+" is started by electctl run, not by hand")
		return exitUsage
	}
	gate := os.NewFile(3, "gate")
	b := make([]byte, 1)
	if n, _ := gate.Read(b); n != 1 {
		return exitError
	}
	gate.Close()
	err := syscall.Exec(args[0], args[1:], os.Environ())
	fmt.Fprintf(os.Stderr, "electctl run: %s: %v\n", args[0], err)
	if errors.Is(err, syscall.ENOENT) {
		return exitNoCommand
	}
	return exitCannotRun
}

package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"
)

// watchProcess is electctl watch running as a process of its own, its
// lines read as they come.
type watchProcess struct {
	cmd      *exec.Cmd
	out, err chan string // the lines of stdout and stderr, as they come
	mu       sync.Mutex
	all      []string // every line, "1: " for stdout and "2: " for stderr
	read     sync.WaitGroup
}

// startWatch runs electctl with args and $ELECTION_DSN=dsn; the test
// stops it with stop.
func startWatch(t *testing.T, dsn string, args ...string) *watchProcess {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	w := &watchProcess{cmd: electctlCmd(t, ctx, []string{envDSN + "=" + dsn}, args...), out: make(chan string, 100), err: make(chan string, 100)}
	stdout, err := w.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	stderr, err := w.cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := w.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	scan := func(r io.Reader, ch chan string, fd string) {
		defer w.read.Done()
		defer close(ch)
		for s := bufio.NewScanner(r); s.Scan(); {
			w.mu.Lock()
			w.all = append(w.all, fd+": "+s.Text())
			w.mu.Unlock()
			select {
			case ch <- s.Text():
			default: // nobody waits for it; it is in all
			}
		}
	}
	w.read.Add(2)
	go scan(stdout, w.out, "1")
	go scan(stderr, w.err, "2")
	t.Cleanup(func() { w.cmd.Process.Kill(); w.read.Wait(); w.cmd.Wait() })
	return w
}

// wait returns the first line of ch not yet taken that holds want, within
// 10 s; else it fails the test with what the process printed.
func (w *watchProcess) wait(t *testing.T, ch chan string, want string) string {
	t.Helper()
	timeout := time.After(10 * time.Second)
	for {
		select {
		case line, ok := <-ch:
			if !ok {
				t.Fatalf("watch ended without printing %q; it printed:\n%s", want, w.lines())
			}
			if strings.Contains(line, want) {
				return line
			}
		case <-timeout:
			t.Fatalf("watch did not print %q within 10s; it printed:\n%s", want, w.lines())
		}
	}
}

func (w *watchProcess) lines() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return strings.Join(w.all, "\n")
}

// stop interrupts the watch, as Ctrl-C does, and returns its exit code and
// its stderr's lines.
func (w *watchProcess) stop(t *testing.T) (int, []string) {
	t.Helper()
	w.cmd.Process.Signal(os.Interrupt)
	w.read.Wait()
	w.cmd.Wait()
	var errs []string
	for _, l := range strings.Split(w.lines(), "\n") {
		if s, ok := strings.CutPrefix(l, "2: "); ok {
			errs = append(errs, s)
		}
	}
	return w.cmd.ProcessState.ExitCode(), errs
}

// Tables that are not there, or that the user may not read, end watch at
// once: retrying cannot fix them. It used to print nothing and run on.
func TestWatchWithoutTablesExitsAtOnce(t *testing.T) {
	c := newCluster(t)
	code, out, errOut := c.run("watch", "--prefix", "nope", "jobs")
	line := oneLineOf(t, "watch --prefix nope", errOut)
	if code != exitNotFound || out != "" || !strings.Contains(line, "nope_record") || !strings.Contains(line, "`electctl schema --prefix nope`") {
		t.Errorf("watch --prefix nope: exit %d, want %d\n%s%s", code, exitNotFound, out, errOut)
	}
}

// A running watch whose reads start to fail (its user lost SELECT) says so
// once, with the error and the fix, says when they work again, and goes
// on printing changes. It used to print nothing, so that the operator took
// its silence for an election without changes.
func TestWatchSaysWhenReadsFailAndWorkAgain(t *testing.T) {
	c := newCluster(t)
	c.add("jobs", "a")
	if c.waitLeader("jobs") != "a" {
		t.Fatal("a does not lead")
	}
	first := c.token("jobs")
	c.add("jobs", "b")
	waitCandidates(t, c, "jobs", 2)
	db := c.dbName()
	user := "w" + strings.TrimPrefix(db, "t")
	var grants []string
	for _, table := range []string{"record", "epoch", "candidate", "term", "lease"} {
		grants = append(grants, "GRANT SELECT ON %db.election_"+table+" TO %s")
	}
	// Table grants, which the server applies to open sessions at their
	// next statement.
	w := startWatch(t, newUser(t, db, user, "pw", grants...), "watch", "--interval", "100ms", "jobs")
	w.wait(t, w.out, fmt.Sprintf("term %d started: a leads", first))

	ctx := context.Background()
	revoke := "REVOKE SELECT ON `" + db + "`.election_record FROM '" + user + "'@'%'"
	if err := server.Exec(ctx, revoke); err != nil {
		t.Fatal(err)
	}
	failed := w.wait(t, w.err, "reading election jobs failed")
	if !strings.Contains(failed, "SELECT command denied") || !strings.Contains(failed, "retrying every 100ms") || !strings.Contains(failed, "Set-up for DBAs") {
		t.Errorf("the failure line does not give the error and the fix: %s", failed)
	}
	time.Sleep(time.Second) // ten reads fail meanwhile
	if err := server.Exec(ctx, strings.NewReplacer("REVOKE", "GRANT", "FROM", "TO").Replace(revoke)); err != nil {
		t.Fatal(err)
	}
	w.wait(t, w.err, "reading election jobs works again")

	if code, out, errOut := c.ctl("demote", "jobs"); code != exitOK || !strings.Contains(out, "b leads now") {
		t.Fatalf("demote: exit %d\n%s%s", code, out, errOut)
	}
	w.wait(t, w.out, fmt.Sprintf("term %d of a ended (demoted)", first))
	w.wait(t, w.out, fmt.Sprintf("term %d started: b leads", c.token("jobs")))
	code, errs := w.stop(t)
	if code != exitOK || len(errs) != 2 {
		t.Errorf("watch exited %d with %d lines on stderr, want %d and 2 (one when reads failed, one when they worked again):\n%s", code, len(errs), exitOK, w.lines())
	}
}

// The driver's own log lines ("[mysql] 2026/11/26 05:38:50
// connection.go:803 closing bad idle connection: EOF"), here of pooled
// connections that the server killed while idle, never reach stderr raw.
func TestDriverLinesNotRaw(t *testing.T) {
	c := newCluster(t)
	c.add("jobs", "a")
	c.waitLeader("jobs")
	db := c.dbName()
	user := "d" + strings.TrimPrefix(db, "t")
	w := startWatch(t, newUser(t, db, user, "pw", "GRANT SELECT ON %db.* TO %s"), "watch", "--interval", "1s", "jobs")
	w.wait(t, w.out, "started: a leads")
	admin := server.Open(t, "")
	for range 3 {
		time.Sleep(300 * time.Millisecond) // past the read, in the pool
		rows, err := admin.Query("SELECT ID FROM information_schema.PROCESSLIST WHERE USER = ?", user)
		if err != nil {
			t.Fatal(err)
		}
		var ids []int64
		for rows.Next() {
			var id int64
			rows.Scan(&id)
			ids = append(ids, id)
		}
		rows.Close()
		if len(ids) == 0 {
			t.Fatal("the watch has no session")
		}
		for _, id := range ids {
			admin.Exec(fmt.Sprintf("KILL CONNECTION %d", id))
		}
		time.Sleep(time.Second) // the next read takes a killed connection from the pool
	}
	// Its reads went on: a change is printed.
	c.cancel["a"]()
	w.wait(t, w.out, "of a ended (resigned)")
	code, errs := w.stop(t)
	for _, l := range errs {
		if !strings.HasPrefix(l, "electctl: ") || strings.Contains(l, "[mysql]") {
			t.Errorf("a raw line on stderr: %q", l)
		}
	}
	if code != exitOK {
		t.Errorf("watch exited %d:\n%s", code, w.lines())
	}
}

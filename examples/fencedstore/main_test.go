package main

import (
	"encoding/json"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/sqlelect/election/examples/internal/exampletest"
)

// With FENCEDSTORE_MAIN set, the binary is a process that TestStaleLeader started.
func TestMain(m *testing.M) { exampletest.Main(m, "FENCEDSTORE_MAIN", main) }

// The classic stale leader: the leading client is paused (SIGSTOP) until
// the other one leads and has written, then resumed. Its next write carries
// its old token; the store must refuse it with 409, and must never admit a
// lower token after a higher one.
func TestStaleLeader(t *testing.T) {
	dsn := exampletest.Database(t, "fencedstore")
	server := start(t, dsn, "store", "-addr", "127.0.0.1:0")
	url := strings.TrimPrefix(server.waitLine(t, 0, "store listening on "), "store listening on ")
	clients := map[string]*proc{}
	for _, id := range []string{"client-1", "client-2"} {
		// Short timings, so that a paused leader loses its term within
		// Lease+Margin = 2s.
		clients[id] = start(t, dsn, "client", "-id", id, "-store", url,
			"-interval", "100ms", "-lease", "1s", "-margin", "1s")
	}

	_, first := waitEntry(t, url, "write", 0, func(e entry) bool { return e.Status == http.StatusNoContent })
	old := first.Token
	id, _, _ := strings.Cut(first.Value, " ")
	stale := clients[id]
	if stale == nil {
		t.Fatalf("the first write %+v names no client", first)
	}
	stale.waitLine(t, len(stale.lines()), " pending")
	stale.cmd.Process.Signal(syscall.SIGSTOP)
	t.Logf("paused %s, which leads with token %d", id, old)
	taken, next := waitEntry(t, url, "write of a newer term", 0, func(e entry) bool {
		return e.Status == http.StatusNoContent && e.Token > old
	})
	t.Logf("%q written with token %d; resuming %s", next.Value, next.Token, id)
	stale.cmd.Process.Signal(syscall.SIGCONT)

	_, attempt := waitEntry(t, url, "write with the old token after the newer one", taken+1, func(e entry) bool {
		return e.Token == old
	})
	if attempt.Status != http.StatusConflict {
		t.Errorf("the write with the old token %d after token %d was admitted: %+v", old, next.Token, attempt)
	}
	var highest uint64
	for _, e := range getLog(t, url) {
		if e.Status != http.StatusNoContent {
			continue
		}
		if e.Token < highest {
			t.Errorf("the store admitted token %d after token %d: %+v", e.Token, highest, e)
		}
		highest = e.Token
	}

	// The clients first, so that their last writes find the store.
	for _, group := range [][]*proc{{clients["client-1"], clients["client-2"]}, {server}} {
		for _, p := range group {
			p.cmd.Process.Signal(syscall.SIGTERM)
		}
		for _, p := range group {
			if err := p.cmd.Wait(); err != nil {
				t.Errorf("%v did not stop cleanly on SIGTERM: %v", p.cmd.Args[1:], err)
			}
		}
	}
}

// proc is a child process running main, with what it has printed.
type proc struct {
	cmd *exec.Cmd
	mu  sync.Mutex
	out []byte
}

// start runs main in a child process with args, against dsn; the child is
// killed when the test ends.
func start(t *testing.T, dsn string, args ...string) *proc {
	p := &proc{cmd: exec.Command(os.Args[0], args...)}
	p.cmd.Env = append(os.Environ(), "FENCEDSTORE_MAIN=1", "ELECTION_DSN="+dsn)
	p.cmd.Stdout, p.cmd.Stderr = p, os.Stderr
	// No child outlives a test binary that dies before its clean-ups, even
	// one that is stopped.
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		p.cmd.Process.Kill()
		p.cmd.Wait()
	})
	return p
}

// Write keeps and shows what the child prints; exec copies its stdout here.
func (p *proc) Write(b []byte) (int, error) {
	p.mu.Lock()
	p.out = append(p.out, b...)
	p.mu.Unlock()
	os.Stdout.Write(b)
	return len(b), nil
}

// lines returns the complete lines p has printed.
func (p *proc) lines() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	lines := strings.Split(string(p.out), "\n")
	return lines[:len(lines)-1]
}

// waitLine waits for a line that contains s, from the line numbered from
// on, and returns it.
func (p *proc) waitLine(t *testing.T, from int, s string) string {
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		lines := p.lines()
		for _, line := range lines[min(from, len(lines)):] {
			if strings.Contains(line, s) {
				return line
			}
		}
		time.Sleep(time.Millisecond)
	}
	t.Fatalf("%v printed no line with %q within 30s", p.cmd.Args[1:], s)
	return ""
}

// waitEntry waits until the store's log has an entry that match accepts,
// from the entry numbered from on, and returns its number and the entry;
// what describes it.
func waitEntry(t *testing.T, url, what string, from int, match func(entry) bool) (int, entry) {
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		log := getLog(t, url)
		for i := from; i < len(log); i++ {
			if match(log[i]) {
				return i, log[i]
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("the store's log has no %s within 30s: %+v", what, getLog(t, url))
	return 0, entry{}
}

func getLog(t *testing.T, url string) []entry {
	resp, err := http.Get(url + "/log")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var log []entry
	if err := json.NewDecoder(resp.Body).Decode(&log); err != nil {
		t.Fatal(err)
	}
	return log
}

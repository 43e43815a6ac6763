package galeratest_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/sqlelect/election"
	"github.com/sqlelect/election/internal/proctest"
)

// Candidates in processes of their own, as the root package's
// TestOneLeaderAmongProcesses has them: the test binary run again with
// $ELECTION_CHILD set is one candidate, which prints its events as JSON
// lines on stdout.

// The environment of a candidate process.
const (
	envChild = "ELECTION_CHILD"      // its identity; set: this process is a candidate
	envDSN   = "ELECTION_CHILD_DSN"  // the node (or proxy) and database it campaigns on
	envName  = "ELECTION_CHILD_NAME" // the election
	// envStuck, set to "term" or "background", has it stop in the middle
	// of its first term's first fenced transaction: after its write, it
	// waits for SIGUSR1 before the transaction commits, with the term's
	// context or with context.Background() for the transaction.
	envStuck = "ELECTION_CHILD_STUCK"
	// envTiming, "LEASE,MARGIN" (as time.ParseDuration reads them), sets
	// its Lease and Margin in place of timing's.
	envTiming = "ELECTION_CHILD_TIMING"
)

// event is one line a candidate process prints: start, end, lost, inside,
// stuck (Fenced: errors.Is(err, election.ErrFenced)), failed, log, exit,
// error; killed is the test's own.
type event = proctest.Event

// childMain is a candidate process: it runs the election until SIGTERM,
// making fenced writes while it leads.
func childMain() int {
	emit := proctest.Emitter(os.Stdout)
	id := os.Getenv(envChild)
	db, err := sql.Open("mysql", os.Getenv(envDSN))
	if err != nil {
		emit(event{Ev: "error", ID: id, Reason: err.Error()})
		return 1
	}
	defer db.Close()
	cfg := timing
	cfg.Identity = id
	if lm := os.Getenv(envTiming); lm != "" {
		l, m, _ := strings.Cut(lm, ",")
		cfg.Lease, err = time.ParseDuration(l)
		if err == nil {
			cfg.Margin, err = time.ParseDuration(m)
		}
		if err != nil {
			emit(event{Ev: "error", ID: id, Reason: envTiming + ": " + err.Error()})
			return 1
		}
	}
	cfg.Logger = slog.New(slog.NewTextHandler(logLines{emit, id}, &slog.HandlerOptions{Level: slog.LevelWarn,
		ReplaceAttr: func(groups []string, a slog.Attr) slog.Attr {
			if a.Key == slog.TimeKey || a.Key == "election" {
				return slog.Attr{} // the event has its time; the test knows the election
			}
			return a
		}}))
	e, err := election.New(db, os.Getenv(envName), cfg)
	if err != nil {
		emit(event{Ev: "error", ID: id, Reason: err.Error()})
		return 1
	}
	usr1 := make(chan os.Signal, 1)
	signal.Notify(usr1, syscall.SIGUSR1)
	stuck := os.Getenv(envStuck)
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	err = e.Run(ctx, func(ctx context.Context, term *election.Term) error {
		emit(event{Ev: "start", ID: id, Token: term.Token()})
		defer func() { emit(event{Ev: "end", ID: id, Token: term.Token(), Reason: fmt.Sprint(term.Err())}) }()
		lost := context.AfterFunc(ctx, func() { emit(event{Ev: "lost", ID: id, Token: term.Token()}) })
		defer lost()
		if stuck != "" {
			err := stuckWrite(ctx, term, stuck, id, usr1, emit)
			emit(event{Ev: "stuck", ID: id, Token: term.Token(), Fenced: errors.Is(err, election.ErrFenced), Reason: fmt.Sprint(err)})
			stuck = "" // once
		}
		for ctx.Err() == nil {
			if err := fencedWrite(ctx, term, id); err != nil && ctx.Err() == nil {
				emit(event{Ev: "failed", ID: id, Token: term.Token(), Reason: err.Error()})
			}
			select {
			case <-ctx.Done():
			case <-time.After(20 * time.Millisecond):
			}
		}
		return nil
	})
	emit(event{Ev: "exit", ID: id, Reason: fmt.Sprint(err)})
	return 0
}

// stuckWrite makes a fenced write that stops after its INSERT: it prints
// "inside" and waits for SIGUSR1 (the test stops the process meanwhile)
// before fn returns and Fenced commits. With mode "background" the
// transaction runs under context.Background(), so that only the server can
// end it; with "term", under the term's context.
func stuckWrite(ctx context.Context, term *election.Term, mode, id string, usr1 <-chan os.Signal, emit func(event)) error {
	if mode == "background" {
		ctx = context.Background()
	}
	return term.Fenced(ctx, func(tx *sql.Tx) error {
		if _, err := tx.ExecContext(ctx, "INSERT INTO writes (token, holder) VALUES (?, ?)", term.Token(), stuckHolder(id)); err != nil {
			return err
		}
		emit(event{Ev: "inside", ID: id, Token: term.Token()})
		<-usr1
		return nil
	})
}

// stuckHolder is the holder of the write a stuck candidate makes.
func stuckHolder(id string) string { return "stuck-" + id }

// logLines turns each record of a candidate's log (warnings and above)
// into a "log" event.
type logLines struct {
	emit func(event)
	id   string
}

func (l logLines) Write(p []byte) (int, error) {
	l.emit(event{Ev: "log", ID: l.id, Reason: strings.TrimSpace(string(p))})
	return len(p), nil
}

// group is a set of candidate processes with one stream of their events.
type group struct {
	*proctest.Stream
	t    testing.TB
	name string

	mu    sync.Mutex
	procs map[string]*proc
}

type proc struct {
	cmd  *exec.Cmd
	read <-chan struct{} // closed once its stdout is read to the end
}

func newGroup(t testing.TB, name string) *group {
	g := &group{Stream: proctest.NewStream(t), t: t, name: name, procs: map[string]*proc{}}
	t.Cleanup(g.stopAll)
	return g
}

// start launches candidate id on dsn, with env added to its environment.
func (g *group) start(id, dsn string, env ...string) {
	g.t.Helper()
	cmd, read := g.Start(append([]string{envChild + "=" + id, envDSN + "=" + dsn, envName + "=" + g.name,
		"GORACE=" + strings.TrimSpace(os.Getenv("GORACE")+" atexit_sleep_ms=0")}, env...)...)
	g.mu.Lock()
	g.procs[id] = &proc{cmd: cmd, read: read}
	g.mu.Unlock()
}

func (g *group) proc(id string) *proc {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.procs[id]
}

func (g *group) signal(id string, sig syscall.Signal) {
	g.t.Helper()
	if err := g.proc(id).cmd.Process.Signal(sig); err != nil {
		g.t.Fatalf("signal %v to %s: %v", sig, id, err)
	}
}

// kill SIGKILLs candidate id and records when, as the end of whatever it
// was doing.
func (g *group) kill(id string) {
	g.t.Helper()
	g.signal(id, syscall.SIGKILL)
	g.Record(event{Ev: "killed", ID: id, At: time.Now().UnixNano()})
}

// stopAll ends every candidate (SIGTERM, so that a leader ends its term
// and says so; SIGKILL after 20 s) and waits until each has exited.
func (g *group) stopAll() {
	g.mu.Lock()
	procs := maps(g.procs)
	g.mu.Unlock()
	for _, p := range procs {
		p.cmd.Process.Signal(syscall.SIGCONT)
		p.cmd.Process.Signal(syscall.SIGTERM)
	}
	for _, p := range procs {
		select {
		case <-p.read:
		case <-time.After(20 * time.Second):
			p.cmd.Process.Kill()
			<-p.read
		}
		p.cmd.Wait()
	}
}

func maps(m map[string]*proc) []*proc {
	var ps []*proc
	for _, p := range m {
		ps = append(ps, p)
	}
	return ps
}

// report logs what the candidates logged and the fenced writes that failed,
// for the record of what Galera did: each distinct line once, with how many
// times and from when to when it came.
func (g *group) report() {
	g.t.Helper()
	type seen struct {
		n           int
		first, last time.Time
	}
	var order []string
	lines := map[string]*seen{}
	for _, e := range g.All() {
		if e.Ev != "log" && e.Ev != "failed" {
			continue
		}
		line := e.ID + " " + e.Ev + ": " + e.Reason
		if e.Ev == "failed" {
			line = fmt.Sprintf("%s a fenced write of term %d failed: %s", e.ID, e.Token, e.Reason)
		}
		s := lines[line]
		if s == nil {
			s = &seen{first: e.Time()}
			lines[line] = s
			order = append(order, line)
		}
		s.n++
		s.last = e.Time()
	}
	for _, line := range order {
		s := lines[line]
		g.t.Logf("%s-%s %d× %s", s.first.Format("15:04:05.000"), s.last.Format("15:04:05.000"), s.n, line)
	}
}

// assertOneActsAtATime checks, over every event so far, that each term
// began after the previous one had ended: a leader's term ends when its
// function returned ("end") or its process was SIGKILLed ("killed").
// Call it once the candidates have stopped.
func (g *group) assertOneActsAtATime() {
	g.t.Helper()
	type span struct {
		id         string
		token      uint64
		start, end int64 // end 0: never ended
	}
	var spans []*span
	open := map[string]*span{}
	for _, e := range g.All() {
		switch e.Ev {
		case "start":
			s := &span{id: e.ID, token: e.Token, start: e.At}
			spans = append(spans, s)
			open[e.ID] = s
		case "end", "killed":
			if s := open[e.ID]; s != nil {
				s.end = e.At
				delete(open, e.ID)
			}
		}
	}
	slices.SortFunc(spans, func(a, b *span) int { return int(a.start - b.start) })
	for i := 1; i < len(spans); i++ {
		prev, s := spans[i-1], spans[i]
		if s.token <= prev.token {
			g.t.Errorf("term %d of %s began after term %d of %s", s.token, s.id, prev.token, prev.id)
		}
		if prev.end == 0 || prev.end >= s.start {
			g.t.Errorf("two leaders acted at once: %s's term %d (ended %v) and %s's term %d (began %v)",
				prev.id, prev.token, time.Unix(0, prev.end).Format("15:04:05.000"), s.id, s.token, time.Unix(0, s.start).Format("15:04:05.000"))
		}
	}
}

var is, isFrom = proctest.Is, proctest.IsFrom

// startedAfter matches the start of a term newer than token, by any
// candidate.
func startedAfter(token uint64) func(event) bool {
	return func(e event) bool { return e.Ev == "start" && e.Token > token }
}

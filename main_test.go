package election_test

import (
	"bytes"
	"context"
	"database/sql"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"os/exec"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	_ "github.com/go-sql-driver/mysql"
	"github.com/sqlelect/election"
	"github.com/sqlelect/election/internal/faultproxy"
	"github.com/sqlelect/election/internal/mysqltest"
	"github.com/sqlelect/election/internal/proctest"
)

// server is the one server of this test binary, started by TestMain.
var server *mysqltest.Server

// serverVersion is the server's VERSION(); onTiDB is true on TiDB, where
// GetLock is refused (TestStrategyChosenForTheServer) and the scenarios
// run under LeaseRow alone.
var (
	serverVersion string
	onTiDB        bool
)

// exampleDatabases are dropped by TestMain: examples have no t.Cleanup.
var exampleDatabases []string

func TestMain(m *testing.M) {
	if os.Getenv("ELECTION_CHILD") != "" {
		os.Exit(childMain())
	}
	os.Exit(mysqltest.Main(m, func(s *mysqltest.Server) func() {
		server = s
		db, err := sql.Open("mysql", s.DSN(""))
		if err == nil {
			err = db.QueryRow("SELECT VERSION()").Scan(&serverVersion)
			db.Close()
		}
		if err != nil {
			// The suite's choice of scenarios depends on it.
			fmt.Fprintln(os.Stderr, "reading the server's version:", err)
			os.Exit(1)
		}
		if onTiDB = strings.Contains(serverVersion, "TiDB"); onTiDB {
			strategies = []election.Strategy{election.LeaseRow}
		}
		return dropExampleDatabases // examples have no t.Cleanup
	}))
}

// needGetLock skips a test of the GetLock strategy where the server
// refuses it.
func needGetLock(t testing.TB) {
	t.Helper()
	if onTiDB {
		t.Skip("GetLock is refused on TiDB (TestStrategyChosenForTheServer, TestTiDBUserLocks)")
	}
}

func dropExampleDatabases() {
	admin, err := sql.Open("mysql", server.DSN(""))
	if err != nil {
		return
	}
	defer admin.Close()
	for _, name := range exampleDatabases {
		admin.Exec("DROP DATABASE IF EXISTS " + name)
	}
}

// fast is the test timing: W = 2s.
var fast = election.Config{Interval: 100 * time.Millisecond, Lease: time.Second, Margin: time.Second}

// calm is the timing of tests whose subject is not timing: a loaded
// machine does not end their terms.
var calm = election.Config{Interval: 250 * time.Millisecond, Lease: 5 * time.Second, Margin: time.Second}

// newDB returns a pool on a fresh database of its own, and its DSN.
func newDB(t testing.TB) (*sql.DB, string) {
	t.Helper()
	name := server.NewDatabase(t)
	return server.Open(t, name), server.DSN(name)
}

// strategies are what every behavioural scenario runs against.
var strategies = []election.Strategy{election.GetLock, election.LeaseRow}

// forEachStrategy runs a scenario once per strategy, in parallel.
func forEachStrategy(t *testing.T, run func(t *testing.T, s election.Strategy)) {
	for _, s := range strategies {
		t.Run(s.String(), func(t *testing.T) {
			t.Parallel()
			run(t, s)
		})
	}
}

// viaProxy returns a pool on database dbName whose connections go through
// a fault proxy of their own, closed when the test ends.
func viaProxy(t testing.TB, dbName string) (*sql.DB, *faultproxy.Proxy) {
	t.Helper()
	proxy, err := faultproxy.Start(server.Addr())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { proxy.Close() })
	cfg := server.Config(dbName)
	cfg.Addr = proxy.Addr()
	return openDSN(t, cfg.FormatDSN()), proxy
}

// openDSN returns a pool on dsn, closed when the test ends.
func openDSN(t testing.TB, dsn string) *sql.DB {
	db, err := sql.Open("mysql", dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

// newElector returns candidate id of election name on db under strategy s,
// with the test timing. A test that asks for GetLock where the server
// refuses it is skipped (see needGetLock).
func newElector(t testing.TB, s election.Strategy, db *sql.DB, name, id string) *election.Elector {
	t.Helper()
	if s == election.GetLock {
		needGetLock(t)
	}
	cfg := fast
	cfg.Strategy = s
	cfg.Identity = id
	return newElectorWith(t, db, name, cfg)
}

// newElectorWith returns a candidate of election name on db with cfg.
func newElectorWith(t testing.TB, db *sql.DB, name string, cfg election.Config) *election.Elector {
	t.Helper()
	e, err := election.New(db, name, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return e
}

// newOperator returns an Operator of election name on db, with the test
// timing.
func newOperator(t testing.TB, db *sql.DB, name string) *election.Operator {
	t.Helper()
	return newOperatorWith(t, db, name, fast)
}

// newOperatorWith returns an Operator of election name on db with cfg.
func newOperatorWith(t testing.TB, db *sql.DB, name string, cfg election.Config) *election.Operator {
	t.Helper()
	o, err := election.NewOperator(db, name, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return o
}

func ctxFor(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// campaign runs Campaign in the background; the term or error arrives on
// the channel.
type result struct {
	term *election.Term
	err  error
	at   time.Time
}

func campaign(ctx context.Context, e *election.Elector) <-chan result {
	ch := make(chan result, 1)
	go func() {
		t, err := e.Campaign(ctx)
		ch <- result{t, err, time.Now()}
	}()
	return ch
}

func await(t testing.TB, ch <-chan result, limit time.Duration) result {
	t.Helper()
	select {
	case r := <-ch:
		if r.err != nil {
			t.Fatalf("campaign: %v", r.err)
		}
		t.Cleanup(func() { r.term.Resign(context.Background()) })
		return r
	case <-time.After(limit):
		t.Fatalf("no term within %v", limit)
		return result{}
	}
}

func resignAll(t testing.TB, terms ...*election.Term) {
	for _, term := range terms {
		if err := term.Resign(ctxFor(t, 10*time.Second)); err != nil {
			t.Errorf("resign: %v", err)
		}
	}
}

// assertTokenAfter fails the test unless token is higher than prev: a later
// term's token is.
func assertTokenAfter(t testing.TB, token, prev uint64) {
	t.Helper()
	if token <= prev {
		t.Fatalf("token %d after %d", token, prev)
	}
}

// proxiedLeader has candidate a of election name lead on connections through
// a fault proxy, and candidate b campaign on direct ones. It returns a's
// term, b's campaign and the proxy, with no fault yet.
func proxiedLeader(t *testing.T, s election.Strategy, name string) (*election.Term, <-chan result, *faultproxy.Proxy) {
	t.Helper()
	dbName := server.NewDatabase(t)
	proxied, proxy := viaProxy(t, dbName)
	ctx := ctxFor(t, time.Minute)
	a := newElector(t, s, proxied, name, "a")
	b := newElector(t, s, server.Open(t, dbName), name, "b")
	ta := await(t, campaign(ctx, a), 10*time.Second).term
	return ta, campaign(ctx, b), proxy
}

// runInBackground runs e.Run with fn on a goroutine of its own, until ctx
// ends or the test does: the test's clean-up ends Run's context and waits
// until Run has returned.
func runInBackground(t testing.TB, ctx context.Context, e *election.Elector, fn func(context.Context, *election.Term) error) {
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		e.Run(ctx, fn)
	}()
	t.Cleanup(func() { cancel(); <-done })
}

// waitFor polls cond every 20ms until it holds, and fails the test after
// limit.
func waitFor(t *testing.T, what string, limit time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", limit, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// dbNameOf returns the name of the database db is on.
func dbNameOf(t *testing.T, db *sql.DB) string {
	t.Helper()
	var name string
	if err := db.QueryRow("SELECT DATABASE()").Scan(&name); err != nil {
		t.Fatal(err)
	}
	return name
}

// contents returns the tables of db's database and how many rows each
// holds, for tests that check that a refused call wrote nothing (see
// assertWroteNothing).
func contents(t testing.TB, db *sql.DB) map[string]int {
	t.Helper()
	rows, err := db.Query("SELECT TABLE_NAME FROM information_schema.TABLES WHERE TABLE_SCHEMA = DATABASE()")
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for rows.Next() {
		var name string
		if err := rows.Scan(&name); err != nil {
			t.Fatal(err)
		}
		names = append(names, name)
	}
	if err := rows.Close(); err != nil {
		t.Fatal(err)
	}
	counts := map[string]int{}
	for _, name := range names {
		var n int
		if err := db.QueryRow("SELECT COUNT(*) FROM `" + name + "`").Scan(&n); err != nil {
			t.Fatal(err)
		}
		counts[name] = n
	}
	return counts
}

// contentsOnceLed is contents once the election's first term has written
// its history row, which it does after Campaign returns.
func contentsOnceLed(t *testing.T, db *sql.DB) map[string]int {
	t.Helper()
	waitFor(t, "the first term's history row", 10*time.Second, func() bool { return contents(t, db)["election_term"] == 1 })
	return contents(t, db)
}

// assertWroteNothing fails the test unless db's database holds the same
// tables, with as many rows each, as before (nil: no table): what a refused
// call must leave.
func assertWroteNothing(t testing.TB, db *sql.DB, before map[string]int, refused string) {
	t.Helper()
	if after := contents(t, db); !maps.Equal(before, after) {
		t.Errorf("%s wrote: the tables and their rows were %v, are %v", refused, before, after)
	}
}

// openAsUser creates a user with the given GRANTs (%s stands for the user)
// and returns a pool on dbName as that user.
func openAsUser(t *testing.T, dbName, user string, grants ...string) *sql.DB {
	t.Helper()
	admin := server.Open(t, "")
	account := "'" + user + "'@'%'"
	stmts := []string{"CREATE USER " + account + " IDENTIFIED BY 'pw'"}
	for _, grant := range grants {
		stmts = append(stmts, strings.ReplaceAll(grant, "%s", account))
	}
	for _, stmt := range stmts {
		if _, err := admin.Exec(stmt); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() { admin.Exec("DROP USER " + account) })
	cfg := server.Config(dbName)
	cfg.User, cfg.Passwd = user, "pw"
	return openDSN(t, cfg.FormatDSN())
}

// assertHistoryReason fails the test unless the history of ops's election
// has term token, ended for reason want.
func assertHistoryReason(t *testing.T, ops *election.Operator, token uint64, want string) {
	t.Helper()
	hist, err := ops.History(ctxFor(t, 10*time.Second), 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, h := range hist {
		if h.Token == token {
			if h.Reason != want {
				t.Fatalf("term %d's history reason %q, want %q", token, h.Reason, want)
			}
			return
		}
	}
	t.Fatalf("term %d not in the history %+v", token, hist)
}

// createWrites makes the table that fenced writes go to: id order is commit
// order for fenced writes, so tokens must never decrease along it.
func createWrites(t testing.TB, db *sql.DB) {
	t.Helper()
	_, err := db.Exec("CREATE TABLE writes (id BIGINT AUTO_INCREMENT PRIMARY KEY, token BIGINT UNSIGNED NOT NULL, holder VARCHAR(255) NOT NULL)")
	if err != nil {
		t.Fatal(err)
	}
}

func fencedWrite(ctx context.Context, term *election.Term, holder string) error {
	return term.Fenced(ctx, func(tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, "INSERT INTO writes (token, holder) VALUES (?, ?)", term.Token(), holder)
		return err
	})
}

// writesBy returns the number of accepted writes of holder.
func writesBy(db *sql.DB, holder string) int {
	var n int
	db.QueryRow("SELECT COUNT(*) FROM writes WHERE holder = ?", holder).Scan(&n)
	return n
}

// checkWritesPer asserts the fencing invariant per election (or shard)
// over the accepted writes query returns, as (key, token, holder) in
// commit order: each key's tokens never decrease, and no token of a key
// has two holders. It returns the number of writes and of keys.
func checkWritesPer(t testing.TB, db *sql.DB, query string) (writes, keys int) {
	t.Helper()
	rows, err := db.Query(query)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	type term struct {
		key   string
		token uint64
	}
	last, holders := map[string]uint64{}, map[term]string{}
	for rows.Next() {
		var (
			key, holder string
			token       uint64
		)
		if err := rows.Scan(&key, &token, &holder); err != nil {
			t.Fatal(err)
		}
		if token < last[key] {
			t.Errorf("%s accepted a stale write: token %d after %d", key, token, last[key])
		}
		if h, ok := holders[term{key, token}]; ok && h != holder {
			t.Errorf("%s: token %d written by %s and %s", key, token, h, holder)
		}
		last[key], holders[term{key, token}] = token, holder
		writes++
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return writes, len(last)
}

// checkWrites asserts the fencing invariant over every accepted write: in
// commit order tokens never decrease and no token has two holders. It
// returns the number of writes.
func checkWrites(t testing.TB, db *sql.DB) int {
	t.Helper()
	n, _ := checkWritesPer(t, db, "SELECT 'the election', token, holder FROM writes ORDER BY id")
	return n
}

// logBuffer keeps the text of log records, for a test to read.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

// newLogged returns a logger of every record at Debug and up, and its
// buffer.
func newLogged() (*slog.Logger, *logBuffer) {
	l := &logBuffer{}
	return slog.New(slog.NewTextHandler(l, &slog.HandlerOptions{Level: slog.LevelDebug})), l
}

// Write takes one record: the handler writes each in one call.
func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

// lines returns the records logged so far that contain every one of parts.
func (l *logBuffer) lines(parts ...string) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for _, line := range strings.Split(strings.TrimSpace(l.buf.String()), "\n") {
		all := line != ""
		for _, p := range parts {
			all = all && strings.Contains(line, p)
		}
		if all {
			out = append(out, line)
		}
	}
	return out
}

// --- candidates in separate processes ---

// event is one line a child candidate prints (start, write, end, exit,
// error; and logged, observed: see termEndLog).
type event = proctest.Event

// childMain is a candidate process: it runs the election named by its
// environment until SIGTERM, making fenced writes while it leads.
func childMain() int {
	emit := proctest.Emitter(os.Stdout)
	id := os.Getenv("ELECTION_CHILD")
	db, err := sql.Open("mysql", os.Getenv("ELECTION_CHILD_DSN"))
	if err != nil {
		emit(event{Ev: "error", ID: id, Reason: err.Error()})
		return 1
	}
	defer db.Close()
	cfg := fast
	cfg.Identity = id
	// What its log and its metrics say about each term's end, for the
	// tests that compare them with History and Watch.
	cfg.Logger = slog.New(termEndLog{emit: emit, id: id})
	cfg.Observer = &election.Observer{TermEnded: func(_, _ string, token uint64, reason string) {
		emit(event{Ev: "observed", ID: id, Token: token, Reason: reason})
	}}
	if os.Getenv("ELECTION_CHILD_STRATEGY") == election.LeaseRow.String() {
		cfg.Strategy = election.LeaseRow
	}
	// The leader policies (policy_test.go): the value each proclaims, its
	// priority and version, and a health check that fails while a file is.
	cfg.Value = "http://" + id + ".invalid/"
	if p := os.Getenv("ELECTION_CHILD_PRIORITY"); p != "" {
		n, _ := strconv.Atoi(p)
		cfg.Priority, cfg.Version, cfg.PreferAfter = int32(n), os.Getenv("ELECTION_CHILD_VERSION"), preferAfter
		if d := os.Getenv("ELECTION_CHILD_PREFER_AFTER"); d != "" {
			cfg.PreferAfter, _ = time.ParseDuration(d)
		}
	}
	if f := os.Getenv("ELECTION_CHILD_UNHEALTHY_IF"); f != "" {
		cfg.Health = func(context.Context) error {
			if _, err := os.Stat(f); err == nil {
				return fmt.Errorf("%s exists", f)
			}
			return nil
		}
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	if n, _ := strconv.Atoi(os.Getenv("ELECTION_CHILD_SHARDS")); n > 0 {
		return shardMember(ctx, emit, db, id, n, cfg)
	}
	e, err := election.New(db, os.Getenv("ELECTION_CHILD_NAME"), cfg)
	if err != nil {
		emit(event{Ev: "error", ID: id, Reason: err.Error()})
		return 1
	}
	err = e.Run(ctx, func(ctx context.Context, term *election.Term) error {
		emit(event{Ev: "start", ID: id, Token: term.Token()})
		defer func() { emit(event{Ev: "end", ID: id, Token: term.Token(), Reason: fmt.Sprint(term.Err())}) }()
		for ctx.Err() == nil {
			err := fencedWrite(ctx, term, id)
			if ctx.Err() == nil || err == nil {
				emit(event{Ev: "write", ID: id, Token: term.Token(), OK: err == nil, Reason: fmt.Sprint(err)})
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

// termEndLog is a child's log handler: it turns each "term ended" record
// into a "logged" event with the record's reason and token.
type termEndLog struct {
	emit  func(event)
	id    string
	attrs []slog.Attr
}

func (h termEndLog) Enabled(context.Context, slog.Level) bool { return true }

func (h termEndLog) Handle(_ context.Context, r slog.Record) error {
	if r.Message != "term ended" {
		return nil
	}
	ev := event{Ev: "logged", ID: h.id}
	pick := func(a slog.Attr) bool {
		switch a.Key {
		case "reason":
			ev.Reason = a.Value.String()
		case "token":
			ev.Token = a.Value.Uint64()
		}
		return true
	}
	for _, a := range h.attrs {
		pick(a)
	}
	r.Attrs(pick)
	h.emit(ev)
	return nil
}

func (h termEndLog) WithAttrs(attrs []slog.Attr) slog.Handler {
	h.attrs = append(slices.Clip(h.attrs), attrs...)
	return h
}

func (h termEndLog) WithGroup(string) slog.Handler { return h }

// group is a set of candidate processes with one stream of their events.
type group struct {
	*proctest.Stream
	t     testing.TB
	s     election.Strategy
	dsn   string
	name  string
	procs map[string]*exec.Cmd

	shards int // when set, each process is a member of group name with that many shards
}

func newGroup(t testing.TB, s election.Strategy, dsn, name string) *group {
	return &group{Stream: proctest.NewStream(t), t: t, s: s, dsn: dsn, name: name, procs: map[string]*exec.Cmd{}}
}

// writingGroup starts n candidate processes of election name, on a fresh
// database with the writes table, and returns that database and the group.
func writingGroup(t testing.TB, s election.Strategy, name string, n int) (*sql.DB, *group) {
	t.Helper()
	db, dsn := newDB(t)
	createWrites(t, db)
	g := newGroup(t, s, dsn, name)
	g.spawn(n)
	return db, g
}

// start launches a candidate process named id, with env added to its
// environment.
func (g *group) start(id string, env ...string) {
	g.t.Helper()
	cmd, _ := g.Start(append([]string{"ELECTION_CHILD=" + id, "ELECTION_CHILD_DSN=" + g.dsn, "ELECTION_CHILD_NAME=" + g.name,
		"ELECTION_CHILD_STRATEGY=" + g.s.String(), "ELECTION_CHILD_SHARDS=" + strconv.Itoa(g.shards)}, env...)...)
	g.procs[id] = cmd
	g.t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGCONT)
		cmd.Process.Kill()
		cmd.Wait()
	})
}

// spawn launches n candidates named proc-0 ... proc-(n-1).
func (g *group) spawn(n int) {
	for i := range n {
		g.start("proc-" + strconv.Itoa(i))
	}
}

func (g *group) signal(id string, sig syscall.Signal) {
	g.t.Helper()
	if err := g.procs[id].Process.Signal(sig); err != nil {
		g.t.Fatalf("signal %v to %s: %v", sig, id, err)
	}
}

var is, isFrom = proctest.Is, proctest.IsFrom

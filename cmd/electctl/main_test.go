package main

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/sqlelect/election"
	"github.com/sqlelect/election/internal/mysqltest"
)

var server *mysqltest.Server

// asChild, set in the environment to a directory, makes the test binary run
// as the command of electctl run (runChild, set by run_test.go where run is
// built), recording what it does in that directory.
const asChild = "ELECTCTL_TEST_CHILD"

var runChild func(dir string, args []string) (code int, ok bool)

func TestMain(m *testing.M) {
	// Before asMain, which run's command inherits: see runChild.
	if dir := os.Getenv(asChild); dir != "" && runChild != nil {
		if code, ok := runChild(dir, os.Args[1:]); ok {
			os.Exit(code)
		}
	}
	if os.Getenv(asMain) != "" {
		main() // electctl, as the tests run it: see electctl
	}
	// The electctl processes the tests start get SIGHUP as a shell gives
	// it, whatever this process was given: under nohup, and CI runners
	// that start jobs so, SIGHUP is ignored, exec passes that on, and
	// electctl run keeps a signal ignored at start ignored, by design. A
	// signal caught here is reset to its default at exec.
	signal.Notify(make(chan os.Signal, 1), syscall.SIGHUP)
	os.Exit(mysqltest.Main(m, func(s *mysqltest.Server) func() {
		server = s
		return nil
	}))
}

var fast = election.Config{Interval: 100 * time.Millisecond, Lease: time.Second, Margin: time.Second}

// cluster runs candidates of one election in this process.
type cluster struct {
	t      *testing.T
	db     *sql.DB
	dsn    string
	cancel map[string]context.CancelFunc
	wg     sync.WaitGroup
}

func newCluster(t *testing.T) *cluster {
	name := server.NewDatabase(t)
	c := &cluster{t: t, db: server.Open(t, name), dsn: server.DSN(name), cancel: map[string]context.CancelFunc{}}
	t.Cleanup(func() {
		for _, stop := range c.cancel {
			stop()
		}
		c.wg.Wait()
	})
	return c
}

func (c *cluster) add(election_, id string) {
	cfg := fast
	cfg.Identity = id
	c.addWith(election_, cfg)
}

// addWith runs candidate cfg.Identity of election_ with cfg, and returns
// the terms it begins, as it begins them (the first ten).
func (c *cluster) addWith(election_ string, cfg election.Config) <-chan *election.Term {
	e, err := election.New(c.db, election_, cfg)
	if err != nil {
		c.t.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	c.cancel[cfg.Identity] = stop
	terms := make(chan *election.Term, 10)
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		e.Run(ctx, func(ctx context.Context, t *election.Term) error {
			select {
			case terms <- t:
			default:
			}
			<-ctx.Done()
			return nil
		})
	}()
	return terms
}

func (c *cluster) waitLeader(name string) string {
	c.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		recs, _ := election.Elections(context.Background(), c.db, "")
		for _, r := range recs {
			if r.Name == name && r.Leading() {
				return r.Identity
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	c.t.Fatalf("no leader of %s", name)
	return ""
}

// token is the token of the term recorded for election name.
func (c *cluster) token(name string) uint64 {
	c.t.Helper()
	recs, err := election.Elections(context.Background(), c.db, "")
	for _, r := range recs {
		if r.Name == name {
			return r.Token
		}
	}
	c.t.Fatalf("no record of %s: %v", name, err)
	return 0
}

// ctl runs electctl with the cluster's DSN and returns its exit code and
// output.
func (c *cluster) ctl(args ...string) (int, string, string) {
	var out, errOut bytes.Buffer
	code := run(context.Background(), append([]string{"--dsn", c.dsn}, args...), &out, &errOut)
	return code, out.String(), errOut.String()
}

// fields gives the whitespace-separated fields of the line of out that
// starts with prefix, or nil.
func fields(out, prefix string) []string {
	for _, line := range strings.Split(out, "\n") {
		if strings.HasPrefix(line, prefix) {
			return strings.Fields(line)
		}
	}
	return nil
}

func TestStatusHistoryCandidates(t *testing.T) {
	c := newCluster(t)
	const value = "http://10.0.0.1:8080"
	cfg := fast
	cfg.Identity, cfg.Value, cfg.Priority, cfg.Version = "host-a", value, 5, "v2"
	cfg.Health = func(context.Context) error { return nil }
	c.addWith("billing", cfg)
	leader := c.waitLeader("billing")
	c.add("billing", "host-b")
	c.add("reports", "host-c")
	c.waitLeader("reports")

	code, out, _ := c.ctl("status")
	if code != exitOK || !strings.Contains(out, "ELECTION") || !strings.Contains(out, "billing") || !strings.Contains(out, "reports") || !strings.Contains(out, "(recorded)") || !strings.Contains(out, "get_lock") {
		t.Fatalf("status: %d\n%s", code, out)
	}
	if f, g := fields(out, "billing "), fields(out, "reports "); len(f) == 0 || f[len(f)-1] != value || len(g) == 0 || g[len(g)-1] != "-" {
		t.Fatalf("status: no VALUE %s for billing and - for reports:\n%s", value, out)
	}
	code, out, _ = c.ctl("status", "billing")
	for _, want := range [][]string{{"value:", value}, {"priority:", "5"}, {"version:", "v2"}, {"health:", "healthy"}} {
		if f := fields(out, want[0]); code != exitOK || len(f) != 2 || f[1] != want[1] {
			t.Fatalf("status billing: no %q:\n%s", want, out)
		}
	}
	code, out, _ = c.ctl("status", "billing", "--json")
	var rec recordView
	if err := json.Unmarshal([]byte(out), &rec); code != exitOK || err != nil || rec.Leader != leader || !rec.Leading || rec.Token != c.token("billing") ||
		rec.LockConnID != rec.ConnID || rec.Strategy != "get_lock" || rec.Value != value || rec.Candidate == nil ||
		rec.Candidate.Identity != leader || rec.Candidate.Priority != 5 || rec.Candidate.Version != "v2" || rec.Candidate.Health != "healthy" {
		t.Fatalf("status --json: %d %v\n%s", code, err, out)
	}
	code, _, errOut := c.ctl("status", "nosuch")
	if code != exitNotFound || !strings.Contains(errOut, "not found") {
		t.Fatalf("status of an unknown election: %d %s", code, errOut)
	}
	waitCandidates(t, c, "billing", 2)
	code, out, _ = c.ctl("candidates", "billing", "--json")
	var cands []candidateView
	if err := json.Unmarshal([]byte(out), &cands); code != exitOK || err != nil || len(cands) != 2 {
		t.Fatalf("candidates --json: %d %v\n%s", code, err, out)
	}
	if a, b := cands[0], cands[1]; a.Identity != "host-a" || !a.Leader || a.Value != value || a.Priority != 5 || a.Version != "v2" || a.Health != "healthy" ||
		b.Identity != "host-b" || b.Value != "" || b.Priority != 0 || b.Version != "" || b.Health != "" ||
		a.Session != election.SessionOwn || b.Session != election.SessionOwn {
		t.Fatalf("candidates --json: %+v", cands)
	}
	code, out, _ = c.ctl("candidates", "billing")
	// The last five columns: SESSION, PRIORITY, VERSION, HEALTH, VALUE.
	a, b := fields(out, "host-a "), fields(out, "host-b ")
	if code != exitOK || len(a) < 5 || len(b) < 5 || a[1] != "leader" || strings.Join(a[len(a)-5:], " ") != "own 5 v2 healthy "+value ||
		strings.Join(b[len(b)-5:], " ") != "own 0 - - -" {
		t.Fatalf("candidates: %d\n%s", code, out)
	}
	code, out, _ = c.ctl("history", "billing", "--json")
	var hist []map[string]any
	if err := json.Unmarshal([]byte(out), &hist); code != exitOK || err != nil || len(hist) != 1 || hist[0]["leader"] != leader {
		t.Fatalf("history --json: %d %v\n%s", code, err, out)
	}
	// A GetLock candidate whose process was killed a minute after it
	// joined, healthy then: its row stays, its candidate lock is free.
	// When its session ended the server does not say, nor how it is now.
	if _, err := c.db.Exec("INSERT INTO election_candidate (lock_name, identity, strategy, host, pid, since, seen_at, lease_aware_at, expiry_us, healthy, session) " +
		"SELECT lock_name, 'host-k', 'get_lock', 'vm', 1, UTC_TIMESTAMP(6) - INTERVAL 1 MINUTE, UTC_TIMESTAMP(6) - INTERVAL 1 MINUTE, " +
		"UTC_TIMESTAMP(6) - INTERVAL 1 MINUTE, 1000000000, TRUE, 'own' FROM election_record WHERE name = 'billing'"); err != nil {
		t.Fatal(err)
	}
	code, out, _ = c.ctl("candidates", "billing")
	if k := fields(out, "host-k "); code != exitOK || len(k) < 11 || k[1] != "dead" || k[len(k)-6] != "-" || k[len(k)-2] != "-" {
		t.Fatalf("candidates: the killed one is not dead with SEEN and HEALTH unknown (-): %d\n%s", code, out)
	}
	code, out, _ = c.ctl("candidates", "billing", "--json")
	cands = nil
	if err := json.Unmarshal([]byte(out), &cands); code != exitOK || err != nil {
		t.Fatalf("candidates --json: %d %v\n%s", code, err, out)
	}
	for _, k := range cands {
		if k.Identity == "host-k" && (k.Alive || k.SeenAgoMS != nil) || k.Identity != "host-k" && k.SeenAgoMS == nil {
			t.Fatalf("candidates --json: %+v: want seen_ago_ms null for the killed one alone\n%s", k, out)
		}
	}
}

func waitCandidates(t *testing.T, c *cluster, name string, n int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		code, out, _ := c.ctl("candidates", name, "--json")
		var cands []map[string]any
		live := 0
		if code == exitOK && json.Unmarshal([]byte(out), &cands) == nil {
			for _, k := range cands {
				if k["alive"] == true {
					live++
				}
			}
		}
		if live == n {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("%s never had %d live candidates", name, n)
}

func TestDemoteHandoverCheck(t *testing.T) {
	c := newCluster(t)
	c.add("cron", "a")
	c.waitLeader("cron")
	c.add("cron", "b")
	c.add("cron", "c")
	waitCandidates(t, c, "cron", 3)

	if code, out, _ := c.ctl("check", "cron", "a"); code != exitOK || !strings.Contains(out, "a leads") {
		t.Fatalf("check of the leader: %d %s", code, out)
	}
	if code, out, _ := c.ctl("check", "cron", "b"); code != exitNotLeader || !strings.Contains(out, "a leads, not b") {
		t.Fatalf("check of a follower: %d %s", code, out)
	}
	first := c.token("cron")
	code, out, _ := c.ctl("demote", "cron")
	if code != exitOK || !strings.Contains(out, fmt.Sprintf("a (token %d) stepped down", first)) {
		t.Fatalf("demote: %d %s", code, out)
	}
	code, out, errOut := c.ctl("handover", "cron", "nobody")
	if code != exitRefused || !strings.Contains(errOut, `no candidate "nobody"`) {
		t.Fatalf("handover to an unknown candidate: %d %s %s", code, out, errOut)
	}
	target := "c"
	if c.waitLeader("cron") == "c" {
		target = "a"
	}
	// A demoted candidate steps aside for a moment (Run's pause), and is no
	// hand-over target until it campaigns again.
	waitCandidates(t, c, "cron", 3)
	code, out, _ = c.ctl("handover", "cron", target, "--json")
	var res map[string]any
	if err := json.Unmarshal([]byte(out), &res); code != exitOK || err != nil || res["new_leader"] != target || res["killed"] != false {
		t.Fatalf("handover --json: %d %v %s", code, err, out)
	}
	// In JSON a term's length is a number of milliseconds, null while it
	// goes on, as every other length electctl prints there.
	code, out, _ = c.ctl("history", "cron", "--json")
	var terms []map[string]any
	if err := json.Unmarshal([]byte(out), &terms); code != exitOK || err != nil || len(terms) < 2 {
		t.Fatalf("history --json: %d %v\n%s", code, err, out)
	}
	for i, term := range terms {
		d, has := term["duration_ms"]
		if _, s := term["duration"]; s || !has || i == 0 && d != nil || i > 0 && (d == nil || d.(float64) <= 0) {
			t.Fatalf("history --json: term %d has duration_ms %v (want null for the leading one, else a positive number), and no duration string:\n%s", i, d, out)
		}
	}
	if code, out, errOut := c.ctl("remove", "cron"); code != exitRefused || !strings.Contains(errOut, "in use") || c.token("cron") == 0 {
		t.Fatalf("remove while candidates campaign: %d %s %s", code, out, errOut)
	}
	for _, stop := range c.cancel {
		stop()
	}
	c.wg.Wait()
	if code, out, _ := c.ctl("check", "cron", target); code != exitNoLeader {
		t.Fatalf("check without a leader: %d %s", code, out)
	}
	if code, _, errOut := c.ctl("demote", "cron"); code != exitNoLeader || !strings.Contains(errOut, "no leader") {
		t.Fatalf("demote without a leader: %d %s", code, errOut)
	}
	code, out, _ = c.ctl("history", "cron")
	if code != exitOK || !strings.Contains(out, "demoted") || !strings.Contains(out, "handed-over") || !strings.Contains(out, "resigned") {
		t.Fatalf("history: %d\n%s", code, out)
	}
	if code, out, errOut := c.ctl("remove", "cron"); code != exitOK || !strings.Contains(out, "election cron removed") {
		t.Fatalf("remove once nobody campaigns: %d %s %s", code, out, errOut)
	}
	for _, cmd := range []string{"status", "history", "remove"} {
		if code, out, errOut := c.ctl(cmd, "cron"); code != exitNotFound {
			t.Errorf("%s of a removed election: %d %s %s", cmd, code, out, errOut)
		}
	}
}

func TestWatch(t *testing.T) {
	c := newCluster(t)
	if err := election.CreateSchema(context.Background(), c.db, ""); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var out bytes.Buffer
	done := make(chan int)
	go func() {
		done <- run(ctx, []string{"watch", "--dsn", c.dsn, "--interval", "100ms", "jobs"}, &out, os.Stderr)
	}()
	time.Sleep(300 * time.Millisecond)
	cfg := fast
	cfg.Identity, cfg.Value = "a", "http://10.0.0.1:8080"
	terms := c.addWith("jobs", cfg)
	c.waitLeader("jobs")
	token := c.token("jobs")
	time.Sleep(300 * time.Millisecond) // watch prints the start, with the first value
	if err := (<-terms).Proclaim(context.Background(), "http://10.0.0.2:8080"); err != nil {
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond)
	c.cancel["a"]()
	time.Sleep(500 * time.Millisecond)
	cancel()
	if code := <-done; code != exitOK {
		t.Fatalf("watch exited %d", code)
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 4 || !strings.Contains(lines[0], "no leader") ||
		!strings.HasSuffix(lines[1], fmt.Sprintf("term %d started: a leads (value http://10.0.0.1:8080)", token)) ||
		!strings.HasSuffix(lines[2], fmt.Sprintf("term %d: a proclaims http://10.0.0.2:8080", token)) ||
		!strings.Contains(lines[3], fmt.Sprintf("term %d of a ended (resigned)", token)) {
		t.Fatalf("watch printed:\n%s", out.String())
	}
}

// A term's end that Watch sends again (its leader wrote its own account
// late, after an outage, in place of the successor's "lost") is marked
// revised and says who leads now, not "no leader".
func TestWatchMarksARevisedEnd(t *testing.T) {
	c := newCluster(t)
	c.add("jobs", "a")
	if c.waitLeader("jobs") != "a" {
		t.Fatal("a does not lead")
	}
	first := c.token("jobs")
	c.add("jobs", "b")
	time.Sleep(300 * time.Millisecond) // b queues
	ctx, cancel := context.WithCancel(context.Background())
	var out bytes.Buffer
	done := make(chan int)
	go func() {
		done <- run(ctx, []string{"watch", "--dsn", c.dsn, "--interval", "100ms", "jobs"}, &out, os.Stderr)
	}()
	time.Sleep(300 * time.Millisecond)
	c.cancel["a"]()
	for deadline := time.Now().Add(10 * time.Second); c.waitLeader("jobs") != "b"; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("b does not lead after a resigned")
		}
	}
	time.Sleep(300 * time.Millisecond)
	// What a leader's late account writes (docs/operations.md, "Operator actions").
	if _, err := c.db.Exec("UPDATE election_term SET reason = 'lease-expired', ended_at = ended_at - INTERVAL 1 SECOND WHERE holder = 'a'"); err != nil {
		t.Fatal(err)
	}
	time.Sleep(500 * time.Millisecond)
	cancel()
	if code := <-done; code != exitOK {
		t.Fatalf("watch exited %d", code)
	}
	got := out.String()
	if !strings.Contains(got, fmt.Sprintf("term %d of a ended (resigned): no leader", first)) ||
		!strings.Contains(got, fmt.Sprintf("term %d of a ended (lease-expired), revised: b leads (term %d)", first, c.token("jobs"))) {
		t.Fatalf("watch printed:\n%s", got)
	}
}

func TestUsageAndErrors(t *testing.T) {
	var out, errOut bytes.Buffer
	ctx := context.Background()
	if code := run(ctx, nil, &out, &errOut); code != exitUsage || !strings.Contains(errOut.String(), "usage: electctl") {
		t.Fatalf("no command: %d", code)
	}
	for _, cmd := range []string{"status", "watch", "history", "candidates", "demote", "handover", "check", "schema"} {
		out.Reset()
		if code := run(ctx, []string{cmd, "--help"}, &out, &errOut); code != exitOK || !strings.Contains(out.String(), "-dsn") {
			t.Fatalf("%s --help: %d %s", cmd, code, out.String())
		}
	}
	errOut.Reset()
	if code := run(ctx, []string{"handover", "--dsn", "u@tcp(127.0.0.1:1)/d", "only-name"}, &out, &errOut); code != exitUsage {
		t.Fatalf("missing argument: %d", code)
	}
	t.Setenv("ELECTION_DSN", "")
	errOut.Reset()
	if code := run(ctx, []string{"status"}, &out, &errOut); code != exitUsage || !strings.Contains(errOut.String(), "ELECTION_DSN") {
		t.Fatalf("no DSN: %d %s", code, errOut.String())
	}
	errOut.Reset()
	code := run(ctx, []string{"status", "--dsn", "app:s3cret@tcp(127.0.0.1:1)/d?timeout=1s"}, &out, &errOut)
	if code != exitError || !strings.Contains(errOut.String(), "cannot reach") || strings.Contains(errOut.String(), "s3cret") {
		t.Fatalf("unreachable server: %d %s", code, errOut.String())
	}
	errOut.Reset()
	if code := run(ctx, []string{"status", "--dsn", server.DSN("")}, &out, &errOut); code != exitUsage || !strings.Contains(errOut.String(), "names no database") {
		t.Fatalf("DSN without a database: %d %s", code, errOut.String())
	}
	errOut.Reset()
	empty := server.NewDatabase(t)
	if code := run(ctx, []string{"status", "--dsn", server.DSN(empty)}, &out, &errOut); code != exitNotFound ||
		!strings.Contains(errOut.String(), "`electctl schema` prints the DDL") || strings.Contains(errOut.String(), "CREATE TABLE") {
		t.Fatalf("missing tables: %d %s", code, errOut.String())
	}
	assertNoTables(t, empty, "status on a database without the tables")
	out.Reset()
	if code := run(ctx, []string{"schema"}, &out, &errOut); code != exitOK || strings.Count(out.String(), "CREATE TABLE") != 5 {
		t.Fatalf("schema: %d %s", code, out.String())
	}
}

// A privilege the server refused on existing tables, or a login it
// refused, is a refusal (5), not a missing election (4).
func TestDeniedGrantIsRefused(t *testing.T) {
	var errOut strings.Builder
	c := &cli{errOut: &errOut}
	denied := fmt.Errorf("%w: %w", election.ErrSchema, &mysql.MySQLError{Number: 1142, Message: "UPDATE command denied"})
	if code := c.fail(denied); code != exitRefused {
		t.Fatalf("a denied UPDATE: exit %d, want %d", code, exitRefused)
	}
	login := fmt.Errorf("%w: %w", election.ErrAccessDenied, &mysql.MySQLError{Number: 1045, Message: "Access denied for user"})
	if code := c.fail(login); code != exitRefused {
		t.Fatalf("a refused login: exit %d, want %d", code, exitRefused)
	}
	missing := fmt.Errorf("%w: %w", election.ErrSchema, &mysql.MySQLError{Number: 1146, Message: "Table doesn't exist"})
	if code := c.fail(missing); code != exitNotFound {
		t.Fatalf("a missing table: exit %d, want %d", code, exitNotFound)
	}
}

// assertNoTables fails the test if database dbName has any table: a
// refused command must leave nothing behind.
func assertNoTables(t *testing.T, dbName, refused string) {
	t.Helper()
	var n int
	if err := server.Open(t, "").QueryRow("SELECT COUNT(*) FROM information_schema.TABLES WHERE TABLE_SCHEMA = ?", dbName).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 0 {
		t.Errorf("%s made %d tables", refused, n)
	}
}

// The only candidate killed while it led: its term has no end recorded,
// and no later term closes it. history says so, and does not call it
// leading, as status does not.
func TestHistoryOfALeaderGoneWithoutAWord(t *testing.T) {
	c := newCluster(t)
	c.add("solo", "a")
	c.waitLeader("solo")
	for _, stop := range c.cancel {
		stop()
	}
	c.wg.Wait()
	// What a SIGKILL of the leader leaves: the record names its term,
	// leading, on a session that holds no lock; the term's row has no end.
	token := c.token("solo") + 1000
	for _, stmt := range []string{
		fmt.Sprintf("UPDATE election_record SET epoch = %d, state = 'leading', conn_id = 4000000000, ended_at = NULL WHERE name = 'solo'", token),
		fmt.Sprintf("INSERT INTO election_term (lock_name, epoch, holder, host, pid, started_at) SELECT lock_name, %d, 'a', 'vm', 1, UTC_TIMESTAMP(6) "+
			"FROM election_record WHERE name = 'solo'", token),
	} {
		if _, err := c.db.Exec(stmt); err != nil {
			t.Fatal(err)
		}
	}
	code, out, _ := c.ctl("history", "solo")
	if f := fields(out, fmt.Sprint(token)); code != exitOK || len(f) < 3 || strings.Join(f[len(f)-3:], " ") != "(no end recorded)" {
		t.Fatalf("history: the killed leader's term is not marked (no end recorded): %d\n%s", code, out)
	}
	if strings.Contains(out, "(leading)") {
		t.Fatalf("history calls a term leading that no one leads:\n%s", out)
	}
	if code, out, _ := c.ctl("status"); code != exitOK || !strings.Contains(out, "stale") {
		t.Fatalf("status: want the record stale: %d\n%s", code, out)
	}
}

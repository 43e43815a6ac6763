package main

import (
	"bufio"
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"net"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sqlelect/election"
)

// asMain, set in the environment, makes the test binary run electctl's
// main instead of the tests (see TestMain), so that the tests below check
// what a real electctl process prints and exits with.
const asMain = "ELECTCTL_TEST_AS_MAIN"

// electctlCmd prepares electctl as a process of its own, with env added to
// an environment that holds no $ELECTION_DSN.
func electctlCmd(t *testing.T, ctx context.Context, env []string, args ...string) *exec.Cmd {
	t.Helper()
	bin, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.CommandContext(ctx, bin, args...)
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, envDSN+"=") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	// Under -race the binary sleeps a second before it exits, unless told not to.
	gorace := strings.TrimSpace(os.Getenv("GORACE") + " atexit_sleep_ms=0")
	cmd.Env = append(append(cmd.Env, asMain+"=1", "GORACE="+gorace), env...)
	return cmd
}

// electctl runs electctl as a process of its own (see electctlCmd) and
// returns its exit code, stdout and stderr.
func electctl(t *testing.T, env []string, args ...string) (int, string, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := electctlCmd(t, ctx, env, args...)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	if err := cmd.Run(); err != nil && cmd.ProcessState == nil {
		t.Fatal(err)
	}
	if ctx.Err() != nil {
		t.Fatalf("electctl %q did not finish within 30s:\n%s%s", args, out.String(), errOut.String())
	}
	return cmd.ProcessState.ExitCode(), out.String(), errOut.String()
}

// run runs electctl as a process of its own on the cluster's database.
func (c *cluster) run(args ...string) (int, string, string) {
	c.t.Helper()
	return electctl(c.t, []string{envDSN + "=" + c.dsn}, args...)
}

// unreachable is a $ELECTION_DSN whose server refuses connections at once.
const unreachable = envDSN + "=app:s3cr3tPW@tcp(127.0.0.1:1)/app?timeout=1s"

func TestPasswordNeverPrinted(t *testing.T) {
	const (
		password = "s3cr3tPW"
		dsn      = "app:" + password + "@tcp(127.0.0.1:1)/app"
	)
	env := []string{unreachable}
	for _, tc := range []struct {
		env  []string
		args []string
		code int
	}{
		{env, []string{"status", "--help"}, exitOK},
		{env, []string{"help", "status"}, exitOK},
		{env, []string{"watch", "--help"}, exitOK},
		{env, []string{"history"}, exitUsage},
		{env, []string{"status", "--bogus"}, exitUsage},
		{env, []string{"status"}, exitError},
		{nil, []string{"status", "--dsn", "app:s3cr3tPW@tcp(127.0.0.1:1)/"}, exitUsage},
		{nil, []string{"status", "--dsn", "app:s3cr3tPW@tcp(127.0.0.1:1/app"}, exitUsage},
		// The driver's messages quote what it took for the network or the
		// database name, here parts of the password.
		{nil, []string{"status", "--dsn", "app:s3cr3tPW/x@tcp(127.0.0.1:1)"}, exitUsage},
		{nil, []string{"status", "--dsn", "app:x/s3cr3tPW%zz@tcp(127.0.0.1:1)"}, exitUsage},
		{nil, []string{"status", "--dsn", "app:s3cr3tPW/app"}, exitUsage},
		// Without an @ what the driver quotes may hold part of the
		// password however it is blanked out; and user:pass(x)/db parses,
		// with user:pass for the network.
		{nil, []string{"status", "--dsn", "app:x/s3cr3tPW%zz"}, exitUsage},
		{nil, []string{"status", "--dsn", "a/b:s3cr3tPW%zz"}, exitUsage},
		{nil, []string{"status", "--dsn", "app:s3cr3tPW(x)/app"}, exitUsage},
		// A mistyped or missing --dsn leaves the DSN where the command,
		// or help's argument, is expected.
		{nil, []string{"--dns", dsn, "status", "x"}, exitUsage},
		{nil, []string{"--DSN", dsn, "status", "x"}, exitUsage},
		{nil, []string{"-d", dsn, "status"}, exitUsage},
		{nil, []string{"--dsn=", dsn, "status"}, exitUsage},
		{nil, []string{"help", "--dns", dsn}, exitUsage},
		{nil, []string{"help", "status", dsn}, exitUsage},
		{nil, []string{dsn, "status"}, exitUsage},
		{nil, []string{dsn}, exitUsage},
		// A DSN where a name or a flag's value goes: messages quote those.
		{[]string{envDSN + "=" + server.DSN(server.NewDatabase(t))}, []string{"status", dsn}, exitNotFound},
		{env, []string{"history", "--limit", dsn, "x"}, exitUsage},
	} {
		code, out, errOut := electctl(t, tc.env, tc.args...)
		if code != tc.code || strings.Contains(out+errOut, password) {
			t.Errorf("electctl %q (env %q): exit %d, want %d, and no password in:\n%s%s", tc.args, tc.env, code, tc.code, out, errOut)
		}
	}
	// What may hold a password is not shown; a mistyped command still is.
	for args, want := range map[string]string{
		dsn:                "unknown command (not shown: it may hold a password)",
		"stauts":           `unknown command "stauts"`,
		"help stauts":      `help takes one command; got "stauts"`,
		"help status -- x": `help takes one command; got "status x"`,
	} {
		if code, out, errOut := electctl(t, nil, strings.Fields(args)...); code != exitUsage || !strings.Contains(errOut, want) {
			t.Errorf("electctl %s: exit %d, want %d and %q in:\n%s%s", args, code, exitUsage, want, out, errOut)
		}
	}
}

func TestHelpIsAFlagNotAValue(t *testing.T) {
	// --dsn -h gives --dsn the value -h: no help is asked for, and no
	// command given.
	for _, args := range [][]string{{"--dsn", "-h"}, {"--prefix", "--help"}, {"-timeout", "-h", "--json"}} {
		if code, out, errOut := electctl(t, nil, args...); code != exitUsage || out != "" || !strings.HasPrefix(errOut, "usage: electctl") {
			t.Errorf("%q: exit %d, want %d with the usage on stderr\n%s%s", args, code, exitUsage, out, errOut)
		}
	}
	for _, args := range [][]string{{"-h"}, {"--json", "--help"}, {"--dsn=x", "-h"}, {"--dsn", "x", "--help"}} {
		if code, out, errOut := electctl(t, nil, args...); code != exitOK || !strings.HasPrefix(out, "usage: electctl") {
			t.Errorf("%q: exit %d, want %d with the usage on stdout\n%s%s", args, code, exitOK, out, errOut)
		}
	}
}

func TestJSONEscaped(t *testing.T) {
	c := newCluster(t)
	c.add("spoof", "a")
	c.waitLeader("spoof")
	// encoding/json escapes only what is below U+0020 (and U+2028/9):
	// not the C1 controls (U+009B is the 8-bit CSI), bidi overrides, DEL,
	// format characters above U+FFFF, nor invisible fillers.
	const (
		evil   = "\u009b2K\u202efake\x7f\U000e0041"
		host   = "h\u0085ost\u3164"
		reason = "x\x7f[31m" // the column is ASCII
	)
	spoof(t, c.db, evil, host, reason)
	if _, err := c.db.Exec("UPDATE election_record r, election_candidate c SET r.value = ?, c.value = ?, c.version = ?", evil, evil, evil); err != nil {
		t.Fatal(err)
	}
	// decode checks that out holds none of the runes raw, and decodes it
	// into v: the escapes must give back what was written.
	decode := func(what, out string, v any) {
		t.Helper()
		for _, r := range []string{"\u009b", "\u0085", "\u202e", "\x7f", "\U000e0041", "\u3164"} {
			if strings.Contains(out, r) {
				t.Errorf("%s printed %q raw:\n%q", what, r, out)
			}
		}
		if err := json.Unmarshal([]byte(out), v); err != nil {
			t.Errorf("%s: %v\n%q", what, err, out)
		}
	}
	var rec recordView
	code, out, _ := c.run("--json", "status", "spoof")
	if decode("status spoof", out, &rec); code != exitOK || rec.Leader != evil || rec.Host != host || rec.Value != evil || rec.Candidate == nil || rec.Candidate.Version != evil {
		t.Errorf("status spoof --json: %d %+v", code, rec)
	}
	var recs []recordView
	code, out, _ = c.run("--json", "status")
	if decode("status", out, &recs); code != exitOK || len(recs) != 1 || recs[0].Leader != evil || recs[0].Host != host || recs[0].Value != evil {
		t.Errorf("status --json: %d %+v", code, recs)
	}
	var terms []map[string]any
	code, out, _ = c.run("--json", "history", "spoof")
	if decode("history", out, &terms); code != exitOK || len(terms) != 2 || terms[1]["leader"] != evil || terms[1]["host"] != host || terms[1]["reason"] != reason {
		t.Errorf("history --json: %d %q", code, terms)
	}
	var cands []map[string]any
	code, out, _ = c.run("--json", "candidates", "spoof")
	if decode("candidates", out, &cands); code != exitOK || len(cands) != 2 {
		t.Errorf("candidates --json: %d %q", code, cands)
	}
	found := false
	for _, k := range cands {
		found = found || k["identity"] == evil && k["host"] == host && k["value"] == evil && k["version"] == evil
	}
	if !found {
		t.Errorf("candidates --json: no candidate %q of host, value and version %q in %q", evil, host, cands)
	}
	// watch --json: its first line is the leader.
	line := firstWatchLine(t, c.dsn, "--json", "watch", "spoof")
	var ev map[string]any
	if decode("watch", line, &ev); ev["leader"] != evil || ev["value"] != evil {
		t.Errorf("watch --json: %q", line)
	}
}

func TestControlCharactersEscaped(t *testing.T) {
	c := newCluster(t)
	c.add("spoof", "a")
	c.waitLeader("spoof")
	// Rows as anyone with INSERT and UPDATE on the tables can write them:
	// the leader's keepalive matches its row by term and session only.
	const (
		evil    = "\x1b[2K\rfake-leader"
		host    = "h\u202eost"
		name    = "spoof\x1b]0;pwned\x07"
		reason  = "x\x1b[31m"
		value   = "http://x\x1b[2J\u202e/"
		version = "v\x1b]0;x\x07"
	)
	for _, q := range []string{"UPDATE election_record SET name = ?", "UPDATE election_term SET holder = ?, host = ?"} {
		args := []any{name}
		if strings.Contains(q, "host") {
			args = []any{evil, host}
		}
		if _, err := c.db.Exec(q, args...); err != nil {
			t.Fatal(err)
		}
	}
	spoof(t, c.db, evil, host, reason)
	if _, err := c.db.Exec("UPDATE election_record r, election_candidate c SET r.value = ?, c.value = ?, c.version = ?", value, value, version); err != nil {
		t.Fatal(err)
	}
	raw := []string{"\x1b", "\r", "\u202e", "\x07"}
	assertEscaped := func(what, out, errOut string, want ...string) {
		t.Helper()
		for _, r := range raw {
			if strings.Contains(out+errOut, r) {
				t.Errorf("%s printed %q raw:\n%q\n%q", what, r, out, errOut)
			}
		}
		for _, w := range want {
			if !strings.Contains(out, strconv.Quote(w)) {
				t.Errorf("%s does not show %s:\n%s", what, strconv.Quote(w), out)
			}
		}
	}
	for _, tc := range []struct {
		args []string
		code int
		want []string
	}{
		{[]string{"status"}, exitOK, []string{evil, name, value}},
		{[]string{"status", "spoof"}, exitOK, []string{evil, host, name, value, version}},
		{[]string{"history", "spoof"}, exitOK, []string{evil, host, reason}},
		{[]string{"candidates", "spoof"}, exitOK, []string{evil, host, value, version}},
		{[]string{"check", "spoof", "a"}, exitNotLeader, []string{evil}},
		{[]string{"check", "spoof", "a "}, exitNotLeader, []string{evil, "a "}},
	} {
		code, out, errOut := c.run(tc.args...)
		if code != tc.code {
			t.Errorf("%q: exit %d, want %d\n%s%s", tc.args, code, tc.code, out, errOut)
		}
		assertEscaped(strings.Join(tc.args, " "), out, errOut, tc.want...)
	}
	// JSON escapes on its own terms; its strings stay exact.
	code, out, _ := c.run("status", "spoof", "--json")
	var rec recordView
	if err := json.Unmarshal([]byte(out), &rec); code != exitOK || err != nil || rec.Leader != evil || rec.Host != host {
		t.Errorf("status --json: %d %v\n%s", code, err, out)
	}
	// watch's first line is the leader.
	line := firstWatchLine(t, c.dsn, "watch", "spoof")
	assertEscaped("watch", line, "", evil, value)
	// Messages on stderr echo what the command line held.
	code, _, errOut := c.run("status", "--\x1b[2Kx")
	if code != exitUsage {
		t.Errorf("an unknown flag: exit %d", code)
	}
	assertEscaped("an unknown flag's error", "", errOut)
}

func TestShown(t *testing.T) {
	for in, want := range map[string]string{
		"host-a":          "host-a",
		"a b":             "a b",
		"a ":              `"a "`,
		" a":              `" a"`,
		"Zoë 東京":          "Zoë 東京",
		"":                `""`,
		`"a"`:             `"\"a\""`,
		"a\tb":            `"a\tb"`,
		"\x1b[2K\rx":      `"\x1b[2K\rx"`,
		"a\u202eb":        `"a\u202eb"`,
		"a\u200bb":        `"a\u200bb"`,
		"a\u00a0b":        `"a\u00a0b"`,
		"bad\xff":         `"bad\xff"`,
		"\ufffd ok":       "\ufffd ok",
		"\u0085next line": `"\u0085next line"`,
		// Printable to unicode.IsPrint, yet invisible: "a\u3164" would
		// pass for "a", and strconv.Quote leaves them as they are.
		"a\u3164":      `"a\u3164"`,
		"\u115fa":      `"\u115fa"`,
		"a\u1160":      `"a\u1160"`,
		"a\uffa0":      `"a\uffa0"`,
		"a\u2800":      `"a\u2800"`,
		"a\u034f":      `"a\u034f"`,
		"a\ufe0f":      `"a\ufe0f"`,
		"a\U000e0100":  `"a\U000e0100"`,
		"\"\u3164\x1b": `"\"\u3164\x1b"`,
	} {
		if got := shown(in); got != want {
			t.Errorf("shown(%q) = %s, want %s", in, got, want)
		}
	}
}

// An unset field shows as -, and a "-" set as one is quoted.
func TestShownOrDash(t *testing.T) {
	for in, want := range map[string]string{"": "-", "-": `"-"`, "v2": "v2", "a\x1b": `"a\x1b"`, " ": `" "`} {
		if got := shownOrDash(in); got != want {
			t.Errorf("shownOrDash(%q) = %s, want %s", in, got, want)
		}
	}
}

func TestNoTermIsNotFound(t *testing.T) {
	c := newCluster(t)
	if err := election.CreateSchema(context.Background(), c.db, ""); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{
		{"status", "nosuch"}, {"history", "nosuch"}, {"demote", "nosuch"}, {"handover", "nosuch", "x"}, {"check", "nosuch", "x"},
	} {
		code, out, errOut := c.run(args...)
		if code != exitNotFound || !strings.Contains(errOut, `election "nosuch" not found: it has had no term`) {
			t.Errorf("%q: exit %d, want %d\n%s%s", args, code, exitNotFound, out, errOut)
		}
	}
}

func TestNumericFlagsRefused(t *testing.T) {
	env := []string{unreachable}
	for _, tc := range []struct {
		flag string
		args []string
	}{
		{"--timeout", []string{"status", "--timeout=0"}},
		{"--timeout", []string{"status", "--timeout=-1s"}},
		{"--timeout", []string{"watch", "jobs", "--timeout=0"}},
		{"--limit", []string{"history", "jobs", "--limit", "0"}},
		{"--limit", []string{"history", "jobs", "--limit=-3"}},
		{"--interval", []string{"watch", "jobs", "--interval", "0"}},
		{"--interval", []string{"watch", "jobs", "--interval", "-1ms"}},
		{"--interval", []string{"watch", "jobs", "--interval", "999us"}},
		{"--interval", []string{"watch", "jobs", "--interval", "2501ms"}},
		{"--interval", []string{"watch", "jobs", "--interval", "1h"}},
	} {
		code, out, errOut := electctl(t, env, tc.args...)
		if code != exitUsage || !strings.Contains(errOut, tc.flag) {
			t.Errorf("%q: exit %d, want %d with a message naming %s\n%s%s", tc.args, code, exitUsage, tc.flag, out, errOut)
		}
		if tc.flag == "--interval" && !strings.Contains(errOut, "1ms to 2.5s") {
			t.Errorf("%q: the message does not say the range:\n%s", tc.args, errOut)
		}
	}
	// The bounds themselves are allowed: these go on to the database.
	for _, args := range [][]string{
		{"watch", "jobs", "--interval", "2.5s"}, {"watch", "jobs", "--interval", "1ms"}, {"history", "jobs", "--limit", "1"}, {"status", "--timeout", "1ns"},
	} {
		if code, out, errOut := electctl(t, env, args...); code != exitError || !strings.Contains(errOut, "cannot reach") {
			t.Errorf("%q: exit %d, want %d\n%s%s", args, code, exitError, out, errOut)
		}
	}
	// The help says the range the error says.
	if code, out, _ := electctl(t, nil, "watch", "--help"); code != exitOK || !strings.Contains(out, intervalRange()) || !strings.Contains(intervalRange(), "1ms to 2.5s") {
		t.Errorf("watch --help: %d\n%s", code, out)
	}
}

func TestCommandIsFirstPositional(t *testing.T) {
	c := newCluster(t)
	for _, prefix := range []string{"", "schema"} {
		if err := election.CreateSchema(context.Background(), c.db, prefix); err != nil {
			t.Fatal(err)
		}
	}
	// A flag's value that names a command is not the command.
	code, out, errOut := c.run("--prefix", "schema", "status")
	if code != exitOK || !strings.Contains(out, "ELECTION") || strings.Contains(out, "CREATE TABLE") {
		t.Errorf("--prefix schema status: %d\n%s%s", code, out, errOut)
	}
	code, out, errOut = c.run("--prefix", "status", "history", "--limit", "5", "status")
	if code != exitNotFound || !strings.Contains(errOut, "status_record") {
		t.Errorf("--prefix status history --limit 5 status: %d\n%s%s", code, out, errOut)
	}
	// After -- a name may start with a dash.
	if code, _, errOut := c.run("status", "--", "-dash"); code != exitNotFound || !strings.Contains(errOut, `"-dash" not found`) {
		t.Errorf("status -- -dash: %d %s", code, errOut)
	}
	// help COMMAND is COMMAND --help.
	code, help, _ := electctl(t, nil, "help", "history")
	if code != exitOK || !strings.HasPrefix(help, "usage: electctl history") || !strings.Contains(help, "-limit") {
		t.Errorf("help history: %d\n%s", code, help)
	}
	if code, out, _ := electctl(t, nil, "history", "--help"); code != exitOK || out != help {
		t.Errorf("history --help: %d\n%s", code, out)
	}
	if code, out, _ := electctl(t, nil, "help"); code != exitOK || !strings.HasPrefix(out, "usage: electctl [flags] COMMAND") {
		t.Errorf("help: %d\n%s", code, out)
	}
	for _, args := range [][]string{{"help", "nosuch"}, {"nosuch"}, {"--json"}, {"status", "a", "b"}} {
		if code, out, errOut := electctl(t, nil, args...); code != exitUsage || out != "" || errOut == "" {
			t.Errorf("%q: %d\n%s%s", args, code, out, errOut)
		}
	}
}

func TestEmptyArgumentsRefused(t *testing.T) {
	c := newCluster(t)
	c.add("cron", "a")
	c.waitLeader("cron")
	c.add("cron", "b")
	waitCandidates(t, c, "cron", 2)
	// An unset $TARGET must not turn a hand-over into a demotion.
	if code, out, errOut := c.run("handover", "cron", ""); code != exitUsage || !strings.Contains(errOut, "ID is empty") {
		t.Errorf("handover cron \"\": %d\n%s%s", code, out, errOut)
	}
	// A demotion would have ended a term by now: the old code waited for
	// the next leader.
	code, out, _ := c.run("history", "cron", "--json")
	if code != exitOK || strings.Contains(out, "demoted") || strings.Contains(out, "handed-over") {
		t.Errorf("the leader was demoted: %d\n%s", code, out)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"status", "cron", "--dsn", ""}, "--dsn is empty"},
		{[]string{"status", "cron", "--prefix="}, "--prefix is empty"},
		{[]string{"status", ""}, "NAME is empty"},
		{[]string{"check", "cron", ""}, "ID is empty"},
		{[]string{"status", "--prefix", "x`; DROP TABLE election_record; --"}, "TablePrefix"},
	} {
		if code, out, errOut := c.run(tc.args...); code != exitUsage || !strings.Contains(errOut, tc.want) {
			t.Errorf("%q: exit %d, want %d and %q\n%s%s", tc.args, code, exitUsage, tc.want, out, errOut)
		}
	}
}

func TestWatchGivesUpReachingTheServer(t *testing.T) {
	// A server that accepts connections and never answers.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var (
		mu    sync.Mutex
		conns []net.Conn
		wg    sync.WaitGroup
	)
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, conn)
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		wg.Wait()
		for _, conn := range conns {
			conn.Close()
		}
	})
	start := time.Now()
	code, out, errOut := electctl(t, nil, "watch", "jobs", "--timeout", "500ms", "--dsn", "u:p@tcp("+ln.Addr().String()+")/d")
	if code != exitError || !strings.Contains(errOut, "cannot reach") || time.Since(start) > 20*time.Second {
		t.Errorf("watch of a silent server: %d after %v\n%s%s", code, time.Since(start), out, errOut)
	}
}

func TestIntervalRangeIsTheLibrarys(t *testing.T) {
	db, err := sql.Open("mysql", "u@tcp(127.0.0.1:1)/d") // NewOperator does no I/O
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	for iv, ok := range map[time.Duration]bool{
		minInterval: true, maxInterval: true, minInterval - 1: false, maxInterval + 1: false,
	} {
		if _, err := election.NewOperator(db, "jobs", election.Config{Interval: iv}); (err == nil) != ok {
			t.Errorf("NewOperator with Interval %v: %v; electctl's --interval range is %s", iv, err, intervalRange())
		}
	}
}

// firstWatchLine runs electctl watch against dsn with args and returns the
// first line it prints, then interrupts it; it must exit cleanly.
func firstWatchLine(t *testing.T, dsn string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := electctlCmd(t, ctx, []string{envDSN + "=" + dsn}, args...)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	line, _ := bufio.NewReader(stdout).ReadString('\n')
	cmd.Process.Signal(os.Interrupt)
	if err := cmd.Wait(); err != nil {
		t.Errorf("watch: %v", err)
	}
	return line
}

// spoof writes rows as anyone with INSERT and UPDATE on the tables can: the
// record's holder and host, a history row and a candidate row of election
// "spoof" (led by candidate "a") holding the given strings.
func spoof(t *testing.T, db *sql.DB, holder, host, reason string) {
	t.Helper()
	// The term writes its history row once it has begun: wait for it. (A
	// loaded machine may have ended that term and begun another: 1 s leases.)
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		var n int
		if err := db.QueryRow("SELECT COUNT(*) FROM election_term").Scan(&n); err == nil && n >= 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the first term wrote no history row within 10s")
		}
	}
	for _, q := range []struct {
		sql  string
		args []any
	}{
		{"UPDATE election_record SET holder = ?, host = ?", []any{holder, host}},
		{"UPDATE election_term SET holder = ?, host = ?", []any{holder, host}},
		{"INSERT INTO election_term (lock_name, epoch, holder, host, pid, started_at, ended_at, reason) " +
			"SELECT lock_name, 0, ?, ?, 1, started_at, started_at, ? FROM election_term WHERE epoch > 0 LIMIT 1", []any{holder, host, reason}},
		{"INSERT INTO election_candidate (lock_name, identity, strategy, host, pid, since, seen_at, expiry_us) " +
			"SELECT lock_name, ?, strategy, ?, 1, since, seen_at, expiry_us FROM election_candidate WHERE identity = 'a'", []any{holder, host}},
	} {
		if _, err := db.Exec(q.sql, q.args...); err != nil {
			t.Fatal(err)
		}
	}
}

// An election that has had terms but has no candidate now is listed as
// having none (exit 0); one that has had neither is not found (4), as
// status and history say. It was "has no candidates", exit 4.
func TestCandidatesOfAnElectionWithNone(t *testing.T) {
	c := newCluster(t)
	c.add("jobs", "a")
	c.waitLeader("jobs")
	c.cancel["a"]() // Run removes its candidate row as it returns
	c.wg.Wait()
	code, out, errOut := c.run("candidates", "jobs")
	if code != exitOK || errOut != "" || out != "no candidates: nobody campaigns in election jobs now\n" {
		t.Errorf("candidates of an election without any: exit %d\n%s%s", code, out, errOut)
	}
	code, out, errOut = c.run("candidates", "jobs", "--json")
	if code != exitOK || errOut != "" || strings.TrimSpace(out) != "[]" {
		t.Errorf("candidates --json of an election without any: exit %d\n%s%s", code, out, errOut)
	}
	code, out, errOut = c.run("candidates", "nosuch")
	if code != exitNotFound || out != "" || !strings.Contains(errOut, `election "nosuch" not found: it has had no term`) {
		t.Errorf("candidates of an election that has had no term: exit %d, want %d\n%s%s", code, exitNotFound, out, errOut)
	}
}

// --json gives times in RFC 3339 to the millisecond, and null for none.
// They were "2026-11-26 01:37:10.318Z", and "-" for none.
func TestJSONTimesAreRFC3339(t *testing.T) {
	c := newCluster(t)
	c.add("jobs", "a")
	c.waitLeader("jobs")
	c.cancel["a"]()
	c.wg.Wait()
	c.add("jobs", "b")
	c.waitLeader("jobs")
	rfc3339 := regexp.MustCompile(`^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$`)
	check := func(what string, v any, none bool) {
		t.Helper()
		if none {
			if v != nil {
				t.Errorf("%s: %#v, want null", what, v)
			}
			return
		}
		s, _ := v.(string)
		if _, err := time.Parse(time.RFC3339, s); err != nil || !rfc3339.MatchString(s) {
			t.Errorf("%s: %#v is not RFC 3339 in UTC to the millisecond", what, v)
		}
	}
	decode := func(args ...string) any {
		t.Helper()
		code, out, errOut := c.run(append(args, "--json")...)
		var v any
		if err := json.Unmarshal([]byte(out), &v); code != exitOK || err != nil {
			t.Fatalf("%q: exit %d, %v\n%s%s", args, code, err, out, errOut)
		}
		return v
	}
	check("status jobs: since", decode("status", "jobs").(map[string]any)["since"], false)
	check("status: since", decode("status").([]any)[0].(map[string]any)["since"], false)
	hist := decode("history", "jobs").([]any)
	if len(hist) != 2 {
		t.Fatalf("history: %d terms, want 2", len(hist))
	}
	check("history: the running term's start", hist[0].(map[string]any)["started"], false)
	check("history: the running term's end", hist[0].(map[string]any)["ended"], true)
	check("history: the first term's end", hist[1].(map[string]any)["ended"], false)
	check("candidates: since", decode("candidates", "jobs").([]any)[0].(map[string]any)["since"], false)
	var ev map[string]any
	if line := firstWatchLine(t, c.dsn, "--json", "watch", "jobs"); json.Unmarshal([]byte(line), &ev) != nil {
		t.Fatalf("watch --json: %q", line)
	}
	check("watch: at", ev["at"], false)
	// And back: the views decode their own JSON.
	var rec recordView
	if code, out, _ := c.run("status", "jobs", "--json"); json.Unmarshal([]byte(out), &rec) != nil || code != exitOK ||
		time.Since(time.Time(rec.Since)) > time.Minute || time.Time(rec.Since).After(time.Now().Add(time.Second)) {
		t.Errorf("status --json decoded: since %v", time.Time(rec.Since))
	}
}

package main

import (
	"database/sql"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sqlelect/election"
	"github.com/sqlelect/election/examples/internal/exampletest"
)

// With QUICKSTART_MAIN set, the binary is an instance TestQuickstart started.
func TestMain(m *testing.M) { exampletest.Main(m, "QUICKSTART_MAIN", main) }

// The README's first code block is this program, word for word.
func TestREADMEShowsThisProgram(t *testing.T) {
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	src, err := os.ReadFile("main.go")
	if err != nil {
		t.Fatal(err)
	}
	_, block, ok := strings.Cut(string(readme), "```go\n")
	block, _, _ = strings.Cut(block, "```")
	program := string(src[strings.Index(string(src), "package main"):])
	if !ok || block != program {
		t.Fatalf("the README's first go block is not examples/quickstart/main.go (from its package clause); copy it over")
	}
}

// Two instances: one leads and works; SIGKILLed, the other takes over with
// a higher token; SIGTERM stops it cleanly.
func TestQuickstart(t *testing.T) {
	ctx := t.Context()
	dsn := exampletest.Database(t, "quickstart")
	db := exampletest.Open(t, dsn)
	if _, err := db.ExecContext(ctx, "CREATE TABLE IF NOT EXISTS work_log (token BIGINT UNSIGNED NOT NULL, done_at DATETIME(6) NOT NULL)"); err != nil {
		t.Fatal(err)
	}
	a := exampletest.Start(t, "QUICKSTART_MAIN", dsn)
	b := exampletest.Start(t, "QUICKSTART_MAIN", dsn)
	ops, err := election.NewOperator(db, "billing", election.Config{})
	if err != nil {
		t.Fatal(err)
	}
	first := exampletest.WaitLeader(t, ops, 0)
	leader, other := a, b
	if first.PID == b.Process.Pid {
		leader, other = b, a
	}
	waitWork(t, db, first.Token)
	leader.Process.Kill()
	leader.Wait()
	second := exampletest.WaitLeader(t, ops, first.Token)
	if second.PID != other.Process.Pid {
		t.Fatalf("after the kill, pid %d leads; want the other instance, %d", second.PID, other.Process.Pid)
	}
	waitWork(t, db, second.Token)
	other.Process.Signal(syscall.SIGTERM)
	if err := other.Wait(); err != nil {
		t.Fatalf("the instance did not stop cleanly on SIGTERM: %v", err)
	}
}

// waitWork waits until the term with token has written.
func waitWork(t *testing.T, db *sql.DB, token uint64) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		var n int
		if err := db.QueryRowContext(t.Context(), "SELECT COUNT(*) FROM work_log WHERE token = ?", token).Scan(&n); err == nil && n > 0 {
			return
		}
	}
	t.Fatalf("the term with token %d wrote nothing within 30s", token)
}

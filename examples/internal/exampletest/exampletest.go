// Package exampletest holds what the examples' tests share: a test main
// that doubles as the example, a database, starting an example as a child
// process, and waiting for a leader.
package exampletest

import (
	"database/sql"
	"os"
	"os/exec"
	"syscall"
	"testing"
	"time"

	"github.com/sqlelect/election"
	"github.com/sqlelect/election/examples/internal/exampledb"
	"github.com/sqlelect/election/internal/leakcheck"
)

// Main is a TestMain body: with env set (by Start) the test binary is the
// example and runs main; otherwise it runs the tests, failing if a goroutine
// outlives them.
func Main(m *testing.M, env string, main func()) {
	if os.Getenv(env) != "" {
		main()
		os.Exit(0)
	}
	os.Exit(leakcheck.Run(m))
}

// Database returns the DSN of a database for the example name, removed when
// the test ends (see exampledb.Open).
func Database(t *testing.T, name string) (dsn string) {
	t.Helper()
	dsn, cleanup, err := exampledb.Open(t.Context(), name)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cleanup)
	return dsn
}

// Open returns a pool on dsn, closed when the test ends.
func Open(t *testing.T, dsn string) *sql.DB {
	t.Helper()
	db, err := sql.Open("mysql", dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

// Start re-runs the test binary with env set (its TestMain then runs the
// example's main) and args, against dsn; the child is killed when the test
// ends, or if the test binary dies first.
func Start(t *testing.T, env, dsn string, args ...string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(os.Args[0], args...)
	cmd.Env = append(os.Environ(), env+"=1", "ELECTION_DSN="+dsn)
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
	})
	return cmd
}

// WaitLeader waits until a candidate leads with a token above after.
func WaitLeader(t *testing.T, e *election.Operator, after uint64) election.Record {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		r, err := e.Leader(t.Context())
		if err == nil && r.Token > after {
			return r
		}
		if time.Now().After(deadline) {
			t.Fatalf("no leader with a token above %d within 30s (last: %v)", after, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

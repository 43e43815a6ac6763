package mysqltest

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/sqlelect/election/internal/leakcheck"
)

// NewDatabase creates a fresh, uniquely named database for one test and
// drops it when the test ends. Because lock names and tables are scoped to a
// database, tests on separate databases never see each other's elections.
func (s *Server) NewDatabase(t testing.TB) (name string) {
	t.Helper()
	b := make([]byte, 6)
	rand.Read(b)
	name = "t_" + hex.EncodeToString(b)
	admin := s.Open(t, "")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := admin.ExecContext(ctx, "CREATE DATABASE `"+name+"`"); err != nil {
		t.Fatalf("mysqltest: creating database %s: %v", name, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		// The server may have been stopped by the test; a missing drop only
		// leaves a database in a throwaway datadir.
		admin.ExecContext(ctx, "DROP DATABASE IF EXISTS `"+name+"`")
	})
	return name
}

// Exec runs statements on the server as its root user, in order, and
// stops at the first that fails.
func (s *Server) Exec(ctx context.Context, stmts ...string) error {
	db, err := sql.Open("mysql", s.DSN(""))
	if err != nil {
		return err
	}
	defer db.Close()
	for _, stmt := range stmts {
		if _, err := db.ExecContext(ctx, stmt); err != nil {
			return fmt.Errorf("mysqltest: %s: %s: %w", s.Addr(), stmt, err)
		}
	}
	return nil
}

// Open returns a pool on database db (empty: none), closed when the test ends.
func (s *Server) Open(t testing.TB, db string) *sql.DB {
	t.Helper()
	pool, err := sql.Open("mysql", s.DSN(db))
	if err != nil {
		t.Fatalf("mysqltest: %v", err)
	}
	t.Cleanup(func() { pool.Close() })
	return pool
}

// Main is a test binary's TestMain body: it starts the server (Start),
// hands it to use, runs the tests (failing if a goroutine outlives them, see
// leakcheck.Run), runs what use returned (if not nil), stops the server,
// and returns the exit code.
func Main(m *testing.M, use func(*Server) (after func())) int {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	s, err := Start(ctx)
	cancel()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer s.Close()
	fmt.Fprintln(os.Stderr, "tests use", s.Describe())
	after := use(s)
	code := leakcheck.Run(m)
	if after != nil {
		after()
	}
	return code
}

// HoldRows locks every row of table through db, as another client's long
// transaction would, until the returned func (or the test's end) releases
// them: writes to them wait meanwhile.
func HoldRows(t testing.TB, db *sql.DB, table string) (release func()) {
	t.Helper()
	tx, err := db.Begin()
	if err != nil {
		t.Fatal(err)
	}
	var n int
	if err := tx.QueryRow("SELECT COUNT(*) FROM `" + table + "` FOR UPDATE").Scan(&n); err != nil {
		t.Fatal(err)
	}
	var once sync.Once
	release = func() { once.Do(func() { tx.Rollback() }) }
	t.Cleanup(release)
	return release
}

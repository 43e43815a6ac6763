package mysqltest

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"testing"
	"time"
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

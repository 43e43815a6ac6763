package mysqltest

import (
	"context"
	"database/sql"
	"sync"
	"testing"
	"time"
)

// A starting mariadbd deletes every #sql* file in its tmpdir. Private
// servers started side by side (test packages run in parallel) must not
// share one, or their bootstraps and temporary tables break each other.
func TestPrivateServersSideBySide(t *testing.T) {
	bin := PrivateBinary()
	if bin == "" {
		t.Skip("no mariadbd or mysqld on PATH")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	const n = 4
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s, err := StartPrivate(ctx, bin)
			if err != nil {
				errs[i] = err
				return
			}
			defer s.Close()
			// A temporary table on disk outlives the start of the other servers.
			db, err := sql.Open("mysql", s.DSN(""))
			if err != nil {
				errs[i] = err
				return
			}
			defer db.Close()
			conn, err := db.Conn(ctx)
			if err != nil {
				errs[i] = err
				return
			}
			defer conn.Close()
			for _, q := range []string{
				"CREATE TEMPORARY TABLE mysql.scratch (a INT) ENGINE=Aria",
				"INSERT INTO mysql.scratch VALUES (1)",
				"SELECT SLEEP(2)",
				"ALTER TABLE mysql.scratch ADD COLUMN b INT",
				"DROP TEMPORARY TABLE mysql.scratch",
			} {
				if _, err := conn.ExecContext(ctx, q); err != nil {
					errs[i] = err
					return
				}
			}
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("server %d: %v", i, err)
		}
	}
}

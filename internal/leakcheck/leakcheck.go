// Package leakcheck finds goroutines that outlive the code that started
// them: the election package's own, and the driver's and database/sql's that
// an unclosed pool or session leaves behind.
package leakcheck

import (
	"fmt"
	"os"
	"runtime"
	"strings"
	"testing"
	"time"
)

// suspects are frames that must not be on any goroutine once every
// elector, term and pool of a test binary is done.
var suspects = []string{
	"github.com/sqlelect/election.",
	"github.com/sqlelect/election/internal/faultproxy.",
	"database/sql.(*DB).connectionOpener",
	"github.com/go-sql-driver/mysql.(*mysqlConn).startWatcher",
}

// Check waits up to limit for leaked goroutines to end and returns an
// error listing those that remain.
func Check(limit time.Duration) error {
	deadline := time.Now().Add(limit)
	for {
		leaked := find()
		if len(leaked) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("leakcheck: %d goroutines outlived their owners:\n\n%s", len(leaked), strings.Join(leaked, "\n\n"))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func find() []string {
	buf := make([]byte, 1<<22)
	buf = buf[:runtime.Stack(buf, true)]
	var leaked []string
	for _, g := range strings.Split(string(buf), "\n\n") {
		if strings.Contains(g, "leakcheck.find") {
			continue
		}
		for _, s := range suspects {
			if strings.Contains(g, s) {
				leaked = append(leaked, g)
				break
			}
		}
	}
	return leaked
}

// Run runs a test binary's tests and fails the run if a goroutine outlives
// them; it returns the exit code, for TestMain.
func Run(m *testing.M) int {
	code := m.Run()
	if code == 0 {
		if err := Check(10 * time.Second); err != nil {
			fmt.Fprintln(os.Stderr, err)
			code = 1
		}
	}
	return code
}

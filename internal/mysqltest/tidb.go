package mysqltest

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
)

// EnvServer names the environment variable that picks the private server:
// "tidb" for a private tidb-server; unset for mariadbd or mysqld.
const EnvServer = "ELECTION_TEST_SERVER"

// EnvTiDBBinary names the environment variable that gives the tidb-server
// binary. scripts/tidb.sh builds one from the module in ./tidb (TiDB's
// dependencies do not coexist with the project's) and sets it.
const EnvTiDBBinary = "ELECTION_TIDB_SERVER"

// tidbBinary returns the tidb-server the harness would run, or an error
// that says how to get one.
func tidbBinary() (string, error) {
	if bin := os.Getenv(EnvTiDBBinary); bin != "" {
		if _, err := os.Stat(bin); err != nil {
			return "", fmt.Errorf("mysqltest: $%s: %w", EnvTiDBBinary, err)
		}
		return bin, nil
	}
	if bin, err := exec.LookPath("tidb-server"); err == nil {
		return bin, nil
	}
	return "", fmt.Errorf("mysqltest: %s=tidb, but no tidb-server: run `. scripts/tidb.sh && ensure_tidb` (scripts/test.sh does), which builds it and sets $%s", EnvServer, EnvTiDBBinary)
}

// StartTiDB starts a private tidb-server, as StartPrivate does, with its own
// unistore storage: an in-process store, so one server, nothing shared.
// Like a private MariaDB it can be killed, paused and booted again on the
// same data.
func StartTiDB(ctx context.Context) (*Server, error) {
	bin, err := tidbBinary()
	if err != nil {
		return nil, err
	}
	return startPrivate(ctx, bin, true)
}

// tidbCommand is a private tidb-server's command line, with extra options
// last. Its status port is any free one: nothing reads it.
func (s *Server) tidbCommand(extra ...string) *exec.Cmd {
	status, _ := FreePort()
	args := []string{"-store=unistore", "-path=" + s.datadir, "-host=127.0.0.1", "-P=" + strconv.Itoa(s.port),
		"-status=" + strconv.Itoa(status), "-log-file=" + s.errorLog(), "-log-slow-query=" + filepath.Join(s.dir, "slow.log"),
		"-socket=" + filepath.Join(s.dir, "tidb.sock")}
	return exec.Command(s.bin, append(append(args, s.options...), extra...)...)
}

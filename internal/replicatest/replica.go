// Package replicatest gives tests a MariaDB primary and a replica of it on
// 127.0.0.1 (GTID; asynchronous or semi-synchronous) and the faults of a
// database failover: replication stopped, the primary SIGKILLed, the
// replica promoted. Both servers are private mysqltest.Servers, started
// from the same packages as the single server. It never mocks the server.
package replicatest

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/sqlelect/election/internal/mysqltest"
)

// Mode is how the primary waits for the replica.
type Mode int

const (
	// Async: the primary commits without waiting; a replica promoted after
	// the primary died may lack its last commits.
	Async Mode = iota
	// SemiSync: a commit returns only once the replica has received it
	// (rpl_semi_sync_master_wait_point = AFTER_SYNC), unless the replica
	// stays silent for Timeout: then the primary goes on asynchronously.
	SemiSync
)

// Timeout is how long a semi-synchronous primary waits for the replica
// before it falls back to asynchronous replication.
const Timeout = 2 * time.Second

// Pair is a primary and its replica.
type Pair struct {
	Primary, Replica *mysqltest.Server
	dir              string
}

// ErrNoServer: there is no server binary to start the pair from.
var ErrNoServer = errors.New("replicatest: no mariadbd or mysqld to start a primary and a replica from: install mariadb-server (scripts/mariadb.sh does)")

// Start starts a primary and a replica that replicates all of it, and
// returns once the replica runs both its threads. The packages must be
// installed (ErrNoServer).
func Start(ctx context.Context, mode Mode) (*Pair, error) {
	bin := mysqltest.PrivateBinary()
	if bin == "" {
		return nil, ErrNoServer
	}
	dir, err := os.MkdirTemp("", "election-replica-")
	if err != nil {
		return nil, err
	}
	p := &Pair{dir: dir}
	if err := p.start(ctx, bin, mode); err != nil {
		p.Close()
		return nil, err
	}
	return p, nil
}

func (p *Pair) start(ctx context.Context, bin string, mode Mode) error {
	server := func(id int, options ...string) (*mysqltest.Server, error) {
		port, err := mysqltest.FreePort()
		if err != nil {
			return nil, err
		}
		s, err := mysqltest.NewPrivate(bin, filepath.Join(p.dir, "s"+strconv.Itoa(id)), port, "", append([]string{
			"--server-id=" + strconv.Itoa(id),
			"--log-bin=binlog",
			"--binlog-format=ROW",
			"--log-slave-updates=ON",
			"--performance-schema=OFF",
		}, options...)...)
		if err != nil {
			return nil, err
		}
		if err := s.Initialize(ctx); err != nil {
			return nil, err
		}
		return s, s.Boot(ctx)
	}
	var primary, replica []string
	if mode == SemiSync {
		primary = []string{"--rpl-semi-sync-master-enabled=ON", "--rpl-semi-sync-master-wait-point=AFTER_SYNC",
			"--rpl-semi-sync-master-timeout=" + strconv.Itoa(int(Timeout.Milliseconds()))}
		replica = []string{"--rpl-semi-sync-slave-enabled=ON"}
	}
	var err error
	if p.Primary, err = server(1, primary...); err != nil {
		return err
	}
	if p.Replica, err = server(2, append(replica, "--read-only=ON")...); err != nil {
		return err
	}
	if err := p.Primary.Exec(ctx, "CREATE USER 'repl'@'127.0.0.1' IDENTIFIED BY 'replpw'",
		"GRANT REPLICATION SLAVE ON *.* TO 'repl'@'127.0.0.1'"); err != nil {
		return err
	}
	_, port, err := net.SplitHostPort(p.Primary.Addr())
	if err != nil {
		return err
	}
	if err := p.Replica.Exec(ctx, "SET GLOBAL gtid_slave_pos = ''",
		"CHANGE MASTER TO MASTER_HOST = '127.0.0.1', MASTER_PORT = "+port+", MASTER_USER = 'repl', MASTER_PASSWORD = 'replpw', "+
			"MASTER_USE_GTID = slave_pos, MASTER_CONNECT_RETRY = 1",
		"START SLAVE"); err != nil {
		return err
	}
	return p.await(ctx, "both replication threads running", func(st status) bool { return st.io == "Yes" && st.sql == "Yes" })
}

// StopReplication stops the replica's I/O thread: from now on it receives
// nothing of what the primary commits.
func (p *Pair) StopReplication(ctx context.Context) error {
	return p.Replica.Exec(ctx, "STOP SLAVE IO_THREAD")
}

// CatchUp waits until the replica has applied every transaction the
// primary has written to its binary log so far, by GTID: what a planned
// failover waits for once the primary takes no more writes.
func (p *Pair) CatchUp(ctx context.Context) error {
	primary, err := sql.Open("mysql", p.Primary.DSN(""))
	if err != nil {
		return err
	}
	defer primary.Close()
	var pos string
	if err := primary.QueryRowContext(ctx, "SELECT @@gtid_binlog_pos").Scan(&pos); err != nil {
		return err
	}
	replica, err := sql.Open("mysql", p.Replica.DSN(""))
	if err != nil {
		return err
	}
	defer replica.Close()
	// In short waits, so that ctx's end is seen: the server does not end a
	// wait whose client has gone.
	for {
		var timedOut int
		if err := replica.QueryRowContext(ctx, "SELECT MASTER_GTID_WAIT(?, 0.1)", pos).Scan(&timedOut); err != nil {
			return fmt.Errorf("replicatest: waiting for the replica to apply %s: %w", pos, err)
		}
		if timedOut == 0 {
			return nil
		}
	}
}

// Promote makes the replica a primary, as a failover does once the primary
// is gone: it applies what it has received, stops replicating, forgets its
// primary and becomes writable.
func (p *Pair) Promote(ctx context.Context) error {
	if err := p.await(ctx, "the replica applied what it received", func(st status) bool { return st.applied }); err != nil {
		return err
	}
	return p.Replica.Exec(ctx, "STOP SLAVE", "RESET SLAVE ALL", "SET GLOBAL read_only = OFF")
}

// SemiSync reports whether the primary waits for the replica now, and how
// many commits it has made without waiting (after it fell back).
func (p *Pair) SemiSync(ctx context.Context) (on bool, unwaited int, err error) {
	db, err := sql.Open("mysql", p.Primary.DSN(""))
	if err != nil {
		return false, 0, err
	}
	defer db.Close()
	var name, status string
	if err := db.QueryRowContext(ctx, "SHOW GLOBAL STATUS LIKE 'Rpl_semi_sync_master_status'").Scan(&name, &status); err != nil {
		return false, 0, err
	}
	if err := db.QueryRowContext(ctx, "SHOW GLOBAL STATUS LIKE 'Rpl_semi_sync_master_no_tx'").Scan(&name, &unwaited); err != nil {
		return false, 0, err
	}
	return status == "ON", unwaited, nil
}

// Close stops both servers and removes their files.
func (p *Pair) Close() {
	for _, s := range []*mysqltest.Server{p.Replica, p.Primary} {
		if s != nil {
			s.Close()
		}
	}
	os.RemoveAll(p.dir)
}

// Describe says what the pair is, for logs.
func (p *Pair) Describe() string {
	return fmt.Sprintf("a MariaDB primary on %s and its replica on %s (files in %s)", p.Primary.Addr(), p.Replica.Addr(), p.dir)
}

// status is the replica's replication state.
type status struct {
	io, sql string
	applied bool // it has applied everything it received
}

func (p *Pair) status(ctx context.Context) (status, error) {
	db, err := sql.Open("mysql", p.Replica.DSN(""))
	if err != nil {
		return status{}, err
	}
	defer db.Close()
	rows, err := db.QueryContext(ctx, "SHOW SLAVE STATUS")
	if err != nil {
		return status{}, err
	}
	defer rows.Close()
	cols, _ := rows.Columns()
	if !rows.Next() {
		return status{}, errors.New("replicatest: the replica replicates from no primary")
	}
	values := make([]sql.NullString, len(cols))
	ptrs := make([]any, len(cols))
	for i := range values {
		ptrs[i] = &values[i]
	}
	if err := rows.Scan(ptrs...); err != nil {
		return status{}, err
	}
	f := map[string]string{}
	for i, c := range cols {
		f[c] = values[i].String
	}
	return status{io: f["Slave_IO_Running"], sql: f["Slave_SQL_Running"],
		applied: f["Master_Log_File"] == f["Relay_Master_Log_File"] && f["Read_Master_Log_Pos"] == f["Exec_Master_Log_Pos"]}, nil
}

// await polls the replica's status until cond holds.
func (p *Pair) await(ctx context.Context, what string, cond func(status) bool) error {
	var last status
	var err error
	for {
		if last, err = p.status(ctx); err == nil && cond(last) {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("replicatest: waiting for %s: %w (last status %+v, %v)\nreplica log:\n%s", what, ctx.Err(), last, err, p.Replica.LogTail(2000))
		case <-time.After(50 * time.Millisecond):
		}
	}
}

package election

// Every difference between the servers the library runs on is decided
// here, from what detectPlatform reads before a candidate's first
// campaign: which strategy the server can serve, and how the statements
// that differ are spelled. docs/protocol.md, "Platforms", gives the
// argument for each; the support table (docs/operations.md, "Which
// servers") says what is tested.

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/go-sql-driver/mysql"
)

// flavor is the server product, as its version string names it.
type flavor int

const (
	mariaDB flavor = iota
	mySQL          // Oracle MySQL, Percona Server, Amazon RDS and Aurora
	tiDB
	vitess // vtgate, in front of MySQL (PlanetScale)
)

// platform is what an Elector learns about the server, from server
// variables anyone may read.
type platform struct {
	version      string // VERSION()
	flavor       flavor
	galera       bool   // wsrep_on: Galera, Percona XtraDB Cluster
	multiPrimary bool   // Group Replication in multi-primary mode
	statementLog bool   // binary logging with binlog_format=STATEMENT
	timeLimit    string // the server's statement time limit variable, "" if it has none
}

func detectPlatform(ctx context.Context, q querier) (platform, error) {
	rows, err := q.QueryContext(ctx, "SHOW GLOBAL VARIABLES WHERE Variable_name IN "+
		"('version', 'wsrep_on', 'group_replication_group_name', 'group_replication_single_primary_mode', 'log_bin', 'binlog_format', "+
		"'max_statement_time', 'max_execution_time')")
	if err != nil {
		return platform{}, fmt.Errorf("election: reading the server's variables: %w", err)
	}
	defer rows.Close()
	vars := map[string]string{}
	for rows.Next() {
		var name, value string
		if err := rows.Scan(&name, &value); err != nil {
			return platform{}, fmt.Errorf("election: reading the server's variables: %w", err)
		}
		vars[strings.ToLower(name)] = value
	}
	if err := rows.Err(); err != nil {
		return platform{}, fmt.Errorf("election: reading the server's variables: %w", err)
	}
	return platformOf(vars), nil
}

func platformOf(vars map[string]string) platform {
	on := func(name string) bool {
		v := strings.ToUpper(vars[name])
		return v == "ON" || v == "1"
	}
	p := platform{
		version:      vars["version"],
		galera:       on("wsrep_on"),
		multiPrimary: vars["group_replication_group_name"] != "" && vars["group_replication_single_primary_mode"] != "" && !on("group_replication_single_primary_mode"),
		statementLog: on("log_bin") && strings.EqualFold(vars["binlog_format"], "STATEMENT"),
	}
	for _, limit := range []string{"max_statement_time", "max_execution_time"} { // MariaDB's, MySQL's and TiDB's
		if _, ok := vars[limit]; ok {
			p.timeLimit = limit
		}
	}
	// Any case: vtgate advertises what its --mysql_server_version says.
	switch version := strings.ToLower(p.version); {
	case strings.Contains(version, "tidb"): // 8.0.11-TiDB-v8.4.0
		p.flavor = tiDB
	case strings.Contains(version, "vitess"): // 8.0.31-Vitess
		p.flavor = vitess
	case strings.Contains(version, "mariadb"):
		p.flavor = mariaDB
	default:
		p.flavor = mySQL
	}
	return p
}

// startBatch is how many term starts one batch takes (starter.flush): its
// read and its claim join a derived table of one SELECT per start, chained
// by UNION ALL. MySQL before 8.0.31 parses such a chain into nodes nested
// one per member (sql/parse_tree_nodes.h: PT_union takes the union before
// it as its left operand; 8.0.31's PT_set_operation merges a chain into one
// node), which it then resolves by recursion, one stack frame per member
// within thread_stack: read, not tested here, so a batch there is ten times
// smaller. MariaDB takes the whole batch (the scale runs of
// docs/benchmarks.md).
func (p platform) startBatch() int {
	if p.flavor == mySQL && versionBefore(p.version, 8, 0, 31) {
		return startBatch / 10
	}
	return startBatch
}

// versionBefore reports whether version (VERSION(): 8.0.30, 8.0.30-log)
// is below major.minor.patch; an unreadable one is not.
func versionBefore(version string, major, minor, patch int) bool {
	var v [3]int
	if n, _ := fmt.Sscanf(version, "%d.%d.%d", &v[0], &v[1], &v[2]); n < 3 {
		return false
	}
	return slices.Compare(v[:], []int{major, minor, patch}) < 0
}

// getLockUnsound says why GET_LOCK cannot hold an election on this server,
// or "" if it can.
func (p platform) getLockUnsound() string {
	switch {
	case p.galera:
		return "runs Galera (wsrep_on=ON), where GET_LOCK holds only on the node that took it, so two nodes could lead at once"
	case p.multiPrimary:
		return "runs Group Replication in multi-primary mode, where GET_LOCK holds only on the member that took it"
	case p.flavor == tiDB:
		// The first two, shown by TestTiDBUserLocks; the third, measured
		// by hand here (../shared/lab/tidb: an hour by default), not by a
		// test.
		return "is TiDB, whose GET_LOCK cannot hold an election: IS_USED_LOCK answers 1 to other sessions, not the holder's session, " +
			"so no one can tell who holds it; KILL does not end a session waiting in GET_LOCK; and a held lock is dropped after max-txn-ttl"
	case p.statementLog:
		// MySQL 8.4 manual, "Determination of Safe and Unsafe Statements in
		// Binary Logging": the locking functions (IS_USED_LOCK among them)
		// are unsafe; a replica re-running such a statement evaluates them
		// on its own sessions. TestStatementLogChoosesTheLease shows
		// MariaDB saying so (warning 1592).
		return "logs statements (binlog_format=STATEMENT), and a GetLock term's start and keepalive change the record and the epoch only while " +
			"IS_USED_LOCK names their session, which a replica re-running the statement cannot see: a promoted replica's record and epoch would " +
			"differ from the primary's; set binlog_format=ROW (MySQL's default) or MIXED (MariaDB's)"
	}
	return ""
}

// strategyFor returns the strategy a candidate configured with s uses on
// this server: s itself, or for Auto the one the server supports, with why
// it was chosen. A GetLock the server cannot serve is refused.
func (p platform) strategyFor(s Strategy) (chosen Strategy, why string, err error) {
	if p.flavor == vitess {
		// Vitess's source, go/vt/vtgate/semantics/errors.go
		// (LockOnlyWithDualError); not tested here.
		return s, "", fmt.Errorf("%w: %s is vtgate, which allows locking functions only in a SELECT without tables, "+
			"and both strategies read IS_USED_LOCK beside their tables: connect the candidates to the keyspace's primary MySQL directly", ErrUnsupported, p.version)
	}
	unsound := p.getLockUnsound()
	switch {
	case s == Auto && unsound != "":
		return LeaseRow, p.version + " " + unsound, nil
	case s == Auto:
		return GetLock, p.version + " holds GET_LOCK for the whole server", nil
	case s == GetLock && unsound != "":
		return s, "", fmt.Errorf("%w: %s %s: use Config.Strategy = election.LeaseRow, or leave it unset to have it chosen", ErrUnsupported, p.version, unsound)
	}
	return s, "", nil
}

// warnings are what a candidate of strategy s, whose deputy checks every
// check, logs about the server at its first campaign.
func (p platform) warnings(s Strategy, check time.Duration) []string {
	var w []string
	if p.statementLog {
		w = append(w, "binlog_format=STATEMENT: replicas re-execute statements, so a fenced write "+
			"that reads nondeterministic values (NOW(), UUID(), LIMIT without ORDER BY) may differ on a replica promoted "+
			"after a failover; prefer binlog_format=ROW or MIXED")
	}
	if s == GetLock && p.flavor == mySQL && check%time.Second != 0 {
		w = append(w, fmt.Sprintf("MySQL waits in GET_LOCK for whole seconds: the deputy checks the leader every %v, not every CheckInterval (%v)",
			time.Duration(p.lockWait(check))*time.Second, check))
	}
	return w
}

// lockWait is the timeout GET_LOCK is given for a wait of d. MariaDB
// takes fractions of a second; MySQL reads the timeout as an integer
// (sql/item_func.cc, Item_func_get_lock::val_int: args[1]->val_int(),
// rounded), so a wait under half a second would become GET_LOCK(name, 0)
// and the deputy would loop without pause. There a wait under a second
// waits one, and a longer one is rounded down, never past d: d may have
// been shortened to fit under a DSN's readTimeout (readLimit), which then
// must exceed a second. A try (0) stays 0.
func (p platform) lockWait(d time.Duration) float64 {
	if p.flavor == mariaDB || d <= 0 {
		return d.Seconds()
	}
	return max(math.Floor(d.Seconds()), 1)
}

// sessionSetup is the statement that sets up a pinned session: its
// wait_timeout w, its row and metadata lock waits 2w, and no statement
// time limit, which a DBA may set globally and which would cut a queued
// candidate's hour-long GET_LOCK: MariaDB's max_statement_time, or MySQL's
// max_execution_time, which applies to every top-level SELECT (MySQL
// manual, "Server System Variables"); whichever the server lists, so that
// a proxy that rewrites the version, or a MySQL older than 5.7.8, is not
// sent a variable it lacks.
func (p platform) sessionSetup(w int64) string {
	setup := fmt.Sprintf("SET SESSION wait_timeout = %d, innodb_lock_wait_timeout = %d, lock_wait_timeout = %d", w, 2*w, 2*w)
	if p.timeLimit != "" {
		setup += ", " + p.timeLimit + " = 0"
	}
	return setup
}

// setWaitTimeout is the statement that gives a session wait_timeout w,
// inside transactions too: TiDB ends a session idle inside a transaction
// after tidb_idle_transaction_timeout when that is set (a DBA's global),
// else after wait_timeout (TiDB manual, "System Variables").
func (p platform) setWaitTimeout(w int64) string {
	if p.flavor == tiDB {
		return fmt.Sprintf("SET SESSION wait_timeout = %d, tidb_idle_transaction_timeout = %d", w, w)
	}
	return fmt.Sprintf("SET SESSION wait_timeout = %d", w)
}

// resetWaitTimeout undoes setWaitTimeout, for a session going back to the
// pool.
func (p platform) resetWaitTimeout() string {
	if p.flavor == tiDB {
		return "SET SESSION wait_timeout = DEFAULT, tidb_idle_transaction_timeout = DEFAULT"
	}
	return "SET SESSION wait_timeout = DEFAULT"
}

// fenceLock is how a fenced transaction's check read locks the epoch row,
// so that the next term's bump waits for the transaction to end. A shared
// lock, where the server has one: TiDB refuses LOCK IN SHARE MODE (error
// 1235), or with tidb_enable_noop_functions takes no lock at all; its FOR
// UPDATE locks (TestFencedWriteCommitsBeforeTheNextTerm). On Galera and
// multi-primary Group Replication the row is also written (certifies),
// which needs the exclusive lock anyway.
func (p platform) fenceLock() string {
	if p.flavor == tiDB || p.certifies() {
		return " FOR UPDATE"
	}
	return " LOCK IN SHARE MODE"
}

// certifies reports a multi-primary cluster, where a row lock holds only
// on the member that took it and a transaction commits only if no write
// set committed before it touched the same rows: Galera, and Group
// Replication in multi-primary mode (MySQL manual, "Group Replication",
// "Transaction Checks" and "Multi-Primary Mode").
func (p platform) certifies() bool { return p.galera || p.multiPrimary }

// killsCommits reports whether a fenced transaction's COMMIT still in
// flight after its term may be cut by killing its session (fencedTxn.commit).
// Not on a multi-primary cluster, where the pool may reach another member;
// not on TiDB, whose build tested here panics, and so ends every session,
// when a session with uncommitted writes is killed ("Query execution was
// interrupted" from its memory tracker; TestFencedDoesNotRetryOnceFnRan
// meets it).
func (p platform) killsCommits() bool { return !p.certifies() && p.flavor != tiDB }

// causalRead is the statement after which a session's reads see every
// write set the cluster committed before them: wsrep_sync_wait on Galera,
// group_replication_consistency = BEFORE on Group Replication (MySQL
// manual, "Transaction Consistency Guarantees"); "" elsewhere.
func (p platform) causalRead() string {
	switch {
	case p.galera:
		return "SET SESSION wsrep_sync_wait = 1"
	case p.multiPrimary:
		return "SET SESSION group_replication_consistency = 'BEFORE'"
	}
	return ""
}

// conflict reports a transaction aborted for a conflict with another
// session's. Nothing of it was written; in a campaign it is a lost race.
// A deadlock on one server, a certification failure or a brute-force abort
// on Galera: 1213. A certification failure on Group Replication: 3101
// (1180 before MySQL 8.0), read from MySQL's manual ("Group Replication",
// "Transaction Checks"; error reference), not tested here. A write
// conflict of TiDB's optimistic transactions: 9007 (TiDB manual, "Error
// Codes").
func conflict(err error) bool { return serverError(err, 1213, 3101, 1180, 9007) }

// denied reports a statement refused for want of a privilege: a command
// denied on a table (1142), a privilege denied (1227), or TiDB's "privilege
// check for 'Update' fail" (8121; TestLeaseTermSurvivesAFailedHeartbeat
// meets it on TiDB).
func denied(err error) bool { return serverError(err, 1142, 1227, 8121) }

// readOnly reports a write the server refused because it is read-only,
// whoever the user: it is not the primary, or no longer (a failover that
// left it up, read-only, as Aurora, RDS and orchestrator do; or a DSN
// that names a replica). MariaDB refuses with 1290 under read_only (the
// failover tests of internal/replicatest), and with 1036 ("Table ... is
// read only") a write to an InnoDB table under innodb_read_only (tried by
// hand here, not by a test); MySQL with 1290 under read_only and
// super_read_only, and 1036 under innodb_read_only (ha_innodb.cc returns
// HA_ERR_TABLE_READONLY; by its source, not tested here); TiDB with 1836
// under tidb_super_read_only and tidb_restricted_read_only
// (pkg/planner/optimize.go, plannererrors.ErrSQLInReadOnlyMode; by its
// source, not tested here). Error 1290 names other options too: only the
// read-only ones count. A session made read-only (transaction_read_only,
// as some proxies set it on a replica's connections) refuses with 1792:
// the same for the library, which writes on every session it takes.
func readOnly(err error) bool {
	var me *mysql.MySQLError
	if !errors.As(err, &me) {
		return false
	}
	switch me.Number {
	case 1036, 1792, 1836:
		return true
	case 1290:
		m := strings.ToLower(me.Message)
		return strings.Contains(m, "read-only") || strings.Contains(m, "read_only")
	}
	return false
}

// serverError reports whether err is a server error with one of numbers.
func serverError(err error, numbers ...uint16) bool {
	var me *mysql.MySQLError
	return errors.As(err, &me) && slices.Contains(numbers, me.Number)
}

// First use: before its first campaign a candidate learns the election's
// lock name, the server, and its strategy, and makes sure of the tables.
// What does not depend on the election (the database, the server, the
// tables) is learnt once per pool and table prefix, by the first candidate
// that needs it, while the others on the pool wait (firstUse): a process
// that starts thousands of candidates at once checks once, rather than
// sending each check thousands of times over as many new connections,
// which stalled the keepalives of other processes' leaders.

// refusal wraps err in ErrAccessDenied, with the fix, when the server
// refused the login with it: any statement through the pool may open a
// session, and so meet a password changed or a grant revoked since the
// last; and in ErrSessionLost when it refused a write as read-only (the
// session that got it is dropped: see release). A connection the driver
// dropped mid-statement gets the causes named, readTimeout among them.
// Other errors come back as they are.
func refusal(err error) error {
	var me *mysql.MySQLError
	if errors.Is(err, mysql.ErrInvalidConn) && !errors.Is(err, ErrSessionLost) {
		// What the driver returns when its own deadline cut a statement,
		// as for a network fault: a *sql.DB does not show its DSN.
		return fmt.Errorf("%w; the driver dropped the connection in the middle of a statement: the network or the server failed, "+
			"or the DSN's readTimeout or writeTimeout is shorter than the statement took (lock waits fit under a readTimeout by themselves; "+
			"every other statement needs it above its slowest, a second or more)", err)
	}
	if errors.Is(err, ErrAccessDenied) || errors.Is(err, ErrSessionLost) || !errors.As(err, &me) {
		return err
	}
	if readOnly(err) {
		return fmt.Errorf("%w: %w; the server is read-only: it is not the primary, or no longer (a failover of the database, or a DSN that names a replica): "+
			"the session that got this is dropped, and the next one dials the DSN's address again", ErrSessionLost, err)
	}
	switch me.Number {
	case 1045:
		return fmt.Errorf("%w: %w; check the DSN's user and password", ErrAccessDenied, err)
	case 1044:
		return fmt.Errorf("%w: %w; grant the DSN's user privileges on its database, or name another", ErrAccessDenied, err)
	case 1049:
		return fmt.Errorf("%w: %w; create the database, or name an existing one in the DSN", ErrAccessDenied, err)
	}
	return err
}

// release gives conn back to the pool, or drops it if err is the server's
// refusal to write as read-only: database/sql keeps a session that got a
// server's error, so a pool whose sessions reach an old primary, left up
// read-only by a failover, would never reach the new one.
func release(conn *sql.Conn, err error) {
	if readOnly(err) {
		drop(conn)
		return
	}
	conn.Close()
}

// write runs one write through the pool db, on a session it then releases
// (release), and returns its error as refusal does. A session the driver
// finds dead before it sent anything (driver.ErrBadConn) is replaced, as
// DB.ExecContext does.
func write(ctx context.Context, db *sql.DB, query string) (sql.Result, error) {
	for try := 0; ; try++ {
		conn, err := db.Conn(ctx)
		if err != nil {
			return nil, refusal(err)
		}
		res, err := conn.ExecContext(ctx, query)
		release(conn, err)
		if errors.Is(err, driver.ErrBadConn) && try < 2 {
			continue
		}
		return res, refusal(err)
	}
}

package election

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
)

// The server variables are global and cannot be faked on a real server, so
// the rules are tested through platformOf, the seam that turns variables
// into a platform; detectPlatform itself runs before every first campaign
// of the suite against the real server (MariaDB, Galera, TiDB).
func TestPlatformChecks(t *testing.T) {
	const (
		mariadb = "10.11.19-MariaDB-0+deb12u1"
		mysql84 = "8.4.3"
		tidb    = "8.0.11-TiDB-v8.4.0"
	)
	cases := []struct {
		name       string
		vars       map[string]string
		strategy   Strategy
		chosen     Strategy // for Auto, and for an accepted choice
		refused    string   // in the error, "" if accepted
		warnsAbout string
	}{
		{"standalone MariaDB", map[string]string{"version": mariadb, "wsrep_on": "OFF", "log_bin": "OFF"}, Auto, GetLock, "", ""},
		{"Galera refuses GET_LOCK", map[string]string{"version": "10.11.6-MariaDB", "wsrep_on": "ON"}, GetLock, 0, "LeaseRow", ""},
		{"Galera chooses the lease", map[string]string{"version": "10.11.6-MariaDB", "wsrep_on": "ON"}, Auto, LeaseRow, "", ""},
		{"Galera takes the lease", map[string]string{"wsrep_on": "ON"}, LeaseRow, LeaseRow, "", ""},
		{"multi-primary Group Replication refuses GET_LOCK", map[string]string{"version": mysql84, "group_replication_group_name": "aaaa-bbbb", "group_replication_single_primary_mode": "OFF"}, GetLock, 0, "multi-primary", ""},
		{"multi-primary Group Replication chooses the lease", map[string]string{"version": mysql84, "group_replication_group_name": "aaaa-bbbb", "group_replication_single_primary_mode": "OFF"}, Auto, LeaseRow, "", ""},
		{"single-primary Group Replication", map[string]string{"version": mysql84, "group_replication_group_name": "aaaa-bbbb", "group_replication_single_primary_mode": "ON"}, Auto, GetLock, "", "whole seconds"},
		{"TiDB refuses GET_LOCK", map[string]string{"version": tidb}, GetLock, 0, "IS_USED_LOCK", ""},
		{"TiDB chooses the lease", map[string]string{"version": tidb}, Auto, LeaseRow, "", ""},
		{"vtgate refuses the lease", map[string]string{"version": "8.0.31-Vitess"}, LeaseRow, 0, "vtgate", ""},
		{"vtgate refuses either", map[string]string{"version": "8.0.31-Vitess"}, Auto, 0, "vtgate", ""},
		{"vtgate in any case", map[string]string{"version": "8.0.31-vitess"}, Auto, 0, "vtgate", ""},
		{"MySQL's GET_LOCK waits whole seconds", map[string]string{"version": mysql84}, GetLock, GetLock, "", "whole seconds"},
		{"MySQL's lease does not wait in GET_LOCK", map[string]string{"version": mysql84}, LeaseRow, LeaseRow, "", ""},
		{"statement-based binary log refuses GET_LOCK", map[string]string{"version": mariadb, "log_bin": "ON", "binlog_format": "STATEMENT"}, GetLock, 0, "binlog_format=ROW", ""},
		{"statement-based binary log chooses the lease, and warns", map[string]string{"version": mariadb, "log_bin": "ON", "binlog_format": "STATEMENT"}, Auto, LeaseRow, "", "binlog_format=STATEMENT"},
		{"statement-based binary log off", map[string]string{"version": mariadb, "log_bin": "OFF", "binlog_format": "STATEMENT"}, Auto, GetLock, "", ""},
		{"row-based binary log", map[string]string{"version": mariadb, "log_bin": "ON", "binlog_format": "ROW"}, LeaseRow, LeaseRow, "", ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p := platformOf(tc.vars)
			chosen, why, err := p.strategyFor(tc.strategy)
			if tc.refused == "" && err != nil {
				t.Fatalf("refused: %v", err)
			}
			if tc.refused != "" {
				if !errors.Is(err, ErrUnsupported) || !strings.Contains(err.Error(), tc.refused) ||
					tc.strategy == GetLock && !strings.Contains(err.Error(), "election.LeaseRow") {
					t.Fatalf("got %v, want ErrUnsupported naming %s (and LeaseRow, for GetLock)", err, tc.refused)
				}
				return
			}
			if chosen != tc.chosen {
				t.Fatalf("chose %v, want %v", chosen, tc.chosen)
			}
			if (tc.strategy == Auto) != (why != "") {
				t.Fatalf("why %q: want one exactly when the strategy was chosen", why)
			}
			if got := strings.Join(p.warnings(chosen, 200*time.Millisecond), "\n"); !strings.Contains(got, tc.warnsAbout) || (tc.warnsAbout == "") != (got == "") {
				t.Fatalf("warnings %q, want about %q", got, tc.warnsAbout)
			}
		})
	}
}

// The statements that differ between servers, as each flavour gets them.
func TestPlatformStatements(t *testing.T) {
	mariadb := platformOf(map[string]string{"version": "10.11.19-MariaDB"})
	mysql := platformOf(map[string]string{"version": "8.0.36"})
	percona := platformOf(map[string]string{"version": "8.0.36-28"})
	tidb := platformOf(map[string]string{"version": "8.0.11-TiDB-v8.4.0"})
	galera := platformOf(map[string]string{"version": "10.11.6-MariaDB", "wsrep_on": "ON"})
	group := platformOf(map[string]string{"version": "8.4.3", "group_replication_group_name": "g", "group_replication_single_primary_mode": "OFF"})
	if mariadb.flavor != mariaDB || mysql.flavor != mySQL || percona.flavor != mySQL || tidb.flavor != tiDB {
		t.Fatalf("flavours: %v %v %v %v", mariadb.flavor, mysql.flavor, percona.flavor, tidb.flavor)
	}
	for _, c := range []struct {
		p    platform
		wait time.Duration
		want float64
	}{
		{mariadb, 200 * time.Millisecond, 0.2},
		{mysql, 200 * time.Millisecond, 1},  // not 0, which would make the deputy spin
		{mysql, 1500 * time.Millisecond, 1}, // never past the wait: it may fit a readTimeout
		{mysql, time.Hour, 3600},
		{mysql, 0, 0}, // a try
		{mariadb, 0, 0},
	} {
		if got := c.p.lockWait(c.wait); got != c.want {
			t.Errorf("%s: lockWait(%v) = %v, want %v", c.p.version, c.wait, got, c.want)
		}
	}
	for vars, want := range map[string]string{"max_statement_time": "max_statement_time = 0", "max_execution_time": "max_execution_time = 0", "": ""} {
		p := platformOf(map[string]string{"version": "10.11.19-MariaDB-proxied", vars: "0"})
		got := p.sessionSetup(6)
		if !strings.Contains(got, "wait_timeout = 6") || !strings.Contains(got, want) || want == "" && strings.Contains(got, "_time = 0") {
			t.Errorf("a server listing %q: session setup %q, want wait_timeout = 6 and %q", vars, got, want)
		}
	}
	for p, want := range map[*platform]string{&mariadb: " LOCK IN SHARE MODE", &mysql: " LOCK IN SHARE MODE", &tidb: " FOR UPDATE", &galera: " FOR UPDATE", &group: " FOR UPDATE"} {
		if got := p.fenceLock(); got != want {
			t.Errorf("%s: fence lock %q, want %q", p.version, got, want)
		}
	}
	if w := mysql.warnings(GetLock, 2*time.Second); len(w) != 0 {
		t.Errorf("MySQL with a whole-second CheckInterval: %q, want no warning", w)
	}
	if w := strings.Join(mysql.warnings(GetLock, 1500*time.Millisecond), ""); !strings.Contains(w, "every 1s") {
		t.Errorf("MySQL with CheckInterval 1.5s: %q, want the deputy's 1s", w)
	}
	if !strings.Contains(tidb.setWaitTimeout(6), "tidb_idle_transaction_timeout = 6") || strings.Contains(mysql.setWaitTimeout(6), "tidb") {
		t.Errorf("wait_timeout: TiDB %q, MySQL %q", tidb.setWaitTimeout(6), mysql.setWaitTimeout(6))
	}
	if galera.killsCommits() || group.killsCommits() || tidb.killsCommits() || !mysql.killsCommits() || !mariadb.killsCommits() {
		t.Error("a COMMIT past its term is killed on a single MySQL or MariaDB server only")
	}
	if !galera.certifies() || !group.certifies() || mysql.certifies() || tidb.certifies() {
		t.Error("only Galera and multi-primary Group Replication certify write sets")
	}
	if galera.causalRead() != "SET SESSION wsrep_sync_wait = 1" || !strings.Contains(group.causalRead(), "group_replication_consistency") || mysql.causalRead() != "" {
		t.Errorf("causal reads: %q %q %q", galera.causalRead(), group.causalRead(), mysql.causalRead())
	}
}

// Every user lock the library takes fits in 64 characters, the limit of
// MySQL 5.7+ and TiDB (TestTiDBUserLocks shows TiDB's; MySQL manual,
// "Locking Functions"), whatever the election's name and database.
func TestLockNamesFit(t *testing.T) {
	long := strings.Repeat("é", 300)
	lock := lockName(strings.Repeat("d", 64), strings.Repeat("p", 20), long)
	for _, name := range []string{lock, deputyLock(lock), candidateLock(lock, long)} {
		if n := len(name); n > 64 {
			t.Errorf("%q is %d bytes", name, n)
		}
	}
}

// A vtgate whose advertised version does not say Vitess passes detection;
// its refusal of IS_USED_LOCK beside a table, at the candidate's first
// statement that has one, is ErrUnsupported naming the fix. The message is
// Vitess's (go/vt/vtgate/semantics/errors.go, LockOnlyWithDualError): no
// vtgate runs here.
func TestVtgateRefusalIsUnsupported(t *testing.T) {
	refusal := &mysql.MySQLError{Number: 1235, Message: "is_used_lock(concat('election-candidate/', left(sha2(concat(c.lock_name, '/', c.identity), 256), 40))) allowed only with dual"}
	err := schemaError(tablesFor(DefaultTablePrefix), fmt.Errorf("reading the candidates: %w", refusal))
	if !errors.Is(err, ErrUnsupported) || !strings.Contains(err.Error(), "primary MySQL directly") {
		t.Fatalf("got %v, want ErrUnsupported naming the fix", err)
	}
}

// A batched start takes fewer elections on MySQL before 8.0.31, whose
// parser nests a UNION ALL chain one node per member.
func TestStartBatchByServer(t *testing.T) {
	for version, want := range map[string]int{
		"8.0.30": 100, "5.7.44-log": 100, "8.0.31": 1000, "8.4.3": 1000, "9.1.0": 1000,
		"10.11.19-MariaDB-0+deb12u1": 1000, "8.0.11-TiDB-v8.4.0": 1000, "8.0.30-Vitess": 1000, "unreadable": 1000,
	} {
		if got := platformOf(map[string]string{"version": version}).startBatch(); got != want {
			t.Errorf("%s: a batch of %d, want %d", version, got, want)
		}
	}
}

package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
)

// newUser creates on the test server the account 'user'@'%' with password
// pw and the given GRANTs (%s stands for the account, %db for the
// database), dropped when the test ends, and returns a DSN of database
// dbName as that user.
func newUser(t *testing.T, dbName, user, pw string, grants ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	account := "'" + user + "'@'%'"
	stmts := []string{"CREATE USER " + account + " IDENTIFIED BY '" + pw + "'"}
	for _, g := range grants {
		stmts = append(stmts, strings.NewReplacer("%s", account, "%db", "`"+dbName+"`").Replace(g))
	}
	if err := server.Exec(ctx, stmts...); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { server.Exec(context.Background(), "DROP USER IF EXISTS "+account) })
	cfg := server.Config(dbName)
	cfg.User, cfg.Passwd = user, pw
	return cfg.FormatDSN()
}

// dbName is the database of the cluster's DSN.
func (c *cluster) dbName() string {
	c.t.Helper()
	cfg, err := mysql.ParseDSN(c.dsn)
	if err != nil {
		c.t.Fatal(err)
	}
	return cfg.DBName
}

// oneLineOf fails the test unless errOut is one line, and returns it.
func oneLineOf(t *testing.T, what, errOut string) string {
	t.Helper()
	if strings.Count(errOut, "\n") != 1 || !strings.HasSuffix(errOut, "\n") || !strings.HasPrefix(errOut, "electctl: ") {
		t.Errorf("%s: want one line on stderr, starting \"electctl: \", got:\n%s", what, errOut)
	}
	return errOut
}

// A login the server refuses is refused (5), a database it does not have
// is not found (4): each in one line that says what to fix, and never the
// password. They were "cannot reach", exit 1.
func TestRefusedLoginAndUnknownDatabase(t *testing.T) {
	c := newCluster(t)
	db := c.dbName()
	user := "u" + strings.TrimPrefix(db, "t")
	good := newUser(t, db, user, "s3cr3tPW", "GRANT SELECT ON %db.* TO %s")
	cfg, _ := mysql.ParseDSN(good)
	cfg.Passwd = "wr0ngPW"
	code, out, errOut := electctl(t, []string{envDSN + "=" + cfg.FormatDSN()}, "status")
	line := oneLineOf(t, "a wrong password", errOut)
	if code != exitRefused || out != "" || !strings.Contains(line, "refused the login") || !strings.Contains(line, "Error 1045") ||
		!strings.Contains(line, "check the user and password in $ELECTION_DSN") || strings.Contains(line, "wr0ngPW") ||
		strings.Contains(line, "anonymous") { // the server skips name resolution: the login is from 127.0.0.1
		t.Errorf("a wrong password: exit %d, want %d\n%s%s", code, exitRefused, out, errOut)
	}
	code, _, errOut = electctl(t, []string{envDSN + "=" + cfg.FormatDSN()}, "run", "jobs", "--", "true")
	if line := oneLineOf(t, "run with a wrong password", errOut); code != exitRefused || !strings.Contains(line, "refused the login") {
		t.Errorf("run with a wrong password: exit %d, want %d\n%s", code, exitRefused, errOut)
	}
	// Root may see every database: the server tells it that one is
	// missing (1049), where it refuses a user who has no rights to it
	// (1044, below).
	cfg.Passwd = "s3cr3tPW"
	root := server.Config("nosuch_" + strings.TrimPrefix(db, "t_"))
	code, out, errOut = electctl(t, nil, "history", "jobs", "--dsn", root.FormatDSN())
	line = oneLineOf(t, "an unknown database", errOut)
	if code != exitNotFound || out != "" || !strings.Contains(line, "no database `"+root.DBName+"`") || !strings.Contains(line, "in --dsn") ||
		strings.Contains(line, "s3cr3tPW") {
		t.Errorf("an unknown database: exit %d, want %d\n%s%s", code, exitNotFound, out, errOut)
	}
	// A database the user has no rights to: the server refuses it (1044),
	// whether or not it exists.
	cfg.DBName = server.NewDatabase(t)
	code, out, errOut = electctl(t, []string{envDSN + "=" + cfg.FormatDSN()}, "candidates", "jobs")
	line = oneLineOf(t, "a database not granted", errOut)
	if code != exitRefused || out != "" || !strings.Contains(line, "refused the login to database `"+cfg.DBName+"`") || !strings.Contains(line, "Error 1044") {
		t.Errorf("a database not granted: exit %d, want %d\n%s%s", code, exitRefused, out, errOut)
	}

	// The README's own set-up once made this: mariadb-install-db without
	// --skip-test-db creates an anonymous ''@'localhost', which takes a
	// login from localhost (here through the socket) before 'user'@'%'
	// can, though the password is right.
	t.Run("anonymous user", func(t *testing.T) {
		if !server.Private() {
			t.Skipf("the test server (%s) is not the harness's own, whose accounts the test may change", server.Describe())
		}
		var socket string
		if err := server.Open(t, "").QueryRow("SELECT @@socket").Scan(&socket); err != nil {
			t.Fatal(err)
		}
		// The tests log in over TCP from 127.0.0.1, and the server skips
		// name resolution: none is taken by this account but this test's.
		if err := server.Exec(context.Background(), "CREATE USER ''@'localhost'"); err != nil {
			t.Fatal(err)
		}
		defer server.Exec(context.Background(), "DROP USER IF EXISTS ''@'localhost'")
		local := mysql.NewConfig()
		local.User, local.Passwd, local.Net, local.Addr, local.DBName = user, "s3cr3tPW", "unix", socket, db
		env := []string{envDSN + "=" + local.FormatDSN()}
		code, out, errOut := electctl(t, env, "status")
		line := oneLineOf(t, "a login taken by the anonymous user", errOut)
		if code != exitRefused || !strings.Contains(line, "'"+user+"'@'localhost'") || !strings.Contains(line, "anonymous user ''@'localhost'") ||
			!strings.Contains(line, "DROP USER ''@'localhost'") {
			t.Errorf("a login taken by the anonymous user: exit %d, want %d and the hint\n%s%s", code, exitRefused, out, errOut)
		}
		// The fix the hint names: the login goes through, to a database
		// without the tables.
		if err := server.Exec(context.Background(), "DROP USER ''@'localhost'"); err != nil {
			t.Fatal(err)
		}
		if code, out, errOut := electctl(t, env, "status"); code != exitNotFound || !strings.Contains(errOut, "no election tables") {
			t.Errorf("without the anonymous user: exit %d, want %d\n%s%s", code, exitNotFound, out, errOut)
		}
	})
}

// Read-only commands on a database without the tables say so in one line,
// with the fix, and exit 4: no DDL, no Config field.
func TestMissingTablesIsOneLine(t *testing.T) {
	c := newCluster(t)
	db := c.dbName()
	for _, args := range [][]string{
		{"status"}, {"status", "jobs"}, {"history", "jobs"}, {"candidates", "jobs"}, {"check", "jobs", "a"}, {"watch", "jobs"},
		{"watch", "jobs", "--prefix", "other"}, {"status", "--prefix", "other", "--json"},
	} {
		code, out, errOut := c.run(args...)
		line := oneLineOf(t, strings.Join(args, " "), errOut)
		schema, table := "`electctl schema` prints the DDL", "election_record"
		if strings.Contains(strings.Join(args, " "), "other") {
			schema, table = "`electctl schema --prefix other` prints the DDL", "other_record"
		}
		if code != exitNotFound || out != "" || !strings.Contains(line, "no election tables") || !strings.Contains(line, "database `"+db+"`") ||
			!strings.Contains(line, table) || !strings.Contains(line, schema) || !strings.Contains(line, "$ELECTION_DSN") ||
			strings.Contains(line, "CREATE") || strings.Contains(line, "Config") {
			t.Errorf("%q: exit %d, want %d and one line naming the fix\n%s%s", args, code, exitNotFound, out, errOut)
		}
	}
	assertNoTables(t, db, "read-only commands on a database without the tables")
}

// A user that may not read the tables is refused (5), in one line that
// names the grant; watch says so at once rather than retry.
func TestDeniedReadIsOneLine(t *testing.T) {
	c := newCluster(t)
	c.add("jobs", "a")
	c.waitLeader("jobs")
	db := c.dbName()
	dsn := newUser(t, db, "v"+strings.TrimPrefix(db, "t"), "pw", "GRANT SELECT ON %db.election_term TO %s")
	for _, args := range [][]string{{"status", "jobs"}, {"watch", "jobs"}, {"history", "jobs"}} {
		code, out, errOut := electctl(t, []string{envDSN + "=" + dsn}, args...)
		line := oneLineOf(t, strings.Join(args, " "), errOut)
		if code != exitRefused || out != "" || !strings.Contains(line, "SELECT command denied") || !strings.Contains(line, "election_record") ||
			!strings.Contains(line, "Set-up for DBAs") {
			t.Errorf("%q: exit %d, want %d\n%s%s", args, code, exitRefused, out, errOut)
		}
	}
}

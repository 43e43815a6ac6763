package main

import (
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"

	"github.com/go-sql-driver/mysql"

	"github.com/sqlelect/election"
)

// What went wrong, as one line on stderr that says what electctl could not
// do and the fix, and the exit code for it. The library's messages are
// written for programs that use it (Config fields, the DDL in full); an
// operator gets electctl's own words for the failures an operator meets:
// a login or a database the server refused, tables that are not there, a
// missing grant.

// serverError returns the server's error that err wraps, or nil.
func serverError(err error) *mysql.MySQLError {
	var me *mysql.MySQLError
	if errors.As(err, &me) {
		return me
	}
	return nil
}

// denied reports whether the server refused a privilege.
func denied(err error) bool {
	me := serverError(err)
	return me != nil && (me.Number == 1142 || me.Number == 1227 || me.Number == 8121)
}

// explain gives the line (without "electctl: ") that tells the operator
// what err kept electctl from doing and how to fix it, and the exit code.
func (c *cli) explain(err error) (string, int) {
	if line, code, ok := c.refused(err); ok {
		return line, code
	}
	me := serverError(err)
	switch {
	case errors.Is(err, election.ErrSchema) && me != nil && me.Number == 1146: // no such table
		schema := "electctl schema"
		if c.prefix != "" && c.prefix != election.DefaultTablePrefix {
			schema += " --prefix " + c.prefix
		}
		return fmt.Sprintf("no election tables with prefix %q in database %s (%v): wrong --prefix, or wrong database in %s? "+
			"`%s` prints the DDL a DBA can run to create them; candidates create them on first use", c.prefix, c.database(), me, c.dsnFrom, schema), exitNotFound
	case errors.Is(err, election.ErrSchema) && denied(err):
		// The server says "denied", not "doesn't exist", to a user with no
		// grant on a table: the prefix may be wrong too.
		return fmt.Sprintf("the server refused a privilege on the election tables in database %s: %v; grant what it names "+
			"(docs/operations.md, \"Set-up for DBAs\", lists what readers, operators and candidates need), or pass --prefix if the tables' prefix is not %q",
			c.database(), me, c.prefix), exitRefused
	}
	code := exitError
	switch {
	case errors.Is(err, election.ErrNoLeader):
		code = exitNoLeader
	case errors.Is(err, election.ErrSchema):
		code = exitNotFound
	case errors.Is(err, election.ErrNotCandidate), errors.Is(err, election.ErrKillDenied), errors.Is(err, election.ErrAccessDenied), errors.Is(err, election.ErrInUse):
		code = exitRefused
	case errors.Is(err, election.ErrInvalidConfig):
		code = exitUsage
	}
	return oneLine(err.Error()), code
}

// refused gives the line and exit code for a login or a database the
// server refused, which the driver returns as it is (reaching the server)
// and the library wraps in ErrAccessDenied; ok is false for other errors.
// A missing database is not found (4), as missing tables are; MySQL tells
// a user who has no rights to a database that it is refused (1044), not
// missing, so 4 means the server admitted that the database is absent.
func (c *cli) refused(err error) (line string, code int, ok bool) {
	me := serverError(err)
	if me == nil {
		return "", 0, false
	}
	switch me.Number {
	case 1045: // access denied: user or password
		line = fmt.Sprintf("the server %s refused the login: %v; check the user and password in %s", c.server(), me, c.dsnFrom)
		if strings.Contains(me.Message, "'@'localhost'") && c.cfg != nil && c.cfg.User != "" {
			// MariaDB and MySQL match a login to the account with the most
			// specific host first, whatever its user: an anonymous
			// ''@'localhost' (mariadb-install-db makes one) takes every login
			// from localhost before 'app'@'%' can. The server's message names
			// the login, not the account, so this is a hint, not a finding.
			line += fmt.Sprintf(" (if the account is '%s'@'%%' and the server has an anonymous user ''@'localhost', that one takes logins from localhost first: a DBA can DROP USER ''@'localhost')", c.cfg.User)
		}
		return line, exitRefused, true
	case 1044: // access denied to the database
		return fmt.Sprintf("the server %s refused the login to database %s: %v; grant the user privileges on it (docs/operations.md, \"Set-up for DBAs\"), or name another database in %s",
			c.server(), c.database(), me, c.dsnFrom), exitRefused, true
	case 1049: // unknown database
		return fmt.Sprintf("no database %s on the server %s (%v): name an existing database in %s, or create it", c.database(), c.server(), me, c.dsnFrom), exitNotFound, true
	}
	return "", 0, false
}

// server names the server of the DSN, for messages.
func (c *cli) server() string {
	if c.cfg == nil {
		return "(unknown)"
	}
	return c.cfg.Addr
}

// database names the DSN's database, for messages.
func (c *cli) database() string {
	if c.cfg == nil {
		return "(unknown)"
	}
	return "`" + c.cfg.DBName + "`"
}

// oneLine escapes the line breaks of a message, which the library's
// messages may hold (a DDL, a list of statements), so that it stays one
// line; plainWriter escapes the other runes that are not visible.
func oneLine(s string) string {
	return strings.NewReplacer("\r", `\r`, "\n", `\n`).Replace(strings.TrimRight(s, "\n"))
}

// driverLog takes the MySQL driver's own log lines (its mysql.Logger),
// which it would print to stderr as "[mysql] 2026/11/26 05:38:50
// packets.go:58 unexpected EOF". Every line that carries an error is the
// failure of one connection, which the driver either gets over by itself
// (an idle connection the server closed: database/sql retries the
// statement on another) or returns, as "invalid connection" or "bad
// connection", to the statement that electctl then reports as failed:
// such lines are dropped, as they would be a second, raw report of what
// electctl says, or an alarm about what went right. The others (an
// unexpected sequence number, an auth plugin it could not use) are
// printed as electctl's lines, escaped.
type driverLog struct{ w io.Writer }

// Print implements mysql.Logger.
func (l driverLog) Print(v ...any) {
	for _, a := range v {
		if _, ok := a.(error); ok {
			return
		}
	}
	fmt.Fprintf(l.w, "electctl: mysql driver: %s\n", oneLine(strings.TrimSpace(fmt.Sprint(v...))))
}

var _ mysql.Logger = driverLog{}

// lockedWriter serializes writes to w: the driver logs from the goroutine
// that uses a connection, while electctl writes its own lines.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(b []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(b)
}

package main

import (
	"database/sql"
	"errors"
	"fmt"
	"strings"

	"github.com/go-sql-driver/mysql"
)

// The database to reach, and its DSN, whose password is never printed.

// open checks the --dsn and opens (but does not yet reach) the database into
// c.db; when ok is false it has printed why and run exits with code.
func (c *cli) open() (cfg *mysql.Config, code int, ok bool) {
	if c.dsn == "" {
		fmt.Fprintln(c.errOut, "electctl: no database: pass --dsn user:pass@tcp(host:3306)/dbname or set "+envDSN)
		return nil, exitUsage, false
	}
	cfg, err := mysql.ParseDSN(c.dsn)
	if err == nil && !strings.Contains(c.dsn, "@") && strings.Contains(cfg.Net, ":") {
		// user:pass(x)/db parses, with user:pass for the network, which
		// the messages below and the error of reaching it would print.
		err = errNoAt
	}
	if err != nil {
		fmt.Fprintf(c.errOut, "electctl: --dsn is not a valid DSN (user:pass@tcp(host:3306)/dbname): %v\n", dsnError(c.dsn))
		return nil, exitUsage, false
	}
	if cfg.DBName == "" {
		fmt.Fprintf(c.errOut, "electctl: the DSN %s names no database; add /dbname\n", redact(cfg))
		return nil, exitUsage, false
	}
	// The driver's own log lines go through electctl's stderr, in its
	// format, or are dropped (see driverLog). Per pool, not
	// mysql.SetLogger: that is process-wide, and the tests run electctl
	// in their process, each run with a stderr of its own.
	cfg.Logger = driverLog{c.errOut}
	conn, err := mysql.NewConnector(cfg)
	if err != nil {
		fmt.Fprintf(c.errOut, "electctl: %v\n", err)
		return nil, exitError, false
	}
	c.db, c.cfg = sql.OpenDB(conn), cfg
	return cfg, exitOK, true
}

// dsnError says why a DSN does not parse without quoting its password: the
// driver's messages may quote any part of the DSN (an address, a database
// name that holds what follows a / in the password), so it is asked about
// the DSN with the password blanked out. Without an @ the driver sees no
// password where the operator may have typed one (user:pass/db): as no
// rule can tell which part it is, the driver's message is not shown.
func dsnError(dsn string) error {
	if !strings.Contains(dsn, "@") {
		return errNoAt
	}
	if _, err := mysql.ParseDSN(blankPassword(dsn)); err != nil {
		return err
	}
	return errors.New("the driver refused it (its message is not shown, as it may quote the password)")
}

// errNoAt says what is wrong with a DSN without an @ that the driver
// refuses, or that names a network with a colon in it (see open).
var errNoAt = errors.New("it has no @ between user:pass and tcp(host:port) (the driver's message is not shown, as it may quote the password)")

// blankPassword replaces the password of a DSN with an @ that may not
// parse. The driver takes the password from between the first colon and an
// @, so everything between the first colon and the last @ goes; what
// follows the last @ never holds any of it.
func blankPassword(dsn string) string {
	colon, at := strings.Index(dsn, ":"), strings.LastIndex(dsn, "@")
	if colon < 0 || at < colon {
		return dsn
	}
	return dsn[:colon+1] + "xxxxx" + dsn[at:]
}

// redact prints a DSN without its password.
func redact(cfg *mysql.Config) string {
	cfg = cfg.Clone()
	if cfg.Passwd != "" {
		cfg.Passwd = "xxxxx"
	}
	return cfg.FormatDSN()
}

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
	if err != nil {
		fmt.Fprintf(c.errOut, "electctl: --dsn is not a valid DSN (user:pass@tcp(host:3306)/dbname): %v\n", dsnError(c.dsn))
		return nil, exitUsage, false
	}
	if cfg.DBName == "" {
		fmt.Fprintf(c.errOut, "electctl: the DSN %s names no database; add /dbname\n", redact(cfg))
		return nil, exitUsage, false
	}
	c.db, err = sql.Open("mysql", c.dsn)
	if err != nil {
		fmt.Fprintf(c.errOut, "electctl: %v\n", err)
		return nil, exitError, false
	}
	return cfg, exitOK, true
}

// dsnError says why a DSN does not parse without quoting its password: the
// driver's messages may quote any part of the DSN (an address, a database
// name that holds what follows a / in the password), so it is asked about
// the DSN with the password blanked out.
func dsnError(dsn string) error {
	if _, err := mysql.ParseDSN(blankPassword(dsn)); err != nil {
		return err
	}
	return errors.New("the driver refused it (its message is not shown, as it may quote the password)")
}

// blankPassword replaces the password of a DSN that may not parse. The
// driver takes the password from between the first colon and an @, so
// everything between the first colon and the last @ goes; what follows the
// last @ never holds any of it. Without an @ the driver sees no password,
// but the operator may have typed one and left out "@tcp(...)": then
// everything from the first colon to the last / goes, unless that colon is
// inside an address.
func blankPassword(dsn string) string {
	colon, end := strings.Index(dsn, ":"), strings.LastIndex(dsn, "@")
	if colon < 0 {
		return dsn
	}
	if end < 0 {
		if open := strings.Index(dsn, "("); open >= 0 && open < colon {
			return dsn
		}
		if end = strings.LastIndex(dsn, "/"); end < 0 {
			end = len(dsn)
		}
	}
	if end < colon {
		return dsn
	}
	return dsn[:colon+1] + "xxxxx" + dsn[end:]
}

// redact prints a DSN without its password.
func redact(cfg *mysql.Config) string {
	cfg = cfg.Clone()
	if cfg.Passwd != "" {
		cfg.Passwd = "xxxxx"
	}
	return cfg.FormatDSN()
}

// Package exampledb gives the example programs their database: the one
// $ELECTION_DSN names, or a private throwaway MariaDB (or MySQL) server
// started from the binary on PATH.
package exampledb

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"

	"github.com/go-sql-driver/mysql"

	"github.com/sqlelect/election/internal/mysqltest"
)

// Open returns the DSN of a database for an example and a function that
// stops the server Open started, if any. With $ELECTION_DSN set it returns
// that DSN, which must name a database. Otherwise it starts a private server
// from the mariadbd or mysqld on PATH, creates database name in it and
// prints the DSN, so that more instances can join with $ELECTION_DSN.
func Open(ctx context.Context, name string) (dsn string, cleanup func(), err error) {
	if dsn := os.Getenv("ELECTION_DSN"); dsn != "" {
		cfg, err := mysql.ParseDSN(dsn)
		if err != nil {
			return "", nil, fmt.Errorf("ELECTION_DSN: %w", err)
		}
		if cfg.DBName == "" {
			return "", nil, errors.New("ELECTION_DSN must name a database, as in root@tcp(127.0.0.1:3306)/" + name)
		}
		return dsn, func() {}, nil
	}
	bin := mysqltest.PrivateBinary()
	if bin == "" {
		return "", nil, errors.New("no server: set ELECTION_DSN, or install MariaDB (apt-get install mariadb-server)")
	}
	s, err := mysqltest.StartPrivate(ctx, bin)
	if err != nil {
		return "", nil, err
	}
	db, err := sql.Open("mysql", s.DSN(""))
	if err == nil {
		_, err = db.ExecContext(ctx, "CREATE DATABASE `"+name+"`")
		db.Close()
	}
	if err != nil {
		s.Close()
		return "", nil, err
	}
	dsn = s.DSN(name)
	fmt.Fprintf(os.Stderr, "started %s\nmore instances can use it with ELECTION_DSN='%s'\n", s.Describe(), dsn)
	return dsn, s.Close, nil
}

// Pool is Open with a pool on the database; cleanup closes the pool, then
// stops the server Open started, if any.
func Pool(ctx context.Context, name string) (db *sql.DB, cleanup func(), err error) {
	dsn, stop, err := Open(ctx, name)
	if err != nil {
		return nil, nil, err
	}
	db, err = sql.Open("mysql", dsn)
	if err != nil {
		stop()
		return nil, nil, err
	}
	return db, func() { db.Close(); stop() }, nil
}

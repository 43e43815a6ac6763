package main

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"

	"github.com/go-sql-driver/mysql"
)

// The server electctl reads from, and whether what it shows may be behind
// the election: a replica that lags or stopped replicating, a Galera node
// outside the primary component or not Synced. Either would show an old
// leader as current.

// source is the server electctl reads from.
type source struct {
	Name   string // host:port/server_id, as TermRecord.Server names it
	Role   string // "primary", "replica" or "galera node"
	Behind string // why what it shows may be old; empty when it is current
	galera bool
}

// readSource asks the server what it is. It needs no privilege, but to
// tell how far a replica lags, REPLICATION CLIENT (MySQL) or SLAVE MONITOR
// (MariaDB 10.5+).
func readSource(ctx context.Context, db *sql.DB) (source, error) {
	var s source
	var readOnly bool
	if err := db.QueryRowContext(ctx, "SELECT CONCAT(@@hostname, ':', @@port, '/', @@server_id), @@global.read_only").Scan(&s.Name, &readOnly); err != nil {
		return s, err
	}
	on, err := variables(ctx, db, "VARIABLES", "wsrep_on")
	if err != nil {
		return s, err
	}
	if on["wsrep_on"] == "ON" {
		wsrep, err := variables(ctx, db, "STATUS", "wsrep_ready", "wsrep_cluster_status", "wsrep_local_state_comment")
		if err != nil {
			return s, err
		}
		s.Role, s.galera = "galera node", true
		if wsrep["wsrep_cluster_status"] != "Primary" || wsrep["wsrep_local_state_comment"] != "Synced" || wsrep["wsrep_ready"] != "ON" {
			s.Behind = fmt.Sprintf("this Galera node is %s in a %s component (wsrep_ready=%s): what it shows may be old; ask a Synced node of the primary component",
				wsrep["wsrep_local_state_comment"], wsrep["wsrep_cluster_status"], wsrep["wsrep_ready"])
		}
		return s, nil
	}
	s.Role = "primary"
	lag, err := replication(ctx, db)
	switch {
	case err != nil && readOnly:
		// Denied, or a server without either statement (MySQL 5.7 has
		// neither SHOW ALL SLAVES STATUS nor SHOW REPLICA STATUS).
		s.Role = "replica"
		s.Behind = "this server is read-only, a replica: what it shows may lag its primary (grant REPLICATION CLIENT, or SLAVE MONITOR on MariaDB, to see by how much), " +
			"and a get_lock election's lock is held on the primary, where this server cannot see it; ask the primary"
	case err != nil: // a writable server whose replication status cannot be read: taken as the primary
	case lag != "":
		s.Role = "replica"
		s.Behind = "this server is a replica " + lag + ": what it shows may be old, " +
			"and a get_lock election's lock is held on the primary, where this server cannot see it; ask the primary"
	case readOnly:
		s.Role = "replica"
	}
	return s, nil
}

// variables reads the named global variables (of = "VARIABLES") or status
// variables (of = "STATUS"); those the server does not have are empty.
func variables(ctx context.Context, db *sql.DB, of string, names ...string) (map[string]string, error) {
	rows, err := db.QueryContext(ctx, "SHOW GLOBAL "+of+" WHERE Variable_name IN ('"+strings.Join(names, "', '")+"')")
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	vars := map[string]string{}
	for rows.Next() {
		var name, value string
		if err := rows.Scan(&name, &value); err != nil {
			return nil, err
		}
		vars[strings.ToLower(name)] = value
	}
	return vars, rows.Err()
}

// replication says how far behind its primary this server is ("3 s
// behind its primary", "whose replication is stopped"), "" when it
// replicates from none or is caught up.
func replication(ctx context.Context, db *sql.DB) (string, error) {
	rows, err := db.QueryContext(ctx, "SHOW ALL SLAVES STATUS") // MariaDB
	if me := new(mysql.MySQLError); errors.As(err, &me) && me.Number == 1064 {
		rows, err = db.QueryContext(ctx, "SHOW REPLICA STATUS") // MySQL 8.0.22+
	}
	if err != nil {
		return "", err
	}
	defer rows.Close()
	cols, err := rows.Columns()
	if err != nil {
		return "", err
	}
	var all [][]sql.NullString
	for rows.Next() {
		values := make([]sql.NullString, len(cols))
		ptrs := make([]any, len(cols))
		for i := range values {
			ptrs[i] = &values[i]
		}
		if err := rows.Scan(ptrs...); err != nil {
			return "", err
		}
		all = append(all, values)
	}
	if err := rows.Err(); err != nil {
		return "", err
	}
	return lagOf(cols, all), nil
}

// lagOf is replication's verdict on the status rows it read, whose columns
// are cols: a stopped channel before one that lags.
func lagOf(cols []string, rows [][]sql.NullString) string {
	var lag string
	for _, values := range rows {
		field := func(names ...string) sql.NullString {
			for i, c := range cols {
				for _, n := range names {
					if strings.EqualFold(c, n) {
						return values[i]
					}
				}
			}
			return sql.NullString{}
		}
		// Group Replication's own channels (MySQL 8.4 manual, 20.4 "Monitoring Group Replication").
		if strings.HasPrefix(field("Channel_Name").String, "group_replication_") {
			continue
		}
		io, applier := field("Slave_IO_Running", "Replica_IO_Running"), field("Slave_SQL_Running", "Replica_SQL_Running")
		seconds := field("Seconds_Behind_Master", "Seconds_Behind_Source")
		switch {
		case io.String != "Yes" || applier.String != "Yes":
			lag = fmt.Sprintf("whose replication is stopped (I/O thread: %s, SQL thread: %s)", io.String, applier.String)
		case seconds.Valid && seconds.String != "0" && lag == "":
			lag = seconds.String + " s behind its primary"
		}
	}
	return lag
}

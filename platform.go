package election

import (
	"context"
	"fmt"
	"strings"
)

// platform is what an Elector learns about the server before its first
// campaign, from server variables anyone may read.
type platform struct {
	version      string // VERSION()
	galera       bool   // wsrep_on: Galera, Percona XtraDB Cluster
	multiPrimary bool   // Group Replication in multi-primary mode
	statementLog bool   // binary logging with binlog_format=STATEMENT
}

func detectPlatform(ctx context.Context, q querier) (platform, error) {
	rows, err := q.QueryContext(ctx, "SHOW GLOBAL VARIABLES WHERE Variable_name IN "+
		"('version', 'wsrep_on', 'group_replication_group_name', 'group_replication_single_primary_mode', 'log_bin', 'binlog_format')")
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
	return platform{
		version:      vars["version"],
		galera:       on("wsrep_on"),
		multiPrimary: vars["group_replication_group_name"] != "" && vars["group_replication_single_primary_mode"] != "" && !on("group_replication_single_primary_mode"),
		statementLog: on("log_bin") && strings.EqualFold(vars["binlog_format"], "STATEMENT"),
	}
}

// check refuses a strategy whose guarantees the server cannot give, and
// returns warnings to log.
func (p platform) check(s Strategy) (warnings []string, err error) {
	if s == GetLock {
		switch {
		case p.galera:
			return nil, fmt.Errorf("%w: %s runs Galera (wsrep_on=ON), where GET_LOCK holds only on the node that took it, so two nodes could lead at once: use Config.Strategy = election.LeaseRow", ErrUnsupported, p.version)
		case p.multiPrimary:
			return nil, fmt.Errorf("%w: %s runs Group Replication in multi-primary mode, where GET_LOCK holds only on the member that took it: use Config.Strategy = election.LeaseRow", ErrUnsupported, p.version)
		}
	}
	if p.statementLog {
		warnings = append(warnings, "binlog_format=STATEMENT: replicas re-execute statements, so a fenced write "+
			"that reads nondeterministic values (NOW(), UUID(), LIMIT without ORDER BY) may differ on a replica promoted "+
			"after a failover; prefer binlog_format=ROW or MIXED")
	}
	return warnings, nil
}

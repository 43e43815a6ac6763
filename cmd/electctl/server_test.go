package main

import (
	"database/sql"
	"testing"
)

// No server here runs Group Replication, so lagOf is fed rows shaped as a
// MySQL group member's SHOW REPLICA STATUS.
func TestLagOf(t *testing.T) {
	cols := []string{"Replica_IO_Running", "Replica_SQL_Running", "Seconds_Behind_Source", "Channel_Name"}
	row := func(io, sqlThread, seconds, channel string) []sql.NullString {
		return []sql.NullString{{String: io, Valid: true}, {String: sqlThread, Valid: true}, {String: seconds, Valid: seconds != ""}, {String: channel, Valid: true}}
	}
	for _, tc := range []struct {
		name string
		rows [][]sql.NullString
		want string
	}{
		{"a group member's own channels are not replication", [][]sql.NullString{
			row("No", "No", "", "group_replication_recovery"),
			row("Yes", "Yes", "7", "group_replication_applier"),
		}, ""},
		{"an asynchronous channel beside them still counts", [][]sql.NullString{
			row("No", "No", "", "group_replication_recovery"),
			row("Yes", "Yes", "3", ""),
		}, "3 s behind its primary"},
		{"a stopped channel before one that lags", [][]sql.NullString{
			row("Yes", "Yes", "3", "a"),
			row("Yes", "No", "", "b"),
		}, "whose replication is stopped (I/O thread: Yes, SQL thread: No)"},
		{"caught up", [][]sql.NullString{row("Yes", "Yes", "0", "")}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := lagOf(cols, tc.rows); got != tc.want {
				t.Errorf("lagOf = %q, want %q", got, tc.want)
			}
		})
	}
}

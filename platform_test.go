package election

import (
	"errors"
	"strings"
	"testing"
)

// The server variables are global and cannot be faked on a real server, so
// detection is tested through platformOf, the seam that turns variables into
// a platform; detectPlatform itself runs before every first campaign of the
// suite against the real server.
func TestPlatformChecks(t *testing.T) {
	cases := []struct {
		name       string
		vars       map[string]string
		strategy   Strategy
		refused    string // in the error, "" if accepted
		warnsAbout string
	}{
		{"standalone MariaDB", map[string]string{"version": "10.11.19-MariaDB", "wsrep_on": "OFF", "log_bin": "OFF"}, GetLock, "", ""},
		{"Galera refuses GET_LOCK", map[string]string{"version": "10.11.6-MariaDB", "wsrep_on": "ON"}, GetLock, "LeaseRow", ""},
		{"Galera takes the lease", map[string]string{"wsrep_on": "ON"}, LeaseRow, "", ""},
		{"multi-primary Group Replication refuses GET_LOCK", map[string]string{"group_replication_group_name": "aaaa-bbbb", "group_replication_single_primary_mode": "OFF"}, GetLock, "multi-primary", ""},
		{"single-primary Group Replication", map[string]string{"group_replication_group_name": "aaaa-bbbb", "group_replication_single_primary_mode": "ON"}, GetLock, "", ""},
		{"statement-based binary log warns", map[string]string{"log_bin": "ON", "binlog_format": "STATEMENT"}, GetLock, "", "binlog_format=STATEMENT"},
		{"row-based binary log", map[string]string{"log_bin": "ON", "binlog_format": "ROW"}, LeaseRow, "", ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			warnings, err := platformOf(tc.vars).check(tc.strategy)
			if tc.refused == "" && err != nil {
				t.Fatalf("refused: %v", err)
			}
			if tc.refused != "" && (!errors.Is(err, ErrUnsupported) || !strings.Contains(err.Error(), tc.refused)) {
				t.Fatalf("got %v, want ErrUnsupported naming %s", err, tc.refused)
			}
			if got := strings.Join(warnings, "\n"); !strings.Contains(got, tc.warnsAbout) || (tc.warnsAbout == "") != (got == "") {
				t.Fatalf("warnings %q, want about %q", got, tc.warnsAbout)
			}
		})
	}
}

package election

import (
	"database/sql"
	"strings"
	"testing"
	"time"
)

// The deputy waits until CheckInterval after the leader it read could
// first be overdue (its renewal, or its ignored demotion, older than its
// lease plus margin), capped at its own lease plus margin, and at least
// CheckInterval; CheckInterval while no GetLock term holds the lock as
// recorded.
func TestWatchFor(t *testing.T) {
	cfg := Config{Lease: 2 * time.Second, Margin: time.Second, CheckInterval: 200 * time.Millisecond}
	ms := time.Millisecond
	leading := Record{State: stateLeading, Strategy: GetLock.String(), ConnID: 7, LockConnID: 7, Expiry: 3 * time.Second}
	with := func(f func(*Record)) Record { r := leading; f(&r); return r }
	for _, c := range []struct {
		name string
		rec  Record
		want time.Duration
	}{
		{"renewed just now", with(func(r *Record) { r.RenewedAgo = 0 }), 3200 * ms},
		{"renewed a second ago", with(func(r *Record) { r.RenewedAgo = time.Second }), 2200 * ms},
		{"overdue by now", with(func(r *Record) { r.RenewedAgo = 4 * time.Second }), 200 * ms},
		{"a longer expiry than ours", with(func(r *Record) { r.Expiry = 10 * time.Second }), 3200 * ms},
		{"demoted 2.5 s ago", with(func(r *Record) { r.demoted, r.DemotedAgo = true, 2500*ms }), 700 * ms},
		{"demoted, renewal sooner due", with(func(r *Record) { r.RenewedAgo, r.demoted, r.DemotedAgo = 2900*ms, true, 0 }), 300 * ms},
		{"ended", with(func(r *Record) { r.State = stateResigned }), 200 * ms},
		{"a winner yet to claim", with(func(r *Record) { r.LockConnID = 8 }), 200 * ms},
		{"lock free", with(func(r *Record) { r.LockConnID = 0 }), 200 * ms},
		{"a lease", with(func(r *Record) { r.Strategy = LeaseRow.String() }), 200 * ms},
	} {
		if got := watchFor(c.rec, cfg); got != c.want {
			t.Errorf("%s: watchFor = %v, want %v", c.name, got, c.want)
		}
	}
}

// A batch's derived table compares its lock_name and identity columns, and
// writes its name, to the record's ascii_bin and utf8mb4_bin columns. MySQL
// gives a UNION's derived columns IMPLICIT coercibility, and without an
// explicit COLLATE such a comparison fails with 1267 there (MariaDB and
// TiDB accept it; docs/mysql-8.4.md, "Batched reads" and "Batched
// claims"): every such literal carries its column's collation, plain or
// hex.
func TestBatchLiteralsCarryTheirCollations(t *testing.T) {
	for _, c := range []struct{ lock, identity, name string }{
		{"e/0123456789abcdef", "host-a", "billing"},
		{"e\u00e9/0123456789abcdef", "h\u00f4te-\u00e9", "facturation \u00e9t\u00e9"},
	} {
		db, err := sql.Open("mysql", "u@tcp(127.0.0.1:9)/x") // no statement is sent
		if err != nil {
			t.Fatal(err)
		}
		defer db.Close()
		st := newStore(db, c.name, Config{Identity: c.identity})
		v := termStart{st: st, lock: c.lock, session: 7}.values(predecessor{}, 1, 0)
		for _, col := range []struct{ what, literal, want string }{
			{"lock_name", v.lock, "COLLATE ascii_bin"},
			{"identity", v.identity, "COLLATE utf8mb4_bin"},
			{"name", v.name, "COLLATE utf8mb4_bin"},
			{"a read's lock_name", lockLiteral(c.lock), "COLLATE ascii_bin"},
			{"a read's identity", binLiteral(c.identity), "COLLATE utf8mb4_bin"},
		} {
			if !strings.HasSuffix(col.literal, col.want) {
				t.Errorf("%s %q is %s, without %s", col.what, c.lock, col.literal, col.want)
			}
		}
	}
}

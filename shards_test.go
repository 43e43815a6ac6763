package election_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sqlelect/election"
)

// shardMember is a candidate process that is a member of the group named
// by its environment, of n shards: while it owns a shard it makes fenced
// writes tagged with the shard.
func shardMember(ctx context.Context, emit func(event), db *sql.DB, id string, n int, cfg election.Config) int {
	cfg.Interval, cfg.Lease, cfg.Margin = calm.Interval, calm.Lease, calm.Margin
	s, err := election.NewShards(db, os.Getenv("ELECTION_CHILD_NAME"), n, cfg)
	if err != nil {
		emit(event{Ev: "error", ID: id, Reason: err.Error()})
		return 1
	}
	err = s.Run(ctx, func(ctx context.Context, shard int, term *election.Term) error {
		emit(event{Ev: "start", ID: id, Token: term.Token(), Shard: shard})
		for ctx.Err() == nil {
			term.Fenced(ctx, func(tx *sql.Tx) error {
				_, err := tx.ExecContext(ctx, "INSERT INTO shard_writes (shard, token, holder) VALUES (?, ?, ?)", shard, term.Token(), id)
				return err
			})
			select {
			case <-ctx.Done():
			case <-time.After(50 * time.Millisecond):
			}
		}
		return nil
	})
	emit(event{Ev: "exit", ID: id, Reason: fmt.Sprint(err)})
	return 0
}

// A group without a name, with a number of shards out of range, or with a
// session of its own per shard on a pool too small for them is refused
// with the fix, before anything reaches the server.
func TestNewShardsRefusesBadInput(t *testing.T) {
	db, err := sql.Open("mysql", "nobody@tcp(127.0.0.1:1)/none")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	for _, c := range []struct {
		group string
		n     int
		says  string
		own   bool
	}{{"", 8, "group name is empty", false}, {"orders", 0, "1 to 4096 shards, not 0", false}, {"orders", 5000, "not 5000", false},
		{"a\x1b[2J", 8, "control", false}, {"orders", 8, "SetMaxOpenConns above 8", true}} {
		db.SetMaxOpenConns(8)
		if _, err := election.NewShards(db, c.group, c.n, election.Config{OwnSession: c.own}); !errors.Is(err, election.ErrInvalidConfig) || !strings.Contains(err.Error(), c.says) {
			t.Errorf("NewShards(%q, %d, OwnSession %v): %v; want ErrInvalidConfig saying %q", c.group, c.n, c.own, err, c.says)
		}
	}
	for _, cfg := range []election.Config{{PreferAfter: time.Minute}, {Health: func(context.Context) error { return nil }}} {
		if _, err := election.NewShards(db, "orders", 8, cfg); !errors.Is(err, election.ErrInvalidConfig) || !strings.Contains(err.Error(), "not for shards") {
			t.Errorf("NewShards with PreferAfter or Health: %v; want ErrInvalidConfig saying it is not for shards", err)
		}
	}
	db.SetMaxOpenConns(9)
	if _, err := election.NewShards(db, "orders", 8, election.Config{OwnSession: true}); err != nil {
		t.Errorf("NewShards of 8 shards with OwnSession on a pool of 9: %v", err)
	}
}

// Three processes spread 16 shards evenly; when the one that owns most is
// SIGKILLed the other two own all of them again, evenly; when a fourth
// joins, shards move to it by hand-over until the spread is even, and then
// nothing moves. Through it all, per shard, no stale fenced write is
// accepted: no shard was owned twice at once.
func TestShards(t *testing.T) {
	forEachStrategy(t, shardsSpread)
}

func shardsSpread(t *testing.T, s election.Strategy) {
	const n = 16
	db, dsn := newDB(t)
	if _, err := db.Exec("CREATE TABLE shard_writes (id BIGINT AUTO_INCREMENT PRIMARY KEY, shard INT NOT NULL, token BIGINT UNSIGNED NOT NULL, holder VARCHAR(255) NOT NULL)"); err != nil {
		t.Fatal(err)
	}
	ctx := ctxFor(t, 3*time.Minute)
	if err := election.CreateSchema(ctx, db, ""); err != nil { // read before the members start
		t.Fatal(err)
	}
	g := newGroup(t, s, dsn, "orders")
	g.shards = n
	g.spawn(3)
	dead := "" // the member SIGKILLed: no shard may be handed over to it
	owned := func() (map[string]int, int) {
		recs, err := election.Elections(ctx, db, "")
		if err != nil {
			t.Fatal(err)
		}
		by, led := map[string]int{}, 0
		for _, r := range recs {
			if r.HandoverTo == dead && dead != "" {
				t.Fatalf("%s is handed over to %s, which was SIGKILLed", r.Name, dead)
			}
			if _, ok := election.ShardOf("orders", r.Name); ok && r.Leading() {
				by[r.Identity]++
				led++
			}
		}
		return by, led
	}
	// even: every shard owned, by members alone, none beyond its share.
	even := func(members ...string) func() bool {
		return func() bool {
			by, led := owned()
			for _, m := range members {
				if by[m] > (n+len(members)-1)/len(members) {
					return false
				}
				delete(by, m)
			}
			return led == n && len(by) == 0
		}
	}
	waitFor(t, "three members to own the shards evenly", time.Minute, even("proc-0", "proc-1", "proc-2"))

	by, _ := owned()
	victim := "proc-0"
	for m, k := range by {
		if k > by[victim] {
			victim = m
		}
	}
	var survivors []string
	for _, m := range []string{"proc-0", "proc-1", "proc-2"} {
		if m != victim {
			survivors = append(survivors, m)
		}
	}
	g.signal(victim, syscall.SIGKILL)
	killed := time.Now()
	dead = victim
	waitFor(t, "the survivors to own every shard, evenly", time.Minute, even(survivors...))
	t.Logf("%s owned %d shards; the survivors owned all, evenly, %v after its SIGKILL", victim, by[victim], time.Since(killed).Round(time.Millisecond))

	handedOver := func() int {
		var k int
		if err := db.QueryRowContext(ctx, "SELECT COUNT(*) FROM election_term WHERE reason = 'handed-over'").Scan(&k); err != nil {
			t.Fatal(err)
		}
		return k
	}
	before := handedOver()
	g.start("proc-3")
	joined := append(survivors, "proc-3")
	waitFor(t, "the shards to spread evenly over the new member too", time.Minute, even(joined...))
	moved := handedOver() - before
	if moved == 0 {
		t.Error("proc-3 got its shards without a hand-over")
	}
	time.Sleep(3 * 2 * calm.Interval) // three rounds of rebalancing, I + C each (C is I)
	if again := handedOver() - before; again != moved {
		t.Errorf("once even, %d more shards were handed over: the spread flaps", again-moved)
	}
	t.Logf("%d shards were handed over to proc-3; none after", moved)

	for _, m := range joined {
		g.signal(m, syscall.SIGTERM)
	}
	if writes, shards := checkWritesPer(t, db, "SELECT shard, token, holder FROM shard_writes ORDER BY id"); shards != n {
		t.Errorf("%d fenced writes in %d shards; want writes in all %d", writes, shards, n)
	}
}

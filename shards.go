package election

import (
	"cmp"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// maxShards bounds a group: its members read every shard's record in one
// statement each round.
const maxShards = 4096

// Shards spreads the shards of a group over the members that run it. Each
// shard is an election of its own, named by ShardName, so a shard a member
// owns is a Term with its own lock and fencing token, and every guarantee
// of an election holds per shard: no shard is owned twice at once, and a
// dead member's shards are owned again within the failover of the
// strategy. Every member campaigns in every shard it does not own; the
// many elections of a process share its sessions (see Config.OwnSession).
//
// Whoever wins a shard owns it; a member then evens the spread out. Each
// round (every Interval plus CheckInterval) it reads who owns which shard
// and which members are live, and a member that owns more than its share,
// ceil(N/M) of N shards over M live members, hands the excess over, as
// Operator.Handover does, to members that own fewer: the owner stops before
// the new one starts. Every member computes the same moves from the same
// read, and a shard whose hand-over is pending counts as its target's, so
// moves are not repeated and a member that owns its share receives none:
// the spread settles and does not flap.
type Shards struct {
	group    string
	cfg      Config
	electors []*Elector
	log      *slog.Logger
}

// ShardName is the name of the election of shard i of group.
func ShardName(group string, i int) string { return group + "/" + strconv.Itoa(i) }

// ShardOf reports whether the election named name is a shard of group, and
// which: the inverse of ShardName.
func ShardOf(group, name string) (int, bool) {
	rest, ok := strings.CutPrefix(name, group+"/")
	if !ok {
		return 0, false
	}
	i, err := strconv.Atoi(rest)
	if err != nil || i < 0 || strconv.Itoa(i) != rest {
		return 0, false
	}
	return i, true
}

// NewShards returns this process's member of group, of n shards. Every
// member of a group must give the same n and a distinct Identity (the
// default is distinct per process); the Config is each shard's.
func NewShards(db *sql.DB, group string, n int, cfg Config) (*Shards, error) {
	if n < 1 || n > maxShards {
		return nil, fmt.Errorf("%w: a group has 1 to %d shards, not %d", ErrInvalidConfig, maxShards, n)
	}
	cfg = cfg.withDefaults() // one identity for every shard, not one drawn per shard
	s := &Shards{group: group, cfg: cfg, log: cfg.Logger.With("group", group, "identity", cfg.Identity)}
	for i := range n {
		e, err := New(db, ShardName(group, i), cfg)
		if err != nil {
			return nil, err
		}
		s.electors = append(s.electors, e)
	}
	return s, nil
}

// Owned returns the shards this member leads now, in order.
func (s *Shards) Owned() []int {
	var owned []int
	for i, e := range s.electors {
		if e.IsLeader() {
			owned = append(owned, i)
		}
	}
	return owned
}

// Run campaigns in every shard and runs fn for each shard it owns, as
// Elector.Run does for one election (fn's context ends when the shard's
// term does), and evens the spread out, until ctx ends or a shard's Run
// returns an error other than ctx's (an fn that returned ErrStop, or one
// retrying cannot fix): then the others end too, and Run returns it once
// every fn has returned.
func (s *Shards) Run(ctx context.Context, fn func(ctx context.Context, shard int, t *Term) error) error {
	run, stop := context.WithCancelCause(ctx)
	defer stop(nil)
	var wg sync.WaitGroup
	for i, e := range s.electors {
		wg.Go(func() {
			err := e.Run(run, func(ctx context.Context, t *Term) error { return fn(ctx, i, t) })
			if run.Err() == nil {
				stop(fmt.Errorf("shard %d: %w", i, err))
			}
		})
	}
	wg.Go(func() { s.balance(run) })
	wg.Wait()
	if ctx.Err() != nil {
		return ctx.Err()
	}
	return context.Cause(run) // a shard's
}

// balance runs a round of rebalancing every Interval plus CheckInterval:
// time for a hand-over to end the owner's term (its next renewal) and for
// the target to win the shard (its next check).
func (s *Shards) balance(ctx context.Context) {
	tick := time.NewTicker(s.cfg.Interval + s.cfg.CheckInterval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		if err := s.rebalance(ctx); err != nil && ctx.Err() == nil {
			s.log.Warn("rebalancing the shards failed; trying again next round", "err", err)
		}
	}
}

// rebalance reads the group once and hands over what this member owns
// beyond its share.
func (s *Shards) rebalance(ctx context.Context) error {
	locks := make([]string, len(s.electors))
	for i, e := range s.electors {
		lock, err := e.st.resolveLock(ctx)
		if err != nil {
			return err
		}
		locks[i] = lock
	}
	st := s.electors[0].st
	recs, err := readRecords(ctx, st.db, st.tbl, "WHERE r.lock_name IN ("+literals(locks)+")")
	if err != nil {
		return err
	}
	type candidacy struct{ lock, identity string }
	rows, err := collect(ctx, st.db, st.tbl, "candidates", "SELECT c.lock_name, c.identity FROM `"+st.tbl.candidate+"` c WHERE c.lock_name IN ("+
		literals(locks)+") AND "+alive("c"), func(rows *sql.Rows) (c candidacy, err error) {
		return c, rows.Scan(&c.lock, &c.identity)
	})
	if err != nil {
		return err
	}
	campaigns := map[candidacy]bool{}
	var members []string
	for _, c := range rows {
		campaigns[c] = true
		if !slices.Contains(members, c.identity) {
			members = append(members, c.identity)
		}
	}
	owners := make([]string, len(s.electors))
	tokens := make([]uint64, len(s.electors))
	for _, r := range recs {
		if i, ok := ShardOf(s.group, r.Name); ok && i < len(owners) {
			owners[i], tokens[i] = r.owner(), r.Token
		}
	}
	for _, m := range moves(s.cfg.Identity, owners, members) {
		if !campaigns[candidacy{locks[m.shard], m.to}] {
			continue // a hand-over to it would leave the shard unowned; the next round's read moves another
		}
		o := &Operator{st: s.electors[m.shard].st, log: s.log}
		switch err := o.request(ctx, locks[m.shard], tokens[m.shard], m.to); {
		case errors.Is(err, ErrNoLeader): // the term ended meanwhile
		case err != nil:
			return err
		default:
			s.log.Info("handing a shard over to even the spread", "shard", m.shard, "to", m.to, "token", tokens[m.shard])
		}
	}
	return nil
}

// owner is who a shard's record says owns it for rebalancing: the target
// of a pending hand-over, else the leader, else nobody ("").
func (r Record) owner() string {
	switch {
	case !r.Leading():
		return ""
	case r.HandoverTo != "":
		return r.HandoverTo
	}
	return r.Identity
}

// move hands shard over to the member to.
type move struct {
	shard int
	to    string
}

// moves returns the hand-overs member self makes to even out owners (the
// owner of each shard, "" for none) over the live members: each member
// that owns more than ceil(N/M) gives its excess to those that own fewer,
// matched in the order of their names, so that every member, from the same
// read, computes the same moves and only makes its own.
func moves(self string, owners, members []string) []move {
	if !slices.Contains(members, self) {
		members = append(members, self) // it reads its own rows as they are renewed
	}
	slices.Sort(members)
	owned := map[string][]int{}
	for i, o := range owners {
		if o != "" {
			owned[o] = append(owned[o], i)
		}
	}
	share := (len(owners) + len(members) - 1) / len(members)
	takers := slices.Clone(members)
	slices.SortStableFunc(takers, func(a, b string) int { return cmp.Compare(len(owned[a]), len(owned[b])) })
	var out []move
	t := 0
	for _, giver := range members {
		excess := owned[giver]
		if len(excess) <= share {
			continue
		}
		excess = excess[share:]
		for len(excess) > 0 && t < len(takers) {
			taker := takers[t]
			if len(owned[taker]) >= share {
				t++
				continue
			}
			if giver == self {
				out = append(out, move{shard: excess[0], to: taker})
			}
			owned[taker] = append(owned[taker], excess[0])
			excess = excess[1:]
		}
	}
	return out
}

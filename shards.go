package election

import (
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
// and who campaigns in which, and a member that owns more than its share,
// ceil(N/M) of N shards over M live members, hands shards it leads over,
// through Operator.Handover's request, to members below their share that
// campaign in them: the owner stops before the new one starts. Every member
// computes the moves from its read by one rule, and a shard whose hand-over
// is pending counts as its target's, so moves are not repeated and a member
// that owns its share receives none: the spread settles and does not flap.
// See docs/protocol.md, "Sharded ownership".
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
// default is distinct per process); the Config is each shard's. Under
// GetLock the shards share sessions and leave the pool's first own
// sessions to the process's other elections; with Config.OwnSession every
// shard pins a session of its own (n sessions), for failover in
// milliseconds.
func NewShards(db *sql.DB, group string, n int, cfg Config) (*Shards, error) {
	switch {
	case group == "":
		return nil, fmt.Errorf("%w: the group name is empty: give the group a stable name such as \"orders\"", ErrInvalidConfig)
	case n < 1 || n > maxShards:
		return nil, fmt.Errorf("%w: a group has 1 to %d shards, not %d", ErrInvalidConfig, maxShards, n)
	case cfg.PreferAfter != 0:
		// Preferred leaders would undo the spread's hand-overs, and it theirs.
		return nil, fmt.Errorf("%w: PreferAfter is not for shards: the members even the spread out by hand-over, which preferred leaders would undo; leave it unset", ErrInvalidConfig)
	case cfg.Health != nil:
		return nil, fmt.Errorf("%w: Config.Health is not for shards yet (every shard would run the check); leave it unset and stop the member (Shards.Run's context) when its dependencies fail", ErrInvalidConfig)
	case db != nil && cfg.OwnSession && cfg.Strategy != LeaseRow && db.Stats().MaxOpenConnections > 0 && db.Stats().MaxOpenConnections <= n:
		// Every shard would pin one, and the campaigns wait for a free one forever.
		return nil, fmt.Errorf("%w: OwnSession pins a session per shard, and db allows %d open connections for %d shards: call db.SetMaxOpenConns above %d (or 0), or leave OwnSession unset so that the shards share sessions",
			ErrInvalidConfig, db.Stats().MaxOpenConnections, n, n)
	}
	cfg = cfg.withDefaults() // one identity for every shard, not one drawn per shard
	s := &Shards{group: group, cfg: cfg, log: cfg.Logger.With("group", group, "identity", cfg.Identity)}
	for i := range n {
		e, err := New(db, ShardName(group, i), cfg)
		if err != nil {
			return nil, err
		}
		e.st.shard = true
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
	run, stop := context.WithCancel(ctx)
	defer stop()
	var (
		wg    sync.WaitGroup
		first sync.Once
		err   error // the first shard's Run that ended on its own
	)
	for i, e := range s.electors {
		wg.Go(func() {
			shardErr := e.Run(run, func(ctx context.Context, t *Term) error { return fn(ctx, i, t) })
			if run.Err() == nil {
				first.Do(func() { err = fmt.Errorf("shard %d: %w", i, shardErr) })
				stop()
			}
		})
	}
	wg.Go(func() { s.balance(run) })
	wg.Wait()
	if err != nil {
		return err
	}
	return ctx.Err()
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
	shardOf := make(map[string]int, len(locks))
	for i, e := range s.electors {
		lock, err := e.st.resolveLock(ctx)
		if err != nil {
			return err
		}
		locks[i], shardOf[lock] = lock, i
	}
	st := s.electors[0].st
	recs, err := recordsOf(ctx, st.db, st.tbl, locks)
	if err != nil {
		return err
	}
	targets, err := st.targets(ctx, locks)
	if err != nil {
		return err
	}
	type candidacy struct {
		shard    int
		identity string
	}
	campaigns := map[candidacy]bool{}
	var members []string
	for _, t := range targets {
		campaigns[candidacy{shardOf[t[0]], t[1]}] = true
		if !slices.Contains(members, t[1]) {
			members = append(members, t[1])
		}
	}
	g := spreadRead{owners: make([]string, len(locks)), movable: make([]bool, len(locks)), members: members,
		campaigns: func(shard int, member string) bool { return campaigns[candidacy{shard, member}] }}
	tokens := make([]uint64, len(locks))
	for _, r := range recs {
		if i, ok := ShardOf(s.group, r.Name); ok && i < len(locks) {
			g.owners[i], g.movable[i] = r.owner(func(m string) bool { return g.campaigns(i, m) })
			tokens[i] = r.Token
		}
	}
	// The hand-over is held for the target only as long as it needs to win
	// the shard after the owner's next renewal.
	hold := s.cfg.targetHold()
	for _, m := range g.moves(s.cfg.Identity) {
		switch err := s.electors[m.shard].st.request(ctx, locks[m.shard], tokens[m.shard], m.to, hold, false); {
		case errors.Is(err, ErrNoLeader): // the term ended meanwhile
		case err != nil:
			return err
		default:
			s.log.Info("handing a shard over to even the spread", "shard", m.shard, "to", m.to, "token", tokens[m.shard])
		}
	}
	return nil
}

// owner is whom a shard's record counts for when the spread is evened
// out, and whether that one may hand it over: the target of a pending
// hand-over (before the leader stepped down, and after it while the target
// campaigns), else the leader (who may not while an operator's demotion is
// pending), else nobody ("").
func (r Record) owner(campaigns func(member string) bool) (string, bool) {
	switch {
	case r.Leading() && r.HandoverTo == "":
		return r.Identity, !r.demoted
	case r.Leading(), r.State == stateHandedOver && r.HandoverTo != "" && campaigns(r.HandoverTo):
		return r.HandoverTo, false
	}
	return "", false
}

// spreadRead is what a round of rebalancing reads: the owner of each shard
// ("" for none) and whether that owner may hand it over (it leads it, with
// no hand-over or demotion pending), the live members, and who campaigns in
// which shard.
type spreadRead struct {
	owners    []string
	movable   []bool
	members   []string
	campaigns func(shard int, member string) bool
}

// move hands shard over to the member to.
type move struct {
	shard int
	to    string
}

// moves returns the hand-overs member self makes so that no member owns
// more than its share, ceil(N/M) of N shards over M live members: each
// member that owns more gives its excess, shards it may hand over, each to
// the member that owns fewest among those below their share that campaign
// in that shard. Givers take turns in the order of their names, and ties
// go by name, so every member computes the same moves from the same read
// and makes only its own.
func (g spreadRead) moves(self string) []move {
	members := slices.Clone(g.members)
	if !slices.Contains(members, self) {
		members = append(members, self) // it reads its own rows as they are renewed
	}
	slices.Sort(members)
	owned := map[string]int{}
	for _, o := range g.owners {
		if o != "" {
			owned[o]++
		}
	}
	share := (len(g.owners) + len(members) - 1) / len(members)
	var out []move
	for _, giver := range members {
		excess := owned[giver] - share
		for shard, o := range g.owners {
			if excess <= 0 {
				break
			}
			if o != giver || !g.movable[shard] {
				continue
			}
			to := ""
			for _, m := range members {
				if owned[m] < share && g.campaigns(shard, m) && (to == "" || owned[m] < owned[to]) {
					to = m
				}
			}
			if to == "" {
				continue
			}
			if giver == self {
				out = append(out, move{shard: shard, to: to})
			}
			owned[to]++
			owned[giver]--
			excess--
		}
	}
	return out
}

package election

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
)

// From any assignment, the moves every member computes from one read
// give no shard twice, give only shards their giver may hand over, each
// to a member that campaigns in it and owned fewer than its share, take
// none from a member within its share and bring no receiver above it.
// Where every member campaigns in every shard and no hand-over is pending,
// one round brings every member within its share and the next round moves
// nothing: the spread settles and does not flap.
func TestMovesEvenTheSpreadInOneRound(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for trial := range 4000 {
		free := trial%2 == 0 // every member campaigns everywhere, nothing pending
		n, m := 1+r.IntN(300), 1+r.IntN(9)
		members := make([]string, m)
		for i := range members {
			members[i] = fmt.Sprintf("m%d", r.IntN(1000)*10+i) // names in no useful order
		}
		g := spreadRead{owners: make([]string, n), movable: make([]bool, n), members: members}
		for i := range g.owners {
			if k := r.IntN(m + 1); k < m && r.IntN(4) > 0 { // some free, skewed to a few members
				g.owners[i] = members[k*k%m]
			}
			g.movable[i] = free || r.IntN(10) > 0
		}
		out := map[[2]int]bool{} // shard, member index: does not campaign
		g.campaigns = func(shard int, member string) bool { return !out[[2]int{shard, slices.Index(members, member)}] }
		if !free {
			for range n {
				out[[2]int{r.IntN(n), r.IntN(m)}] = true
			}
		}
		share := (n + m - 1) / m
		before, after := counts(g.owners), counts(g.owners)
		given := map[int]bool{}
		next := slices.Clone(g.owners)
		for _, self := range members {
			for _, mv := range g.moves(self) {
				switch {
				case given[mv.shard]:
					t.Fatalf("shard %d given twice in one round", mv.shard)
				case g.owners[mv.shard] != self || !g.movable[mv.shard]:
					t.Fatalf("%s gave shard %d, which %q owns (movable %v)", self, mv.shard, g.owners[mv.shard], g.movable[mv.shard])
				case before[self] <= share:
					t.Fatalf("%s gave a shard while it owned %d, within its share %d", self, before[self], share)
				case !g.campaigns(mv.shard, mv.to):
					t.Fatalf("%s gave shard %d to %s, which does not campaign in it", self, mv.shard, mv.to)
				}
				given[mv.shard] = true
				next[mv.shard] = mv.to
				after[self]--
				if after[mv.to]++; after[mv.to] > share {
					t.Fatalf("%s received shard %d beyond its share %d", mv.to, mv.shard, share)
				}
			}
		}
		if !free {
			continue
		}
		for who, k := range after {
			for _, o := range members {
				if k > share && after[o] < share {
					t.Fatalf("%s still owns %d > share %d while %s owns %d (n %d, m %d)", who, k, share, o, after[o], n, m)
				}
			}
		}
		g.owners = next
		for _, self := range members {
			if mv := g.moves(self); len(mv) > 0 {
				t.Fatalf("a second round moves again: %s gives %v (n %d, m %d, owners %v)", self, mv, n, m, counts(next))
			}
		}
	}
}

func counts(owners []string) map[string]int {
	c := map[string]int{}
	for _, o := range owners {
		if o != "" {
			c[o]++
		}
	}
	return c
}

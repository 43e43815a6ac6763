package election

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
)

// From any assignment, the moves every member computes from one read
// bring each member to at most its share in one round, give no shard
// twice, take none from a member within its share, and then stop: the
// spread settles and does not flap.
func TestMovesEvenTheSpreadInOneRound(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for range 2000 {
		n, m := 1+r.IntN(300), 1+r.IntN(9)
		members := make([]string, m)
		for i := range members {
			members[i] = fmt.Sprintf("m%d", r.IntN(1000)*10+i) // names in no useful order
		}
		owners := make([]string, n)
		for i := range owners {
			if k := r.IntN(m + 1); k < m && r.IntN(4) > 0 { // some free, skewed to a few members
				owners[i] = members[k*k%m]
			}
		}
		share := (n + m - 1) / m
		before := counts(owners)
		given := map[int]bool{}
		next := slices.Clone(owners)
		for _, self := range members {
			for _, mv := range moves(self, owners, slices.Clone(members)) {
				switch {
				case given[mv.shard]:
					t.Fatalf("shard %d given twice in one round", mv.shard)
				case owners[mv.shard] != self:
					t.Fatalf("%s gave shard %d, which %q owns", self, mv.shard, owners[mv.shard])
				case before[self] <= share:
					t.Fatalf("%s gave a shard while it owned %d, within its share %d", self, before[self], share)
				case before[mv.to] >= share:
					t.Fatalf("%s received a shard while it owned %d, its share being %d", mv.to, before[mv.to], share)
				}
				given[mv.shard] = true
				next[mv.shard] = mv.to
			}
		}
		for who, k := range counts(next) {
			if k > share && before[who] > share {
				if free := slices.Index(owners, ""); free >= 0 || m*share > n { // room left somewhere: it should have given
					for _, o := range members {
						if counts(next)[o] < share {
							t.Fatalf("%s still owns %d > share %d while %s owns %d (n %d, m %d)", who, k, share, o, counts(next)[o], n, m)
						}
					}
				}
			}
		}
		for _, self := range members {
			if mv := moves(self, next, slices.Clone(members)); len(mv) > 0 {
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

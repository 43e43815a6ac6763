package main

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/sqlelect/election"
)

// shardView is the JSON form of a shard's record.
type shardView struct {
	Shard int `json:"shard"`
	recordView
}

// shards prints who owns which shard of group (election.Shards) and how
// many each member owns; it exits 4 when the group has no shard with a
// term yet, and 3 when a shard that had one has no owner now.
func (c *cli) shards(ctx context.Context, group string) int {
	recs, err := election.Elections(ctx, c.db, c.prefix)
	if err != nil {
		return c.fail(err)
	}
	var views []shardView
	owned := map[string][]int{}
	code := exitOK
	for _, r := range recs {
		i, ok := election.ShardOf(group, r.Name)
		if !ok {
			continue
		}
		views = append(views, shardView{Shard: i, recordView: view(r, c.src)})
		if r.Leading() {
			owned[r.Identity] = append(owned[r.Identity], i)
		} else {
			code = exitNoLeader
		}
	}
	if len(views) == 0 {
		fmt.Fprintf(c.errOut, "electctl: group %q not found: none of its shards (elections %q, ...) has had a term\n", group, election.ShardName(group, 0))
		return exitNotFound
	}
	slices.SortFunc(views, func(a, b shardView) int { return cmp.Compare(a.Shard, b.Shard) })
	if c.json {
		c.printJSON(views)
		return code
	}
	members := make([]string, 0, len(owned))
	for m := range owned {
		members = append(members, m)
	}
	slices.Sort(members)
	var rows [][]string
	for _, m := range members {
		slices.Sort(owned[m])
		rows = append(rows, []string{shown(m), fmt.Sprint(len(owned[m])), ranges(owned[m])})
	}
	c.table("MEMBER\tSHARDS\tOWNS", rows)
	fmt.Fprintln(c.out)
	rows = rows[:0]
	for _, v := range views {
		owner, state := shown(v.Leader), shown(v.State)
		if !v.Leading {
			owner = "(none)"
		}
		if v.HandoverTo != "" && v.Leading {
			state += ", to " + shown(v.HandoverTo)
		}
		rows = append(rows, []string{fmt.Sprint(v.Shard), owner, fmt.Sprint(v.Token), state, stamp(time.Time(v.Since))})
	}
	c.table("SHARD\tOWNER\tTOKEN\tSTATE\tSINCE", rows)
	return code
}

// ranges prints sorted shard numbers as runs: 0-3, 7, 9-10.
func ranges(ns []int) string {
	var parts []string
	for i := 0; i < len(ns); {
		j := i
		for j+1 < len(ns) && ns[j+1] == ns[j]+1 {
			j++
		}
		if j == i {
			parts = append(parts, fmt.Sprint(ns[i]))
		} else {
			parts = append(parts, fmt.Sprintf("%d-%d", ns[i], ns[j]))
		}
		i = j + 1
	}
	return strings.Join(parts, ", ")
}

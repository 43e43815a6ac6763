package main

import (
	"context"
	"encoding/json"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sqlelect/election"
)

// shards lists each member with the shards it owns, then each shard with
// its owner and token; --json gives one object per shard.
func TestShardsCommand(t *testing.T) {
	c := newCluster(t)
	ctx, stop := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	defer func() { stop(); wg.Wait() }()
	for _, id := range []string{"a", "b"} {
		cfg := fast
		cfg.Identity = id
		s, err := election.NewShards(server.Open(t, c.dbName()), "grp", 6, cfg)
		if err != nil {
			t.Fatal(err)
		}
		wg.Go(func() {
			s.Run(ctx, func(ctx context.Context, _ int, _ *election.Term) error { <-ctx.Done(); return nil })
		})
	}
	var out, errOut string
	var code int
	member := regexp.MustCompile(`(?m)^([ab]) +3 +`)
	deadline := time.Now().Add(time.Minute)
	for {
		code, out, errOut = c.ctl("shards", "grp")
		if code == exitOK && len(member.FindAllString(out, -1)) == 2 && strings.Count(out, "\n") == 1+2+1+1+6 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the shards of grp never showed three each for a and b: exit %d\n%s%s", code, out, errOut)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if !strings.HasPrefix(out, "MEMBER  SHARDS  OWNS\n") || !strings.Contains(out, "\nSHARD  OWNER  TOKEN") {
		t.Errorf("shards grp:\n%s", out)
	}
	code, out, errOut = c.ctl("shards", "grp", "--json")
	var views []struct {
		Shard   int    `json:"shard"`
		Leader  string `json:"leader"`
		Leading bool   `json:"leading"`
		Token   uint64 `json:"token"`
	}
	if err := json.Unmarshal([]byte(out), &views); err != nil || code != exitOK || len(views) != 6 {
		t.Fatalf("shards --json: exit %d, %v\n%s%s", code, err, out, errOut)
	}
	for i, v := range views {
		if v.Shard != i || !v.Leading || v.Token == 0 || (v.Leader != "a" && v.Leader != "b") {
			t.Errorf("shard %d in --json: %+v", i, v)
		}
	}
	code, out, errOut = c.ctl("shards", "nosuch")
	if code != exitNotFound || out != "" || !strings.Contains(errOut, `group "nosuch" not found`) {
		t.Errorf("shards of a group without any: exit %d, want %d\n%s%s", code, exitNotFound, out, errOut)
	}
}

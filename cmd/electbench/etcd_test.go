package main

import (
	"context"
	"encoding/json"
	"maps"
	"os"
	"slices"
	"testing"
)

// The etcd contenders through a short comparison, on a private etcd of one
// node and of three: each fault once. Every fault must be followed by
// another leader, the checker must find writes and no violation, and the
// SIGSTOPped leader, once resumed, must learn that its term ended, its
// guarded writes refused or at least none accepted stale.
func TestEtcd(t *testing.T) {
	if (etcdBinaries{os.Getenv(envEtcd), os.Getenv(envEtcdCandidate)}).check() != nil {
		t.Skipf("no etcd: run `. scripts/etcd.sh && ensure_etcd` first (it sets %s and %s)", envEtcd, envEtcdCandidate)
	}
	dir := t.TempDir()
	out, err := os.Create(dir + "/out")
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close()
	err = benchMain(context.Background(), []string{"-contenders", "etcd,etcd-3", "-faults", "sigkill,sigterm,sigstop,blackhole,raft-leader", "-reps", "1",
		"-interval", "100ms", "-lease", "1s", "-margin", "1s", "-limit", "15s", "-json", dir + "/etcd.json"}, out)
	report, _ := os.ReadFile(out.Name())
	if err != nil {
		t.Fatalf("electbench: %v\n%s", err, report)
	}
	t.Log("\n" + string(report))
	b, err := os.ReadFile(dir + "/etcd.json")
	if err != nil {
		t.Fatal(err)
	}
	var res results
	if err := json.Unmarshal(b, &res); err != nil {
		t.Fatal(err)
	}
	want := map[string][]string{
		etcd1: {fSIGKILL, fSIGTERM, fSIGSTOP, fBlackH},
		etcd3: {fSIGKILL, fSIGTERM, fSIGSTOP, fBlackH, fRaftLeader},
	}
	for _, tr := range res.Trials {
		if !slices.Contains(want[tr.Contender], tr.Fault) {
			t.Errorf("%s: unexpected fault %s", tr.Contender, tr.Fault)
			continue
		}
		want[tr.Contender] = slices.DeleteFunc(want[tr.Contender], func(f string) bool { return f == tr.Fault })
		if tr.FailoverS <= 0 {
			t.Errorf("%s %s: no failover: %+v", tr.Contender, tr.Fault, tr)
		}
		if tr.Fault == fSIGSTOP && tr.KnewS < 0 {
			t.Errorf("%s %s: the resumed leader never learned that its term ended: %+v", tr.Contender, tr.Fault, tr)
		}
	}
	for c, faults := range want {
		if len(faults) > 0 {
			t.Errorf("%s: no trial of %v", c, faults)
		}
	}
	for _, v := range res.Verdicts {
		if len(v.Violations) > 0 || v.Writes == 0 {
			t.Errorf("%s: %d writes, violations %q", v.Contender, v.Writes, v.Violations)
		}
		if v.Refused == 0 && v.Stale > 0 {
			t.Errorf("%s: no write refused, %d stale writes accepted", v.Contender, v.Stale)
		}
		if v.Counter != nil || v.Linearizable != "" {
			t.Errorf("%s: MySQL's checks in the verdict: %+v", v.Contender, v)
		}
	}
	for _, s := range res.Etcd {
		if s.TTL < int64(s.AskedTTL) || s.Version == "" {
			t.Errorf("etcd setting %+v", s)
		}
	}
	for _, c := range res.Costs {
		if c.RequestsPerSec <= 0 || c.QueriesPerSec != 0 || c.ConnsPerCand < 1 || c.ServerCPU <= 0 {
			t.Errorf("%s: steady cost %+v", c.Contender, c)
		}
	}
}

// samples reads a metric's samples from a Prometheus exposition, with
// labels or none, and not those of a metric whose name only begins the
// same.
func TestSamples(t *testing.T) {
	exposition := `# HELP etcd_server_is_leader Whether or not this member is a leader.
# TYPE etcd_server_is_leader gauge
etcd_server_is_leader 1
etcd_server_is_leader_changes_seen_total 3
etcd_server_id{server_id="e31f8e08edb73600"} 1
grpc_server_msg_received_total{grpc_method="LeaseKeepAlive",grpc_service="etcdserverpb.Lease",grpc_type="bidi_stream"} 42
grpc_server_msg_received_total{grpc_method="Txn",grpc_service="etcdserverpb.KV",grpc_type="unary"} 1.5e+06
`
	for _, c := range []struct {
		name string
		want map[string]float64
	}{
		{"etcd_server_is_leader", map[string]float64{"": 1}},
		{"etcd_server_id", map[string]float64{`server_id="e31f8e08edb73600"`: 1}},
		{"grpc_server_msg_received_total", map[string]float64{
			`grpc_method="LeaseKeepAlive",grpc_service="etcdserverpb.Lease",grpc_type="bidi_stream"`: 42,
			`grpc_method="Txn",grpc_service="etcdserverpb.KV",grpc_type="unary"`:                     1.5e6,
		}},
		{"etcd_absent", map[string]float64{}},
	} {
		if got := samples(exposition, c.name); !maps.Equal(got, c.want) {
			t.Errorf("samples %s: %v, want %v", c.name, got, c.want)
		}
	}
}

// established counts the rows of /proc/net/tcp in state 01 whose inode is
// one of the sockets.
func TestEstablished(t *testing.T) {
	table := `  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 0100007F:0CEA 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 111 1 0000000000000000 100 0 0 10 0
   1: 0100007F:D2F0 0100007F:0CEA 01 00000000:00000000 00:00000000 00000000     0        0 222 1 0000000000000000 20 4 30 10 -1
   2: 0100007F:D2F2 0100007F:0CEA 01 00000000:00000000 00:00000000 00000000     0        0 333 1 0000000000000000 20 4 30 10 -1
   3: 0100007F:D2F4 0100007F:0CEA 06 00000000:00000000 03:00000F2A 00000000     0        0 0 3 0000000000000000
`
	if n := established(table, map[string]bool{"111": true, "222": true, "444": true}); n != 1 {
		t.Errorf("established: %d, want 1 (222; 111 listens, 333 is not ours)", n)
	}
}

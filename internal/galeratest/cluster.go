// Package galeratest gives tests a real three-node MariaDB Galera cluster on
// 127.0.0.1, started from the Debian packages (installed when missing),
// with HAProxy in TCP mode in front of it, and real faults to inject: a
// node's mariadbd SIGKILLed, SIGSTOPped and SIGCONTed, and restarted. It
// never mocks the server. Each node is a private mysqltest.Server, so tests
// make databases and pools on it as on the single server.
package galeratest

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sqlelect/election/internal/leakcheck"
	"github.com/sqlelect/election/internal/mysqltest"
)

// Size is the number of nodes. They are numbered 1 to Size.
const Size = 3

// Cluster is a Galera cluster the harness owns.
type Cluster struct {
	nodes []*mysqltest.Server // node i is nodes[i-1]
	proxy *HAProxy
	dir   string

	// unavailable says why there is no cluster: its packages could not be
	// installed. Need skips on it.
	unavailable string

	mu     sync.Mutex
	paused map[int]bool
}

// ports of one node: SQL clients, group communication (gcomm), incremental
// state transfer (IST), full state transfer (SST, an rsync daemon).
type ports struct{ sql, gcomm, ist, sst int }

// freePorts returns n distinct ports that are free on 127.0.0.1 now. Other
// jobs run on the machine, so no port is fixed; they are held together
// until all are chosen, so that none is handed out twice.
func freePorts(n int) ([]int, error) {
	var ps []int
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		defer l.Close()
		ps = append(ps, l.Addr().(*net.TCPAddr).Port)
	}
	return ps, nil
}

// Start starts a cluster: node 1 bootstraps it (--wsrep-new-cluster), nodes
// 2 and 3 join one after the other by a full state transfer (rsync) from
// it, each waited for until Synced; then HAProxy starts in front of the
// three. Packages must be there (Main installs them).
func Start(ctx context.Context) (*Cluster, error) {
	bin := mariadbd()
	if bin == "" {
		return nil, errors.New("galeratest: no mariadbd: install mariadb-server")
	}
	dir, err := os.MkdirTemp("", "election-galera-")
	if err != nil {
		return nil, err
	}
	c := &Cluster{dir: dir, paused: map[int]bool{}}
	if err := c.start(ctx, bin); err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}

func (c *Cluster) start(ctx context.Context, bin string) error {
	// The nodes' user must reach its directory inside this one.
	if err := os.Chmod(c.dir, 0o711); err != nil {
		return err
	}
	// Not as root: as root, the rsync daemon that wsrep_sst_rsync starts on
	// a joining node drops to user nobody and cannot write the datadir
	// ("mkdir ... failed: Permission denied (13)"). Started as mysql from
	// the first instruction, not as root with --user.
	runAs := ""
	if os.Getuid() == 0 {
		runAs = "mysql"
	}
	free, err := freePorts(4 * Size)
	if err != nil {
		return err
	}
	var ps []ports
	var gcomm []string
	for i := range Size {
		p := ports{free[4*i], free[4*i+1], free[4*i+2], free[4*i+3]}
		ps = append(ps, p)
		gcomm = append(gcomm, "127.0.0.1:"+strconv.Itoa(p.gcomm))
	}
	for i, p := range ps {
		n := i + 1
		node, err := mysqltest.NewPrivate(bin, filepath.Join(c.dir, "n"+strconv.Itoa(n)), p.sql, runAs,
			"--performance-schema=OFF",
			"--innodb-log-file-size=32M",
			"--binlog-format=ROW",
			"--default-storage-engine=InnoDB",
			"--innodb-autoinc-lock-mode=2",
			"--wsrep-on=ON",
			"--wsrep-provider="+provider,
			"--wsrep-cluster-name=election-test",
			"--wsrep-cluster-address=gcomm://"+strings.Join(gcomm, ","),
			"--wsrep-node-name=n"+strconv.Itoa(n),
			"--wsrep-node-address=127.0.0.1:"+strconv.Itoa(p.gcomm),
			"--wsrep-node-incoming-address=127.0.0.1:"+strconv.Itoa(p.sql),
			"--wsrep-provider-options=gmcast.listen_addr=tcp://127.0.0.1:"+strconv.Itoa(p.gcomm)+
				";ist.recv_addr=127.0.0.1:"+strconv.Itoa(p.ist)+";gcache.size=64M",
			"--wsrep-sst-method=rsync",
			"--wsrep-sst-receive-address=127.0.0.1:"+strconv.Itoa(p.sst),
			"--wsrep-slave-threads=1",
		)
		if err != nil {
			return err
		}
		c.nodes = append(c.nodes, node)
	}
	if err := c.nodes[0].Initialize(ctx); err != nil {
		return err
	}
	if err := c.boot(ctx, 1, "--wsrep-new-cluster"); err != nil {
		return err
	}
	// HAProxy's health check logs in as this user, with no password and no
	// privileges, and quits; created once, it replicates to the joiners.
	if err := c.Node(1).Exec(ctx, "CREATE USER '"+checkUser+"'@'127.0.0.1'"); err != nil {
		return err
	}
	for n := 2; n <= Size; n++ {
		if err := c.boot(ctx, n); err != nil {
			return err
		}
	}
	var addrs []string
	for _, node := range c.nodes {
		addrs = append(addrs, node.Addr())
	}
	c.proxy, err = startHAProxy(ctx, c.dir, addrs)
	return err
}

// boot starts node n and waits until it is Synced in a primary component
// with every running node.
func (c *Cluster) boot(ctx context.Context, n int, once ...string) error {
	if err := c.Node(n).Boot(ctx, once...); err != nil {
		return fmt.Errorf("galeratest: node %d: %w", n, err)
	}
	return c.WaitHealthy(ctx)
}

// Node returns node n (1 to Size).
func (c *Cluster) Node(n int) *mysqltest.Server { return c.nodes[n-1] }

// DSN returns node n's DSN for database db, as root.
func (c *Cluster) DSN(n int, db string) string { return c.Node(n).DSN(db) }

// Proxy returns the HAProxy in front of the nodes, as a server to make
// databases and pools on.
func (c *Cluster) Proxy() *mysqltest.Server { return c.proxy.server }

// Kill ends node n's mariadbd with SIGKILL and waits until it is gone.
func (c *Cluster) Kill(n int) error {
	c.setPaused(n, false)
	return c.Node(n).Kill()
}

// Pause stops node n's mariadbd with SIGSTOP: the kernel still accepts
// connections to it, but it answers nothing, neither clients nor the other
// nodes, which evict it after Galera's suspect timeout (evs.suspect_timeout,
// 5 s).
func (c *Cluster) Pause(n int) error {
	if err := c.Node(n).Pause(); err != nil {
		return err
	}
	c.setPaused(n, true)
	return nil
}

// Resume continues node n (SIGCONT). It serves what it had until it notices
// that the others went on without it; then it rejoins by itself
// (WaitHealthy waits for that).
func (c *Cluster) Resume(n int) error {
	if err := c.Node(n).Resume(); err != nil {
		return err
	}
	c.setPaused(n, false)
	return nil
}

// recovered is what mariadbd --wsrep-recover logs: the cluster's state
// UUID and the last write set the node committed.
var recovered = regexp.MustCompile(`WSREP: Recovered position: ([0-9a-f-]+:-?[0-9]+)`)

// Restart starts node n again after Kill, and waits until the cluster is
// healthy again. As the Debian service does (galera_recovery), it first
// recovers the node's position from InnoDB (mariadbd --wsrep-recover): a
// node killed mid-flight has none recorded, and started without one it
// would take a full copy (SST) instead of the write sets it missed (IST).
//
// The recovery takes a second or two. Once, mariadbd logged the position
// and then did not exit until the run's deadline, minutes later, and every
// test after it found the node down: so it gets a minute, and a position
// it logged is used even if it had to be killed.
func (c *Cluster) Restart(ctx context.Context, n int) error {
	rctx, cancel := context.WithTimeout(ctx, time.Minute)
	log, err := c.Node(n).RunOnce(rctx, "--wsrep-recover")
	cancel()
	m := recovered.FindAllStringSubmatch(log, -1)
	if err != nil && len(m) == 0 {
		return fmt.Errorf("galeratest: node %d: %w", n, err)
	}
	var once []string
	if len(m) > 0 {
		once = append(once, "--wsrep-start-position="+m[len(m)-1][1])
	}
	return c.boot(ctx, n, once...)
}

func (c *Cluster) setPaused(n int, paused bool) {
	c.mu.Lock()
	c.paused[n] = paused
	c.mu.Unlock()
}

// running returns the nodes whose mariadbd runs and is not paused.
func (c *Cluster) running() []int {
	c.mu.Lock()
	defer c.mu.Unlock()
	var ns []int
	for n := 1; n <= Size; n++ {
		if c.Node(n).PID() != 0 && !c.paused[n] {
			ns = append(ns, n)
		}
	}
	return ns
}

// Status is a node's view of the cluster, from its wsrep status variables.
type Status struct {
	State  string // wsrep_local_state_comment: Synced, Donor/Desynced, Joining, Joined, ...
	Status string // wsrep_cluster_status: Primary, non-Primary, Disconnected
	Size   int    // wsrep_cluster_size: members of its view
	ConfID int64  // wsrep_cluster_conf_id: the view's number, the same on every member
	Ready  bool   // wsrep_ready: it accepts queries
}

// Status reads node n's view of the cluster.
func (c *Cluster) Status(ctx context.Context, n int) (Status, error) {
	db, err := sql.Open("mysql", c.DSN(n, ""))
	if err != nil {
		return Status{}, err
	}
	defer db.Close()
	rows, err := db.QueryContext(ctx, "SHOW GLOBAL STATUS WHERE Variable_name IN "+
		"('wsrep_local_state_comment', 'wsrep_cluster_status', 'wsrep_cluster_size', 'wsrep_cluster_conf_id', 'wsrep_ready')")
	if err != nil {
		return Status{}, err
	}
	defer rows.Close()
	var s Status
	for rows.Next() {
		var name, value string
		if err := rows.Scan(&name, &value); err != nil {
			return Status{}, err
		}
		switch strings.ToLower(name) {
		case "wsrep_local_state_comment":
			s.State = value
		case "wsrep_cluster_status":
			s.Status = value
		case "wsrep_cluster_size":
			s.Size, _ = strconv.Atoi(value)
		case "wsrep_cluster_conf_id":
			s.ConfID, _ = strconv.ParseInt(value, 10, 64)
		case "wsrep_ready":
			s.Ready = value == "ON"
		}
	}
	return s, rows.Err()
}

// WaitHealthy waits until every running, unpaused node is Synced and ready
// in one primary component made of exactly those nodes: the same view
// (conf id) on all, of their number. A resumed node still reports its old
// view, Synced, until it notices it was evicted, so the view's number is
// what tells it has rejoined.
func (c *Cluster) WaitHealthy(ctx context.Context) error {
	var last []string
	for {
		ns := c.running()
		last = last[:0]
		healthy := len(ns) > 0
		var conf int64 = -1
		for _, n := range ns {
			sctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			s, err := c.Status(sctx, n)
			cancel()
			last = append(last, fmt.Sprintf("node %d: %+v %v", n, s, err))
			if err != nil || s.State != "Synced" || s.Status != "Primary" || !s.Ready || s.Size != len(ns) || (conf >= 0 && s.ConfID != conf) {
				healthy = false
			}
			conf = s.ConfID
		}
		if healthy {
			return nil
		}
		for n := 1; n <= Size; n++ {
			if c.Node(n).Exited() {
				return fmt.Errorf("galeratest: node %d exited; its log ends:\n%s", n, c.Node(n).LogTail(3000))
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("galeratest: the cluster is not healthy (%v): %s", context.Cause(ctx), strings.Join(last, "; "))
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// NewDatabase creates a fresh database for one test on a running node and
// returns once every running node has it (DDL replicates in total order,
// but a node may apply it a moment later). It is dropped when the test
// ends, through whichever node runs then.
func (c *Cluster) NewDatabase(t testing.TB) (name string) {
	t.Helper()
	ns := c.running()
	if len(ns) == 0 {
		t.Fatal("galeratest: no node runs")
	}
	name = c.Node(ns[0]).NewDatabase(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, n := range ns {
		// Not a pool on the database: the driver names it in the handshake,
		// before wsrep_sync_wait is set, and a lagging node would not know it.
		db := c.OpenSynced(t, n, "")
		var found int
		err := db.QueryRowContext(ctx, "SELECT COUNT(*) FROM information_schema.SCHEMATA WHERE SCHEMA_NAME = ?", name).Scan(&found)
		db.Close()
		if err != nil || found != 1 {
			t.Fatalf("galeratest: database %s on node %d: found %d, %v", name, n, found, err)
		}
	}
	return name
}

// OpenSynced returns a pool on node n's database db (empty: none) whose
// statements first wait until the node has applied every write the cluster
// committed before they were sent (wsrep_sync_wait): a read through it sees
// the cluster's state, not the node's possibly lagging copy. (Not so the
// database named in the DSN, which the driver selects at log-in, before.)
// Closed when the test ends.
func (c *Cluster) OpenSynced(t testing.TB, n int, db string) *sql.DB {
	t.Helper()
	cfg := c.Node(n).Config(db)
	if cfg.Params == nil {
		cfg.Params = map[string]string{}
	}
	cfg.Params["wsrep_sync_wait"] = "15"
	pool, err := sql.Open("mysql", cfg.FormatDSN())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pool.Close() })
	return pool
}

// Describe says what the cluster is, for logs.
func (c *Cluster) Describe() string {
	var addrs []string
	for _, node := range c.nodes {
		addrs = append(addrs, node.Addr())
	}
	return fmt.Sprintf("a %d-node MariaDB Galera cluster on %s behind HAProxy on %s (files in %s)",
		Size, strings.Join(addrs, ", "), c.proxy.server.Addr(), c.dir)
}

// Close stops HAProxy and the nodes, and removes their files.
func (c *Cluster) Close() {
	if c.proxy != nil {
		c.proxy.close()
	}
	for i := len(c.nodes); i >= 1; i-- {
		c.Node(i).Close()
	}
	os.RemoveAll(c.dir)
}

// Need skips t when there is no cluster, because its packages could not be
// installed (the reason is in the message), and returns the cluster.
func (c *Cluster) Need(t testing.TB) *Cluster {
	t.Helper()
	if c.unavailable != "" {
		t.Skip("galeratest: no Galera cluster: " + c.unavailable)
	}
	return c
}

// Main is a Galera test binary's TestMain body: it installs the packages
// when missing, starts one cluster for the whole binary, hands it to use,
// runs the tests (failing if a goroutine outlives them, see leakcheck.Run),
// stops the cluster and returns the exit code. When the packages cannot be
// installed it says why on stderr and the tests skip with that reason
// (Cluster.Need); when they are there but the cluster does not start, it
// fails.
func Main(m *testing.M, use func(*Cluster)) int {
	if why := EnsurePackages(); why != "" {
		fmt.Fprintln(os.Stderr, "galeratest: the Galera tests skip:", why)
		use(&Cluster{unavailable: why})
		return m.Run()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	began := time.Now()
	c, err := Start(ctx)
	cancel()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer func() {
		began := time.Now()
		c.Close()
		fmt.Fprintf(os.Stderr, "galeratest: the cluster stopped in %v\n", time.Since(began).Round(time.Millisecond))
	}()
	fmt.Fprintf(os.Stderr, "tests use %s, started in %v\n", c.Describe(), time.Since(began).Round(time.Millisecond))
	use(c)
	return leakcheck.Run(m)
}

// ProxyLog returns what HAProxy printed: its alerts, such as nodes marked
// down or up.
func (c *Cluster) ProxyLog() string { return c.proxy.Log() }

// Backend returns the node that a new session through the proxy reaches.
func (c *Cluster) Backend(ctx context.Context) (int, error) {
	db, err := sql.Open("mysql", c.Proxy().DSN(""))
	if err != nil {
		return 0, err
	}
	defer db.Close()
	var name string
	if err := db.QueryRowContext(ctx, "SELECT @@wsrep_node_name").Scan(&name); err != nil {
		return 0, err
	}
	n, err := strconv.Atoi(strings.TrimPrefix(name, "n"))
	if err != nil {
		return 0, fmt.Errorf("galeratest: unknown node name %q", name)
	}
	return n, nil
}

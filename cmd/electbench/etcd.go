package main

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/sqlelect/election/internal/benchevent"
	"github.com/sqlelect/election/internal/mysqltest"
)

// The etcd contenders: etcd's own election (client/v3/concurrency) on a
// private etcd that the arena starts on loopback. Their candidate process
// is electbench-etcd (the module in ./etcd), so that electbench links no
// etcd client: it speaks to etcd over HTTP alone (/health, /version,
// /metrics, and the gRPC gateway's transfer-leadership).
const (
	etcd1  = "etcd"     // one node; the session TTL is -lease
	etcd3  = "etcd-3"   // three nodes; the same TTL
	etcd60 = "etcd-60s" // one node; etcd's default session TTL
)

var etcdContenders = []string{etcd1, etcd3, etcd60}

// isEtcd reports whether contender is etcd's.
func isEtcd(contender string) bool { return slices.Contains(etcdContenders, contender) }

// etcdTTL is the session TTL, in seconds, that contender's candidates ask
// for: -lease rounded up, or etcd's default 60. The server grants at least
// its minimum (2 s with its default election timeout).
func etcdTTL(contender string, tm timing) int {
	if contender == etcd60 {
		return 60
	}
	return int(math.Ceil(tm.Lease.Seconds()))
}

// Where electbench finds the binaries of the etcd contenders, unless the
// flags say; scripts/etcd.sh sets them.
const (
	envEtcd          = "ELECTBENCH_ETCD"
	envEtcdCandidate = "ELECTBENCH_ETCD_CANDIDATE"
)

// etcdBinaries are the etcd server and electbench-etcd.
type etcdBinaries struct {
	server, candidate string
}

// check says how to get the binaries if one is missing.
func (b etcdBinaries) check() error {
	if b.server == "" || b.candidate == "" {
		return fmt.Errorf("the etcd contenders need the etcd server and electbench-etcd: run `. scripts/etcd.sh && ensure_etcd`, "+
			"which sets %s and %s, or pass -etcd and -etcd-candidate", envEtcd, envEtcdCandidate)
	}
	return nil
}

// etcdSetting is how an etcd contender ran, for the report's header.
type etcdSetting struct {
	Contender string `json:"contender"`
	Version   string `json:"version"`
	Nodes     int    `json:"nodes"`
	AskedTTL  int    `json:"asked_ttl_s"`
	TTL       int64  `json:"granted_ttl_s"` // as its terms' leases were granted; 0: no term began
}

// etcdCluster is a private etcd of one or three nodes on loopback, with
// their data and logs in a temporary folder, killed on close.
type etcdCluster struct {
	bin   string
	dir   string
	nodes []*etcdNode
	// http keeps no connection between requests: none outlives the
	// cluster (the tests check for leaked goroutines).
	http *http.Client
}

// etcdNode is one member: its client and peer addresses (host:port) stay
// the same across restarts.
type etcdNode struct {
	name, client, peer string
	cmd                *exec.Cmd
	exited             chan struct{}
}

// startEtcd starts a cluster of n nodes from bin and waits until each is
// healthy.
func startEtcd(ctx context.Context, bin string, n int) (*etcdCluster, error) {
	dir, err := os.MkdirTemp("", "electbench-etcd-")
	if err != nil {
		return nil, err
	}
	c := &etcdCluster{bin: bin, dir: dir, http: &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}}
	ports, err := freePorts(2 * n)
	if err != nil {
		c.close()
		return nil, err
	}
	var initial []string
	for i := range n {
		nd := &etcdNode{name: fmt.Sprintf("n%d", i), client: fmt.Sprintf("127.0.0.1:%d", ports[2*i]), peer: fmt.Sprintf("127.0.0.1:%d", ports[2*i+1])}
		c.nodes = append(c.nodes, nd)
		initial = append(initial, nd.name+"=http://"+nd.peer)
	}
	for i := range c.nodes {
		if err := c.start(i, "--initial-cluster", strings.Join(initial, ","), "--initial-cluster-state", "new", "--initial-cluster-token", filepath.Base(dir)); err != nil {
			c.close()
			return nil, err
		}
	}
	if err := c.waitHealthy(ctx); err != nil {
		c.close()
		return nil, err
	}
	return c, nil
}

// freePorts returns n distinct ports that are free on 127.0.0.1 now.
func freePorts(n int) ([]int, error) {
	var ports []int
	for len(ports) < n {
		p, err := mysqltest.FreePort()
		if err != nil {
			return nil, err
		}
		if !slices.Contains(ports, p) {
			ports = append(ports, p)
		}
	}
	return ports, nil
}

// start starts node i on its data folder, a new one with first's options
// (the initial cluster), else the one it left; it logs to a file beside it.
func (c *etcdCluster) start(i int, first ...string) error {
	nd := c.nodes[i]
	log, err := os.OpenFile(filepath.Join(c.dir, nd.name+".log"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	defer log.Close()
	cmd := exec.Command(c.bin, append([]string{"--name", nd.name, "--data-dir", filepath.Join(c.dir, nd.name),
		"--listen-client-urls", "http://" + nd.client, "--advertise-client-urls", "http://" + nd.client,
		"--listen-peer-urls", "http://" + nd.peer, "--initial-advertise-peer-urls", "http://" + nd.peer,
		"--log-level", "warn"}, first...)...)
	cmd.Stdout, cmd.Stderr = log, log
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("starting etcd %s: %w", nd.name, err)
	}
	exited := make(chan struct{})
	go func() { cmd.Wait(); close(exited) }()
	nd.cmd, nd.exited = cmd, exited
	return nil
}

// kill ends node i with SIGKILL and waits until it is gone.
func (c *etcdCluster) kill(i int) {
	nd := c.nodes[i]
	if nd.cmd == nil {
		return
	}
	nd.cmd.Process.Kill()
	<-nd.exited
	nd.cmd = nil
}

// restart kills every node with SIGKILL, starts them again and waits until
// they are healthy.
func (c *etcdCluster) restart(ctx context.Context) error {
	for i := range c.nodes {
		c.kill(i)
	}
	for i := range c.nodes {
		if err := c.start(i); err != nil {
			return err
		}
	}
	return c.waitHealthy(ctx)
}

// etcdLimit bounds how long the parent waits for etcd: to be healthy, to
// have moved its leader.
const etcdLimit = 60 * time.Second

// waitHealthy waits until every node that runs says it is healthy: it has
// a leader and serves reads.
func (c *etcdCluster) waitHealthy(ctx context.Context) error {
	return c.poll(ctx, "etcd is not healthy", func() error { return c.healthy(ctx) })
}

// poll calls try every 100 ms until it returns nil, ctx ends or etcdLimit
// passes; the error says what did not happen and why.
func (c *etcdCluster) poll(ctx context.Context, what string, try func() error) error {
	end := time.Now().Add(etcdLimit)
	for {
		err := try()
		switch {
		case err == nil:
			return nil
		case ctx.Err() != nil || time.Now().After(end):
			return fmt.Errorf("%s within %v: %w (logs in %s)", what, etcdLimit, err, c.dir)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// healthy returns nil if every running node says it is healthy.
func (c *etcdCluster) healthy(ctx context.Context) error {
	for i, nd := range c.nodes {
		if nd.cmd == nil {
			continue
		}
		b, err := c.get(ctx, i, "/health")
		if err != nil {
			return err
		}
		var h struct{ Health, Reason string }
		if err := json.Unmarshal(b, &h); err != nil {
			return fmt.Errorf("etcd %s: /health: %w", nd.name, err)
		}
		if h.Health != "true" {
			return fmt.Errorf("etcd %s: health %q: %s", nd.name, h.Health, h.Reason)
		}
	}
	return nil
}

// get reads path from node i.
func (c *etcdCluster) get(ctx context.Context, i int, path string) ([]byte, error) {
	return c.do(ctx, http.MethodGet, i, path, nil)
}

// do sends an HTTP request to node i and returns the body of its answer,
// or an error unless it is 200 OK.
func (c *etcdCluster) do(ctx context.Context, method string, i int, path string, body io.Reader) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, method, "http://"+c.nodes[i].client+path, body)
	if err != nil {
		return nil, err
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err == nil && resp.StatusCode != http.StatusOK {
		err = fmt.Errorf("%s %s: %s: %s", method, req.URL, resp.Status, bytes.TrimSpace(b))
	}
	return b, err
}

// metrics reads node i's /metrics.
func (c *etcdCluster) metrics(ctx context.Context, i int) (string, error) {
	b, err := c.get(ctx, i, "/metrics")
	return string(b), err
}

// leader returns the node that says it is the raft leader.
func (c *etcdCluster) leader(ctx context.Context) (int, error) {
	for i, nd := range c.nodes {
		if nd.cmd == nil {
			continue
		}
		m, err := c.metrics(ctx, i)
		if err != nil {
			return -1, err
		}
		if samples(m, "etcd_server_is_leader")[""] == 1 {
			return i, nil
		}
	}
	return -1, errors.New("no etcd node says it leads")
}

// moveLeader makes node to the raft leader, by the leader's
// transfer-leadership, and waits until it is.
func (c *etcdCluster) moveLeader(ctx context.Context, to int) error {
	m, err := c.metrics(ctx, to)
	if err != nil {
		return err
	}
	var id uint64
	for labels := range samples(m, "etcd_server_id") {
		hex := strings.TrimSuffix(strings.TrimPrefix(labels, `server_id="`), `"`)
		if id, err = strconv.ParseUint(hex, 16, 64); err != nil {
			return fmt.Errorf("etcd %s: server id %q: %w", c.nodes[to].name, labels, err)
		}
	}
	return c.poll(ctx, "etcd's leadership did not move to "+c.nodes[to].name, func() error {
		from, err := c.leader(ctx)
		switch {
		case err != nil:
			return err
		case from == to:
			return nil
		}
		// The gateway takes a uint64 as a JSON string.
		if _, err := c.do(ctx, http.MethodPost, from, "/v3/maintenance/transfer-leadership", strings.NewReader(fmt.Sprintf(`{"targetID": "%d"}`, id))); err != nil {
			return err
		}
		return fmt.Errorf("%s still leads", c.nodes[from].name)
	})
}

// requests is how many gRPC messages the nodes have received so far
// (grpc_server_msg_received_total, summed over the nodes): one per unary
// request, and one per message on a stream, such as a lease keepalive.
func (c *etcdCluster) requests(ctx context.Context) (float64, error) {
	var n float64
	for i := range c.nodes {
		m, err := c.metrics(ctx, i)
		if err != nil {
			return 0, err
		}
		for _, v := range samples(m, "grpc_server_msg_received_total") {
			n += v
		}
	}
	return n, nil
}

// version is what the first node says it runs.
func (c *etcdCluster) version(ctx context.Context) string {
	var v struct{ Etcdserver string }
	b, err := c.get(ctx, 0, "/version")
	if err == nil {
		err = json.Unmarshal(b, &v)
	}
	if err != nil {
		return "unknown (" + err.Error() + ")"
	}
	return v.Etcdserver
}

// pids are the nodes' processes.
func (c *etcdCluster) pids() []int {
	var pids []int
	for _, nd := range c.nodes {
		if nd.cmd != nil {
			pids = append(pids, nd.cmd.Process.Pid)
		}
	}
	return pids
}

// clients are the nodes' client addresses.
func (c *etcdCluster) clients() []string {
	var addrs []string
	for _, nd := range c.nodes {
		addrs = append(addrs, nd.client)
	}
	return addrs
}

// close kills the nodes and removes their data and logs.
func (c *etcdCluster) close() {
	for i := range c.nodes {
		c.kill(i)
	}
	os.RemoveAll(c.dir)
}

// samples returns the samples of the metric name in a Prometheus text
// exposition: each one's labels, as written between the braces ("" for
// none), and its value.
func samples(exposition, name string) map[string]float64 {
	s := map[string]float64{}
	sc := bufio.NewScanner(strings.NewReader(exposition))
	for sc.Scan() {
		rest, ok := strings.CutPrefix(sc.Text(), name)
		if !ok {
			continue
		}
		labels := ""
		if strings.HasPrefix(rest, "{") {
			end := strings.LastIndexByte(rest, '}')
			if end < 0 {
				continue
			}
			labels, rest = rest[1:end], rest[end+1:]
		}
		// A name that only begins with name has no space here.
		if !strings.HasPrefix(rest, " ") {
			continue
		}
		if v, err := strconv.ParseFloat(strings.Fields(rest)[0], 64); err == nil {
			s[labels] = v
		}
	}
	return s
}

// etcdCommand is candidate p's process: electbench-etcd, connecting
// through its proxy if it has one, else to its node.
func (a *arena) etcdCommand(p *proc) *exec.Cmd {
	addr := a.etcd.nodes[p.node].client
	if p.proxy != nil {
		addr = p.proxy.Addr()
	}
	return exec.Command(a.etcdBins.candidate, "candidate", "-id", p.id, "-endpoints", addr,
		"-ttl", strconv.Itoa(etcdTTL(a.contender, a.tm)), "-write-every", a.tm.WriteEvery.String())
}

// etcdWrites returns the writes etcd committed, in commit order, as
// electbench-etcd dump prints them; a row's id is its revision.
func (a *arena) etcdWrites(ctx context.Context) ([]row, error) {
	ctx, cancel := context.WithTimeout(ctx, etcdLimit)
	defer cancel()
	var stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, a.etcdBins.candidate, "dump", "-endpoints", strings.Join(a.etcd.clients(), ","))
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("electbench-etcd dump: %w: %s", err, stderr.Bytes())
	}
	var ws []row
	for line := range bytes.Lines(out) {
		var w benchevent.Write
		if err := json.Unmarshal(line, &w); err != nil {
			return nil, fmt.Errorf("electbench-etcd dump: %w: %s", err, line)
		}
		ws = append(ws, row{id: w.Rev, holder: w.Holder, term: w.Term, token: w.Token, op: w.Op, at: time.Unix(0, w.At)})
	}
	slices.SortFunc(ws, func(x, y row) int { return cmp.Compare(x.id, y.id) })
	return ws, nil
}

// etcdSetting is how the arena's etcd ran: its version, nodes and TTL.
func (a *arena) etcdSetting(ctx context.Context) etcdSetting {
	s := etcdSetting{Contender: a.contender, Version: a.etcd.version(ctx), Nodes: len(a.etcd.nodes), AskedTTL: etcdTTL(a.contender, a.tm)}
	for _, e := range a.log {
		if e.Ev == "start" && e.TTLS > 0 {
			s.TTL = e.TTLS
			break
		}
	}
	return s
}

// tcpConnections counts the established TCP connections of the processes
// pids, from /proc (Linux, as the arena is): the sockets among their file
// descriptors that /proc/net/tcp and tcp6 list as established.
func tcpConnections(pids []int) int {
	sockets := map[string]bool{}
	for _, pid := range pids {
		fds, _ := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
		for _, fd := range fds {
			link, _ := os.Readlink(fmt.Sprintf("/proc/%d/fd/%s", pid, fd.Name()))
			if inode, ok := strings.CutPrefix(link, "socket:["); ok {
				sockets[strings.TrimSuffix(inode, "]")] = true
			}
		}
	}
	n := 0
	for _, table := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		b, _ := os.ReadFile(table)
		n += established(string(b), sockets)
	}
	return n
}

// established counts the rows of a /proc/net/tcp table in state
// ESTABLISHED (01) whose inode is one of sockets.
func established(table string, sockets map[string]bool) int {
	n := 0
	for line := range strings.Lines(table) {
		// sl local rem st tx:rx tr:when retrnsmt uid timeout inode ...
		if f := strings.Fields(line); len(f) > 9 && f[3] == "01" && sockets[f[9]] {
			n++
		}
	}
	return n
}

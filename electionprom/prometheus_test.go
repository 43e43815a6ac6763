package electionprom_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/sqlelect/election"
	"github.com/sqlelect/election/electionprom"
	"github.com/sqlelect/election/internal/mysqltest"
	"github.com/sqlelect/election/internal/proctest"
)

// The rules of monitoring/ in a real Prometheus (Debian's), scraping real
// candidate processes while their leaders are killed, stopped, stuck on a
// row lock and demoted, health checks fail, a candidate cannot reach its
// server, another's Run returns, and two deployments share a name: each
// alert becomes pending or firing for the election it names, and no other
// alert fires. The for: of 5 minutes are waited out only by promtool's
// unit tests.
func TestAlertsOfARealPrometheus(t *testing.T) {
	bin, err := exec.LookPath("prometheus")
	if err != nil {
		t.Skip("prometheus not found: install Debian's prometheus package (scripts/test.sh does)")
	}
	t.Parallel()
	a, hung, twin, slowed := server.NewDatabase(t), server.NewDatabase(t), server.NewDatabase(t), server.NewDatabase(t)
	sick := t.TempDir()
	c := newCluster(t)
	// Started first, so that their for: of a minute ends with the rest.
	c.start("sick-1", "sick", server.DSN(a), "fast", filepath.Join(sick, "1"))
	c.start("denied", "denied", server.DSN("no_such_database"), "fast", "")
	c.start("unreachable", "unreachable", "root@tcp(127.0.0.1:1)/x?timeout=1s", "fast", "")
	for _, id := range []string{"main-1", "main-2"} {
		c.start(id, "main", server.DSN(a), "fast", "")
	}
	c.start("slow-1", "slow", server.DSN(a), "slow", "")
	c.start("slow-2", "slow", server.DSN(a), "slow", "")
	c.start("hang-1", "hang", server.DSN(hung), "fast", "")
	c.start("hang-2", "hang", server.DSN(hung), "fast", "")
	c.start("twin-1", "twin", server.DSN(a), "fast", "")
	c.start("twin-2", "twin", server.DSN(twin), "fast", "") // the same name on another database
	c.start("keepalive-1", "keepalive", server.DSN(slowed), "default", "")
	prom := startPrometheus(t, bin, c.targets())
	prom.await(t, "every candidate scraped", time.Minute, func() bool {
		return prom.query(t, `count(up == 1)`) == float64(len(c.procs))
	})

	leaders := map[string]string{}
	for _, name := range []string{"sick", "main", "slow", "hang", "keepalive"} {
		leaders[name] = c.events.Next(startOf(name), 30*time.Second).ID
	}
	c.events.Next(proctest.IsFrom("start", "twin-1"), 30*time.Second)
	c.events.Next(proctest.IsFrom("start", "twin-2"), 30*time.Second)
	c.events.Next(proctest.IsFrom("returned", "denied"), 30*time.Second)

	// sick's candidate fails its health checks: no leader.
	if err := os.WriteFile(filepath.Join(sick, "1"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	c.events.Next(proctest.IsFrom("end", leaders["sick"]), 30*time.Second)

	// Leadership of main flaps: its leader is killed 8 times, each once
	// Prometheus has scraped it leading; the process is started again, and
	// scraped before the next kill (a process that leads before its first
	// scrape shows no term started: its counter is first seen at 1).
	for range 8 {
		id := leaders["main"]
		scraped := func(what, q string) {
			prom.await(t, id+" "+what, 30*time.Second, func() bool { return prom.query(t, fmt.Sprintf(q, c.procs[id].addr)) == 1 })
		}
		scraped("scraped leading", `election_is_leader{instance=%q}`)
		c.kill(id)
		leaders["main"] = c.events.Next(startOf("main"), 30*time.Second).ID
		c.start(id, "main", server.DSN(a), "fast", "")
		scraped("scraped again", `election_transitions_total{instance=%q,event="started"} == bool 0`)
	}

	// slow's leader is stopped: the failover takes its lease and margin
	// (9 s), past the default timing's bound.
	c.signal(leaders["slow"], syscall.SIGSTOP)
	c.events.Next(startOf("slow"), 30*time.Second)
	c.signal(leaders["slow"], syscall.SIGCONT)

	// hang's leader is stuck behind another client's lock on the record
	// row: the other candidate kills its session.
	release := mysqltest.HoldRows(t, server.Open(t, hung), "election_record")
	c.events.Next(func(e proctest.Event) bool { return e.Ev == "killed" && strings.HasPrefix(e.ID, "hang-") }, 30*time.Second)
	release()
	c.events.Next(startOf("hang"), 30*time.Second)

	// keepalive's leader waits 1.5 s on the same lock, three times: slow,
	// within its lease of 5 s.
	other := server.Open(t, slowed)
	for range 3 {
		release := mysqltest.HoldRows(t, other, "election_record")
		time.Sleep(1500 * time.Millisecond)
		release()
		time.Sleep(time.Second)
	}

	// main's leader is demoted: it steps down, and nothing fires for it.
	ops, err := election.NewOperator(server.Open(t, a), "main", election.Config{})
	if err != nil {
		t.Fatal(err)
	}
	if killed, err := ops.Demote(ctxFor(t, 30*time.Second)); err != nil || killed {
		t.Fatalf("Demote: killed %v, %v; want a leader that steps down", killed, err)
	}
	c.events.Next(startOf("main"), 30*time.Second)

	want := map[string]string{
		alert("ElectionNoLeader", "sick", ""):                                         "firing",
		alert("ElectionCandidateUnhealthy", "sick", c.procs["sick-1"].addr):           "pending",
		alert("ElectionCandidateStopped", "denied", c.procs["denied"].addr):           "firing",
		alert("ElectionNoLeader", "unreachable", ""):                                  "firing",
		alert("ElectionCampaignsFailing", "unreachable", c.procs["unreachable"].addr): "firing",
		alert("ElectionLeadershipFlapping", "main", ""):                               "firing",
		alert("ElectionFailoverSlow", "slow", ""):                                     "firing",
		alert("ElectionLeaderKilled", "hang", "", "hang-killed"):                      "firing",
		alert("ElectionTwoLeaders", "twin", ""):                                       "firing",
		alert("ElectionKeepaliveSlow", "keepalive", ""):                               "pending",
	}
	prom.await(t, "the alerts expected", 2*time.Minute, func() bool {
		seen := prom.seen()
		for k, state := range want {
			if seen[k] != state && !(state == "pending" && seen[k] == "firing") {
				return false
			}
		}
		return true
	})
	// No other alert fired (one expected pending may fire: the test may
	// outlast its for:), nor was pending but ElectionNoLeader and
	// ElectionTwoLeaders: the scrapes of a start or a failover see no
	// leader, or two, for a moment, which their for: waits out.
	var fired, pending []string
	for k, state := range prom.seen() {
		name, _, _ := strings.Cut(k, " ")
		switch {
		case state == "firing" && want[k] == "":
			fired = append(fired, k)
		case want[k] == "" && name != "ElectionNoLeader" && name != "ElectionTwoLeaders":
			pending = append(pending, k)
		}
	}
	if len(fired) > 0 || len(pending) > 0 {
		t.Errorf("fired, and should not have: %v; pending, and should not have been: %v", fired, pending)
	}
	if t.Failed() {
		t.Logf("alerts seen: %v", prom.seen())
	}
}

// startOf matches a term's start in election name.
func startOf(name string) func(proctest.Event) bool {
	return func(e proctest.Event) bool { return e.Ev == "start" && strings.HasPrefix(e.ID, name+"-") }
}

// alert names an alert by its name and labels, as promServer.poll does.
func alert(name, election, instance string, reason ...string) string {
	k := name + " election=" + election
	if instance != "" {
		k += " instance=" + instance
	}
	for _, r := range reason {
		k += " reason=" + r
	}
	return k
}

// cluster is the candidate processes, each serving its metrics on an
// address of its own, kept when the process is started again.
type cluster struct {
	t      *testing.T
	events *proctest.Stream
	procs  map[string]*proc
}

type proc struct {
	addr string
	cmd  *exec.Cmd
	read <-chan struct{}
}

func newCluster(t *testing.T) *cluster {
	c := &cluster{t: t, events: proctest.NewStream(t), procs: map[string]*proc{}}
	t.Cleanup(func() {
		for id, p := range c.procs {
			if p.cmd != nil {
				c.kill(id)
			}
		}
	})
	return c
}

// start runs candidate id of election name on dsn, with a timing ("fast":
// Interval 100 ms, Lease 1 s; "slow": 1 s, 8 s; "default": 1 s, 5 s; Margin
// 1 s), and a health check that fails while the file unhealthyIf exists.
func (c *cluster) start(id, name, dsn, timing, unhealthyIf string) {
	c.t.Helper()
	p := c.procs[id]
	if p == nil {
		port, err := mysqltest.FreePort()
		if err != nil {
			c.t.Fatal(err)
		}
		p = &proc{addr: fmt.Sprintf("127.0.0.1:%d", port)}
		c.procs[id] = p
	}
	p.cmd, p.read = c.events.Start("ELECTIONPROM_CHILD="+id, "ELECTIONPROM_CHILD_NAME="+name, "ELECTIONPROM_CHILD_DSN="+dsn,
		"ELECTIONPROM_CHILD_TIMING="+timing, "ELECTIONPROM_CHILD_UNHEALTHY_IF="+unhealthyIf, "ELECTIONPROM_CHILD_ADDR="+p.addr)
	c.events.Next(proctest.IsFrom("serving", id), 30*time.Second)
}

func (c *cluster) signal(id string, sig syscall.Signal) {
	c.t.Helper()
	if err := c.procs[id].cmd.Process.Signal(sig); err != nil {
		c.t.Fatal(err)
	}
}

// kill SIGKILLs process id and waits for it.
func (c *cluster) kill(id string) {
	p := c.procs[id]
	p.cmd.Process.Signal(syscall.SIGCONT)
	p.cmd.Process.Kill()
	<-p.read
	p.cmd.Wait()
	p.cmd = nil
}

func (c *cluster) targets() []string {
	var addrs []string
	for _, p := range c.procs {
		addrs = append(addrs, p.addr)
	}
	return addrs
}

// childMain is a candidate process: it serves its metrics at
// $ELECTIONPROM_CHILD_ADDR, runs the election until SIGTERM, and prints
// its events (proctest.Event) on stdout: serving, start and end of a term,
// killed (a stuck leader's session), returned (Run, with its error).
func childMain() int {
	id := os.Getenv("ELECTIONPROM_CHILD")
	emit := proctest.Emitter(os.Stdout)
	fail := func(err error) int {
		emit(proctest.Event{Ev: "error", ID: id, Reason: err.Error()})
		return 1
	}
	reg := prometheus.NewRegistry()
	m, err := electionprom.New(reg)
	if err != nil {
		return fail(err)
	}
	ln, err := net.Listen("tcp", os.Getenv("ELECTIONPROM_CHILD_ADDR"))
	if err != nil {
		return fail(err)
	}
	go http.Serve(ln, promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	db, err := sql.Open("mysql", os.Getenv("ELECTIONPROM_CHILD_DSN"))
	if err != nil {
		return fail(err)
	}
	defer db.Close()
	cfg := election.Config{Identity: id, Interval: 100 * time.Millisecond, Lease: time.Second, Margin: time.Second}
	switch os.Getenv("ELECTIONPROM_CHILD_TIMING") {
	case "slow":
		cfg.Interval, cfg.Lease = time.Second, 8*time.Second
	case "default":
		cfg.Interval, cfg.Lease = time.Second, 5*time.Second
	}
	cfg.Observer = m.Observer()
	killed := cfg.Observer.Killed
	cfg.Observer.Killed = func(name, reason string, err error) {
		killed(name, reason, err)
		emit(proctest.Event{Ev: "killed", ID: id, Reason: reason, OK: err == nil})
	}
	if f := os.Getenv("ELECTIONPROM_CHILD_UNHEALTHY_IF"); f != "" {
		cfg.Health = func(context.Context) error {
			if _, err := os.Stat(f); err == nil {
				return fmt.Errorf("%s exists", f)
			}
			return nil
		}
	}
	e, err := election.New(db, os.Getenv("ELECTIONPROM_CHILD_NAME"), cfg)
	if err != nil {
		return fail(err)
	}
	emit(proctest.Event{Ev: "serving", ID: id})
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	err = e.Run(ctx, func(ctx context.Context, term *election.Term) error {
		emit(proctest.Event{Ev: "start", ID: id, Token: term.Token()})
		<-ctx.Done()
		emit(proctest.Event{Ev: "end", ID: id, Token: term.Token(), Reason: fmt.Sprint(context.Cause(ctx))})
		return nil
	})
	emit(proctest.Event{Ev: "returned", ID: id, Reason: fmt.Sprint(err)})
	<-ctx.Done() // a process whose Run returned goes on serving its metrics
	return 0
}

// promServer is a Prometheus process with the rules of monitoring/, and
// what its alerts API has shown: every alert's highest state so far.
type promServer struct {
	url    string
	client *http.Client

	mu     sync.Mutex
	states map[string]string
}

// startPrometheus runs bin scraping targets every second, evaluating the
// rules every second, and polls its alerts until the test ends.
func startPrometheus(t *testing.T, bin string, targets []string) *promServer {
	t.Helper()
	dir := t.TempDir()
	port, err := mysqltest.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	quoted, _ := json.Marshal(targets) // a JSON list is a YAML one
	config := fmt.Sprintf(`global:
  scrape_interval: 1s
  scrape_timeout: 500ms
  evaluation_interval: 1s
rule_files: [%q]
scrape_configs:
  - job_name: candidates
    static_configs:
      - targets: %s
`, filepath.Join(monitoring, "election-rules.yml"), quoted)
	if err := os.WriteFile(filepath.Join(dir, "prometheus.yml"), []byte(config), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "--config.file="+filepath.Join(dir, "prometheus.yml"), "--storage.tsdb.path="+filepath.Join(dir, "data"),
		fmt.Sprintf("--web.listen-address=127.0.0.1:%d", port), "--log.level=warn")
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &promServer{url: fmt.Sprintf("http://127.0.0.1:%d", port), client: &http.Client{Timeout: 5 * time.Second}, states: map[string]string{}}
	ctx, cancel := context.WithCancel(context.Background())
	var polling sync.WaitGroup
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
		cancel()
		polling.Wait()
	})
	p.await(t, "Prometheus ready", time.Minute, func() bool {
		resp, err := p.client.Get(p.url + "/-/ready")
		if err == nil {
			resp.Body.Close()
		}
		return err == nil && resp.StatusCode == http.StatusOK
	})
	polling.Go(func() {
		for ctx.Err() == nil {
			p.poll()
			select {
			case <-ctx.Done():
			case <-time.After(200 * time.Millisecond):
			}
		}
	})
	return p
}

// errAPI is an answer of the API that is an error (a query it refused).
var errAPI = errors.New("the API answered an error")

// get decodes the data of an API answer at path into v.
func (p *promServer) get(path string, v any) error {
	resp, err := p.client.Get(p.url + path)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	var answer struct {
		Status string
		Data   json.RawMessage
		Error  string
	}
	if err := json.NewDecoder(resp.Body).Decode(&answer); err != nil {
		return err
	}
	if answer.Status != "success" {
		return fmt.Errorf("%w: GET %s: %s", errAPI, path, answer.Error)
	}
	return json.Unmarshal(answer.Data, v)
}

// poll records the state of every alert the API shows now.
func (p *promServer) poll() {
	var data struct {
		Alerts []struct {
			Labels map[string]string
			State  string
		}
	}
	if p.get("/api/v1/alerts", &data) != nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, a := range data.Alerts {
		k := alert(a.Labels["alertname"], a.Labels["election"], a.Labels["instance"])
		if r, ok := a.Labels["reason"]; ok {
			k += " reason=" + r
		}
		if p.states[k] != "firing" {
			p.states[k] = a.State
		}
	}
}

// seen returns every alert the API has shown, with its highest state.
func (p *promServer) seen() map[string]string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return maps.Clone(p.states)
}

// query returns the value of an instant query that has one result, or -1;
// it fails the test on a query the API refuses.
func (p *promServer) query(t *testing.T, q string) float64 {
	t.Helper()
	var data struct {
		Result []struct{ Value [2]any }
	}
	err := p.get("/api/v1/query?query="+url.QueryEscape(q), &data)
	if errors.Is(err, errAPI) {
		t.Fatal(err)
	}
	if err != nil || len(data.Result) != 1 {
		return -1
	}
	var v float64
	fmt.Sscan(fmt.Sprint(data.Result[0].Value[1]), &v)
	return v
}

func (p *promServer) await(t *testing.T, what string, limit time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("not within %v: %s; alerts seen: %v", limit, what, p.seen())
		}
		time.Sleep(200 * time.Millisecond)
	}
}

package galeratest

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/sqlelect/election/internal/mysqltest"
)

// checkUser is the account HAProxy's health check logs in as: no password,
// no privileges.
const checkUser = "haproxy_check"

// haproxyConfig is the proxy's configuration, the usual production shape
// for Galera: TCP mode, so clients speak the MySQL protocol to the node
// itself, and one writer at a time.
//
//   - balance first: every new connection goes to the first node that is up
//     (n1, then n2, then n3), so all clients write through one node and no
//     two nodes certify conflicting writes; the next takes over when it is
//     marked down. (leastconn would spread the sessions over the nodes.)
//   - option mysql-check: the check opens a MySQL session (it waits for the
//     server's greeting, logs in as checkUser and quits cleanly, so the
//     server counts no aborted connection against the proxy's host). A bare
//     TCP check would keep a paused (SIGSTOPped) node in: the kernel still
//     completes its TCP handshakes. A greeting proves the process runs, not
//     that the node is Synced in the primary component: a node that is
//     joining, a donor or out of the primary component passes, and clients
//     it gets see errors until it is Synced (production puts an HTTP check
//     of wsrep_local_state, clustercheck, on a port of its own for that).
//   - inter 500ms, timeout check 1s, fall 2: a dead node (connection
//     refused) is out within about 1 s, a paused one (no greeting within 1 s)
//     within about 2.5 s, both before Galera itself evicts it (5 s, and until
//     then commits on every node wait). rise 2: back after two good checks.
//   - on-marked-down shutdown-sessions: the sessions of a node marked down
//     are closed, so clients of a paused node fail and reconnect to the next
//     one instead of waiting on it.
//   - timeout client/server 1h: idle pooled sessions are not cut by the
//     proxy; the server's own wait_timeout applies.
const haproxyConfig = `global
	maxconn 4000

defaults
	mode tcp
	timeout connect 1s
	timeout client 1h
	timeout server 1h
	timeout check 1s

listen galera
	bind 127.0.0.1:{{port}}
	balance first
	option mysql-check user ` + checkUser + ` post-41
	default-server inter 500ms fastinter 250ms downinter 500ms fall 2 rise 2 on-marked-down shutdown-sessions
{{servers}}`

// HAProxy is an haproxy process the harness owns.
type HAProxy struct {
	cmd    *exec.Cmd
	exited chan struct{}
	log    string
	server *mysqltest.Server
}

// startHAProxy starts haproxy on a free port in front of the nodes at
// addrs (named n1, n2, ... in that order) and waits until a session
// through it answers.
func startHAProxy(ctx context.Context, dir string, addrs []string) (*HAProxy, error) {
	port, err := mysqltest.FreePort()
	if err != nil {
		return nil, err
	}
	var servers strings.Builder
	for i, addr := range addrs {
		fmt.Fprintf(&servers, "\tserver n%d %s check\n", i+1, addr)
	}
	cfg := strings.NewReplacer("{{port}}", strconv.Itoa(port), "{{servers}}", servers.String()).Replace(haproxyConfig)
	cfgPath := filepath.Join(dir, "haproxy.cfg")
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o644); err != nil {
		return nil, err
	}
	p := &HAProxy{log: filepath.Join(dir, "haproxy.log"), exited: make(chan struct{})}
	out, err := os.Create(p.log)
	if err != nil {
		return nil, err
	}
	defer out.Close()
	// -db: in the foreground, its alerts (a server going down or up) on stderr.
	p.cmd = exec.Command(haproxy, "-db", "-f", cfgPath)
	p.cmd.Stdout, p.cmd.Stderr = out, out
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := p.cmd.Start(); err != nil {
		return nil, fmt.Errorf("galeratest: starting haproxy: %w", err)
	}
	go func() { p.cmd.Wait(); close(p.exited) }()
	dsn := "root@tcp(" + net.JoinHostPort("127.0.0.1", strconv.Itoa(port)) + ")/"
	if p.server, err = mysqltest.Dial(ctx, dsn); err != nil {
		p.close()
		return nil, fmt.Errorf("galeratest: haproxy: %w\n%s", err, p.Log())
	}
	return p, nil
}

// Log returns what haproxy printed: its alerts, such as servers marked
// down or up.
func (p *HAProxy) Log() string {
	b, _ := os.ReadFile(p.log)
	return string(b)
}

func (p *HAProxy) close() {
	p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.exited:
	case <-time.After(10 * time.Second):
		p.cmd.Process.Kill()
		<-p.exited
	}
}

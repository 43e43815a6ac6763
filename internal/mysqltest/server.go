// Package mysqltest gives tests, examples and benchmarks a real MySQL or
// MariaDB server: the one named by $ELECTION_TEST_DSN, else a private
// throwaway mariadbd/mysqld found on PATH, else a container when a Docker
// engine answers. It never mocks the server.
package mysqltest

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/go-sql-driver/mysql"
)

// EnvDSN names the environment variable that points the harness at an
// existing server. Its user needs to create and drop databases.
const EnvDSN = "ELECTION_TEST_DSN"

// Server is a MySQL-compatible server the harness uses.
type Server struct {
	dsn *mysql.Config // root DSN, no database

	// Set only for a private server, which the harness may stop and restart.
	bin, datadir string
	tmpdir       string // its own: a starting server deletes every #sql* file in its tmpdir
	port         int
	mu           sync.Mutex
	cmd          *exec.Cmd
	exited       chan struct{}
	stop         func() // extra clean-up (a container)
}

// Private reports whether the harness owns the server process, so that
// tests may kill and restart it.
func (s *Server) Private() bool { return s.bin != "" }

// Describe says which server this is, for logs.
func (s *Server) Describe() string {
	if s.Private() {
		return fmt.Sprintf("private %s on 127.0.0.1:%d (datadir %s)", filepath.Base(s.bin), s.port, s.datadir)
	}
	return "server at " + s.dsn.Addr
}

// Addr is the server's host:port.
func (s *Server) Addr() string { return s.dsn.Addr }

// DSN returns a DSN for the database db (empty: none), as root.
func (s *Server) DSN(db string) string {
	c := s.dsn.Clone()
	c.DBName = db
	return c.FormatDSN()
}

// Config returns the driver configuration for database db, as root.
func (s *Server) Config(db string) *mysql.Config {
	c := s.dsn.Clone()
	c.DBName = db
	return c
}

// Start returns the server the environment gives, in the order the package
// doc states, or an error that says how to get one.
func Start(ctx context.Context) (*Server, error) {
	if dsn := os.Getenv(EnvDSN); dsn != "" {
		cfg, err := mysql.ParseDSN(dsn)
		if err != nil {
			return nil, fmt.Errorf("mysqltest: $%s is not a valid DSN: %w", EnvDSN, err)
		}
		cfg.DBName = ""
		s := &Server{dsn: cfg}
		return s, s.wait(ctx, 10*time.Second)
	}
	if bin := PrivateBinary(); bin != "" {
		return StartPrivate(ctx, bin)
	}
	if s, err := startContainer(ctx); s != nil || err != nil {
		return s, err
	}
	return nil, errors.New("mysqltest: no MySQL/MariaDB server for the tests: " +
		"set " + EnvDSN + "=user:pass@tcp(host:3306)/ to use one you have, " +
		"or install MariaDB (scripts/test.sh does: apt-get install mariadb-server) so that mariadbd is found, " +
		"or start a Docker engine")
}

// PrivateBinary returns the mariadbd or mysqld binary the harness would run
// as a private server, or "" if there is none.
func PrivateBinary() string {
	for _, name := range []string{"mariadbd", "mysqld"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
		for _, dir := range []string{"/usr/sbin", "/usr/local/sbin", "/usr/local/mysql/bin"} {
			p := filepath.Join(dir, name)
			if st, err := os.Stat(p); err == nil && !st.IsDir() {
				return p
			}
		}
	}
	return ""
}

// StartPrivate initializes a fresh datadir and starts the server binary bin
// on a free loopback port.
func StartPrivate(ctx context.Context, bin string) (*Server, error) {
	dir, err := os.MkdirTemp("", "election-mysqld-")
	if err != nil {
		return nil, err
	}
	s := &Server{bin: bin, datadir: filepath.Join(dir, "data"), tmpdir: filepath.Join(dir, "tmp")}
	if err := os.Mkdir(s.tmpdir, 0o700); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	if err := s.initialize(ctx); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	if s.port, err = freePort(); err != nil {
		return nil, err
	}
	s.dsn = mysql.NewConfig()
	s.dsn.User = "root"
	s.dsn.Net = "tcp"
	s.dsn.Addr = net.JoinHostPort("127.0.0.1", strconv.Itoa(s.port))
	s.stop = func() { os.RemoveAll(dir) }
	if err := s.Boot(ctx); err != nil {
		s.Close()
		return nil, err
	}
	return s, nil
}

func (s *Server) isMariaDB() bool {
	out, _ := exec.Command(s.bin, "--version").CombinedOutput()
	return strings.Contains(string(out), "MariaDB") || strings.HasSuffix(s.bin, "mariadbd")
}

func (s *Server) initialize(ctx context.Context) error {
	var cmd *exec.Cmd
	if s.isMariaDB() {
		install := ""
		for _, name := range []string{"mariadb-install-db", "mysql_install_db"} {
			if p, err := exec.LookPath(name); err == nil {
				install = p
				break
			}
		}
		if install == "" {
			return fmt.Errorf("mysqltest: found %s but not mariadb-install-db to initialize a datadir: install the mariadb-server package", s.bin)
		}
		cmd = exec.CommandContext(ctx, install, "--no-defaults", "--datadir="+s.datadir, "--tmpdir="+s.tmpdir,
			"--auth-root-authentication-method=normal", "--skip-test-db", "--user="+currentUser())
	} else {
		cmd = exec.CommandContext(ctx, s.bin, "--no-defaults", "--initialize-insecure",
			"--datadir="+s.datadir, "--tmpdir="+s.tmpdir, "--user="+currentUser())
	}
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("mysqltest: initializing a datadir with %s: %w\n%s", cmd.Path, err, out)
	}
	return nil
}

func currentUser() string {
	if u := os.Getenv("USER"); u != "" {
		return u
	}
	if os.Getuid() == 0 {
		return "root"
	}
	return strconv.Itoa(os.Getuid())
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// Boot starts the private server process on its datadir and port and waits
// until it answers.
func (s *Server) Boot(ctx context.Context) error {
	if !s.Private() {
		return errors.New("mysqltest: cannot start a server the harness does not own")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd != nil {
		return errors.New("mysqltest: server already running")
	}
	cmd := exec.Command(s.bin, "--no-defaults",
		"--datadir="+s.datadir,
		"--tmpdir="+s.tmpdir,
		"--port="+strconv.Itoa(s.port),
		"--bind-address=127.0.0.1",
		"--socket="+filepath.Join(s.datadir, "mysqld.sock"),
		"--pid-file="+filepath.Join(s.datadir, "mysqld.pid"),
		"--log-error="+filepath.Join(s.datadir, "error.log"),
		"--user="+currentUser(),
		"--skip-name-resolve",
		"--max-connections=3000",
		"--innodb-buffer-pool-size=64M",
		"--innodb-flush-log-at-trx-commit=2",
	)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("mysqltest: starting %s: %w", s.bin, err)
	}
	s.cmd = cmd
	s.exited = make(chan struct{})
	exited := s.exited
	go func() { cmd.Wait(); close(exited) }()
	if err := s.wait(ctx, 60*time.Second); err != nil {
		log, _ := os.ReadFile(filepath.Join(s.datadir, "error.log"))
		return fmt.Errorf("%w\nserver log:\n%s", err, tail(string(log), 2000))
	}
	return nil
}

func tail(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}

func (s *Server) wait(ctx context.Context, limit time.Duration) error {
	db, err := sql.Open("mysql", s.DSN(""))
	if err != nil {
		return err
	}
	defer db.Close()
	deadline := time.Now().Add(limit)
	for {
		pctx, cancel := context.WithTimeout(ctx, time.Second)
		err = db.PingContext(pctx)
		cancel()
		if err == nil {
			return nil
		}
		if ctx.Err() != nil || time.Now().After(deadline) {
			return fmt.Errorf("mysqltest: %s does not answer: %w", s.Describe(), err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Kill ends the private server with SIGKILL and waits until it is gone.
func (s *Server) Kill() error { return s.halt(syscall.SIGKILL) }

// Shutdown stops the private server cleanly and waits until it is gone.
func (s *Server) Shutdown() error { return s.halt(syscall.SIGTERM) }

func (s *Server) halt(sig syscall.Signal) error {
	if !s.Private() {
		return errors.New("mysqltest: cannot stop a server the harness does not own")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil {
		return nil
	}
	s.cmd.Process.Signal(sig)
	select {
	case <-s.exited:
	case <-time.After(60 * time.Second):
		s.cmd.Process.Kill()
		<-s.exited
	}
	s.cmd = nil
	return nil
}

// Close stops a private server and removes its files.
func (s *Server) Close() {
	if s.Private() {
		s.Shutdown()
	}
	if s.stop != nil {
		s.stop()
	}
}

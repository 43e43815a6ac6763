// Package mysqltest gives tests, examples and benchmarks a real MySQL or
// MariaDB server: a private tidb-server when $ELECTION_TEST_SERVER is
// "tidb" (StartTiDB); else the one named by $ELECTION_TEST_DSN, else a
// private throwaway mariadbd/mysqld found on PATH, else a container when a
// Docker engine answers (started by the helper module in ./docker, through
// testcontainers, with `go run`; $ELECTION_TEST_IMAGE, say mysql:8.4, picks
// the image and skips the search of PATH). It never mocks the server.
package mysqltest

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
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
	dir          string // holds datadir, tmpdir, the socket, the pid file and the error log
	port         int
	tidb         bool       // a tidb-server (StartTiDB), not mariadbd or mysqld
	runAs        *user.User // the OS user the server runs as; nil: this process's
	options      []string   // server options after the harness's own
	env          []string   // added to the server's environment (StartSteppable)
	clockFile    string     // libfaketime's offset file, if its clock can be stepped
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
	if os.Getenv(EnvServer) == "tidb" {
		return StartTiDB(ctx)
	}
	if dsn := os.Getenv(EnvDSN); dsn != "" {
		s, err := Dial(ctx, dsn)
		if err != nil {
			return nil, fmt.Errorf("mysqltest: $%s: %w", EnvDSN, err)
		}
		return s, nil
	}
	if bin := PrivateBinary(); bin != "" && os.Getenv(EnvImage) == "" {
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

// Dial returns the server at dsn, which the harness does not own (a proxy,
// a server started by someone else), once it answers. The DSN's database
// is ignored: each test makes its own (NewDatabase).
func Dial(ctx context.Context, dsn string) (*Server, error) {
	cfg, err := mysql.ParseDSN(dsn)
	if err != nil {
		return nil, fmt.Errorf("mysqltest: not a valid DSN: %w", err)
	}
	cfg.DBName = ""
	s := &Server{dsn: cfg}
	return s, s.wait(ctx, 10*time.Second)
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
// (mariadbd or mysqld) on a free loopback port.
func StartPrivate(ctx context.Context, bin string) (*Server, error) {
	return startPrivate(ctx, bin, false)
}

// startPrivate is StartPrivate, of a tidb-server if tidb is set.
func startPrivate(ctx context.Context, bin string, tidb bool) (*Server, error) {
	dir, err := os.MkdirTemp("", "election-mysqld-")
	if err != nil {
		return nil, err
	}
	port, err := FreePort()
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	s, err := NewPrivate(bin, dir, port, "")
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	s.tidb = tidb
	s.stop = func() { os.RemoveAll(dir) }
	if err := s.Initialize(ctx); err != nil {
		s.Close()
		return nil, err
	}
	if err := s.Boot(ctx); err != nil {
		s.Close()
		return nil, err
	}
	return s, nil
}

// NewPrivate returns a private server that runs bin on 127.0.0.1:port with
// its files under dir (which must exist), as the OS user runAs ("": as this
// process), with options after the harness's own (later ones win). It
// creates dir/data and dir/tmp for runAs, and neither initializes the
// datadir (Initialize) nor starts the server (Boot). Close stops it and
// leaves dir to its owner.
func NewPrivate(bin, dir string, port int, runAs string, options ...string) (*Server, error) {
	s := &Server{bin: bin, dir: dir, datadir: filepath.Join(dir, "data"), tmpdir: filepath.Join(dir, "tmp"),
		port: port, options: options}
	if runAs != "" {
		u, err := user.Lookup(runAs)
		if err != nil {
			return nil, fmt.Errorf("mysqltest: the server's user: %w", err)
		}
		s.runAs = u
	}
	for _, d := range []string{dir, s.datadir, s.tmpdir} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return nil, err
		}
		if err := s.own(d); err != nil {
			return nil, err
		}
	}
	s.dsn = mysql.NewConfig()
	s.dsn.User = "root"
	s.dsn.Net = "tcp"
	s.dsn.Addr = net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	return s, nil
}

// own gives path to the server's user.
func (s *Server) own(path string) error {
	if s.runAs == nil {
		return nil
	}
	uid, _ := strconv.Atoi(s.runAs.Uid)
	gid, _ := strconv.Atoi(s.runAs.Gid)
	return os.Chown(path, uid, gid)
}

// osUser is the name of the OS user the server runs as.
func (s *Server) osUser() string {
	if s.runAs != nil {
		return s.runAs.Username
	}
	return currentUser()
}

func (s *Server) isMariaDB() bool {
	out, _ := exec.Command(s.bin, "--version").CombinedOutput()
	return strings.Contains(string(out), "MariaDB") || strings.HasSuffix(s.bin, "mariadbd")
}

// Initialize creates the private server's system tables in its empty
// datadir, with a root user that needs no password. A tidb-server makes
// its own at its first start.
func (s *Server) Initialize(ctx context.Context) error {
	if s.tidb {
		return nil
	}
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
			"--auth-root-authentication-method=normal", "--skip-test-db", "--user="+s.osUser())
	} else {
		cmd = exec.CommandContext(ctx, s.bin, "--no-defaults", "--initialize-insecure",
			"--datadir="+s.datadir, "--tmpdir="+s.tmpdir, "--user="+s.osUser())
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

// FreePort returns a TCP port that is free on 127.0.0.1 now.
func FreePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// Boot starts the private server process on its datadir and port, with
// once added to its options for this start only, and waits until it
// answers.
func (s *Server) Boot(ctx context.Context, once ...string) error {
	if !s.Private() {
		return errors.New("mysqltest: cannot start a server the harness does not own")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd != nil {
		return errors.New("mysqltest: server already running")
	}
	cmd := s.command(once...)
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("mysqltest: starting %s: %w", s.bin, err)
	}
	s.cmd = cmd
	s.exited = make(chan struct{})
	exited := s.exited
	go func() { cmd.Wait(); close(exited) }()
	if err := s.wait(ctx, 60*time.Second); err != nil {
		return fmt.Errorf("%w\nserver log:\n%s", err, s.LogTail(2000))
	}
	return nil
}

// command is the private server's command line, with extra options last.
func (s *Server) command(extra ...string) *exec.Cmd {
	if s.tidb {
		return s.withProcAttr(s.tidbCommand(extra...))
	}
	args := []string{"--no-defaults",
		"--datadir=" + s.datadir,
		"--tmpdir=" + s.tmpdir,
		"--port=" + strconv.Itoa(s.port),
		"--bind-address=127.0.0.1",
		"--socket=" + filepath.Join(s.dir, "mysqld.sock"),
		"--pid-file=" + filepath.Join(s.dir, "mysqld.pid"),
		"--log-error=" + s.errorLog(),
		"--user=" + s.osUser(),
		"--skip-name-resolve",
		"--max-connections=3000",
		"--innodb-buffer-pool-size=64M",
		"--innodb-flush-log-at-trx-commit=2",
	}
	cmd := exec.Command(s.bin, append(append(args, s.options...), extra...)...)
	if len(s.env) > 0 {
		cmd.Env = append(os.Environ(), s.env...)
	}
	return s.withProcAttr(cmd)
}

// withProcAttr makes cmd a process group of its own that dies with this
// process, run as the server's user.
func (s *Server) withProcAttr(cmd *exec.Cmd) *exec.Cmd {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if s.runAs != nil {
		// Started as that user rather than dropping to it (--user as root):
		// a change of user would clear the parent-death signal.
		uid, _ := strconv.Atoi(s.runAs.Uid)
		gid, _ := strconv.Atoi(s.runAs.Gid)
		cmd.SysProcAttr.Credential = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
	}
	return cmd
}

// RunOnce runs the private server's binary, while the server is stopped,
// with its options and extra (such as --wsrep-recover), until it exits, and
// returns what it wrote to its error log in that run.
func (s *Server) RunOnce(ctx context.Context, extra ...string) (string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd != nil {
		return "", errors.New("mysqltest: the server is running")
	}
	log := filepath.Join(s.dir, "once.log")
	os.Remove(log)
	cmd := s.command(append(extra, "--log-error="+log)...)
	done := make(chan error, 1)
	if err := cmd.Start(); err != nil {
		return "", err
	}
	go func() { done <- cmd.Wait() }()
	var err error
	select {
	case err = <-done:
	case <-ctx.Done():
		cmd.Process.Kill()
		<-done
		err = ctx.Err()
	}
	out, _ := os.ReadFile(log)
	if err != nil {
		return string(out), fmt.Errorf("mysqltest: %s %q: %w\n%s", s.bin, extra, err, tail(string(out), 2000))
	}
	return string(out), nil
}

func (s *Server) errorLog() string { return filepath.Join(s.dir, "error.log") }

// LogTail returns the last n bytes of the private server's error log.
func (s *Server) LogTail(n int) string {
	log, _ := os.ReadFile(s.errorLog())
	return tail(string(log), n)
}

// PID returns the private server's process id, 0 while the harness has not
// started it or has stopped it.
func (s *Server) PID() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil {
		return 0
	}
	return s.cmd.Process.Pid
}

// Exited reports whether the private server's process has ended without
// the harness stopping it (it crashed, or failed to start).
func (s *Server) Exited() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil {
		return false
	}
	select {
	case <-s.exited:
		return true
	default:
		return false
	}
}

// Pause stops the private server's process (SIGSTOP): it keeps its
// sockets, and the kernel still accepts connections for it, but it answers
// nothing until Resume.
func (s *Server) Pause() error { return s.signal(syscall.SIGSTOP) }

// Resume continues a paused private server (SIGCONT).
func (s *Server) Resume() error { return s.signal(syscall.SIGCONT) }

func (s *Server) signal(sig syscall.Signal) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil {
		return errors.New("mysqltest: the server is not running")
	}
	return s.cmd.Process.Signal(sig)
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
	s.cmd.Process.Signal(syscall.SIGCONT) // a paused server acts on SIGTERM only once continued
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

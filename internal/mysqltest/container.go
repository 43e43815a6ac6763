package mysqltest

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"time"

	"github.com/go-sql-driver/mysql"
)

// dockerAnswers reports whether a Docker engine accepts connections on
// $DOCKER_HOST or the default socket.
func dockerAnswers() bool {
	network, addr := "unix", "/var/run/docker.sock"
	if h := os.Getenv("DOCKER_HOST"); h != "" {
		switch {
		case strings.HasPrefix(h, "unix://"):
			addr = strings.TrimPrefix(h, "unix://")
		case strings.HasPrefix(h, "tcp://"):
			network, addr = "tcp", strings.TrimPrefix(h, "tcp://")
		}
	}
	c, err := net.DialTimeout(network, addr, time.Second)
	if err != nil {
		return false
	}
	c.Close()
	return true
}

// ContainerImage is the image the harness runs when it falls back to Docker
// and $ELECTION_TEST_IMAGE is unset.
const ContainerImage = "mariadb:10.11"

// EnvImage names the environment variable that chooses the container's
// image: a MariaDB image if its name contains "mariadb", else a MySQL one.
// With a Docker engine, `ELECTION_TEST_IMAGE=mysql:8.4 go test ./...` runs
// the suite against MySQL 8.4, whatever server is on PATH
// ($ELECTION_TEST_DSN still comes first).
const EnvImage = "ELECTION_TEST_IMAGE"

// startContainer returns nil, nil when no Docker engine answers. Otherwise
// it starts a container through the helper in ./docker, a module of its own
// so that testcontainers stays out of the election module's go.mod.
func startContainer(ctx context.Context) (*Server, error) {
	image := os.Getenv(EnvImage)
	if !dockerAnswers() {
		if image != "" {
			return nil, fmt.Errorf("mysqltest: $%s=%s needs a Docker engine, and none answers", EnvImage, image)
		}
		return nil, nil
	}
	if image == "" {
		image = ContainerImage
	}
	return startHelper(ctx, containerHelperDir(), "-image", image)
}

// containerHelperDir is ./docker beside this file in the source tree the
// test binary was built from.
func containerHelperDir() string {
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		return ""
	}
	return filepath.Join(filepath.Dir(file), "docker")
}

// startHelper runs `go run . args...` in dir: a program that prints a
// server's DSN on its first line of output and keeps the server until its
// standard input closes. Closing the Server closes that input.
func startHelper(ctx context.Context, dir string, args ...string) (*Server, error) {
	if _, err := os.Stat(filepath.Join(dir, "go.mod")); err != nil {
		return nil, fmt.Errorf("mysqltest: a Docker engine answers, but the container helper's module is not in this source tree (%v); "+
			"set %s, or install MariaDB so that mariadbd is found", err, EnvDSN)
	}
	cmd := exec.Command("go", append([]string{"run", "."}, args...)...) // go test puts its go first on PATH
	cmd.Dir = dir
	cmd.Stderr = os.Stderr // the helper's progress and errors, shown with the test's output
	// Its own process group, so that a stuck helper can be killed along with
	// the program go run started.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("mysqltest: running the container helper: %w", err)
	}
	drained := make(chan struct{})
	stop := func() {
		stdin.Close() // the helper removes the container, then exits
		select {
		case <-drained:
		case <-time.After(time.Minute):
			syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			<-drained
		}
		cmd.Wait()
	}
	line := make(chan string, 1)
	go func() {
		defer close(drained)
		r := bufio.NewReader(stdout)
		first, _ := r.ReadString('\n')
		line <- strings.TrimSpace(first)
		io.Copy(io.Discard, r)
	}()
	var dsn string
	select {
	case dsn = <-line:
	case <-ctx.Done():
		stop()
		return nil, fmt.Errorf("mysqltest: waiting for the container helper: %w", ctx.Err())
	}
	if dsn == "" {
		stop()
		return nil, errors.New("mysqltest: a Docker engine answers, but the container helper (" + dir + ") failed; its error is above")
	}
	cfg, err := mysql.ParseDSN(dsn)
	if err != nil {
		stop()
		return nil, fmt.Errorf("mysqltest: the container helper's DSN: %w", err)
	}
	cfg.DBName = ""
	s := &Server{dsn: cfg, stop: stop}
	if err := s.wait(ctx, time.Minute); err != nil {
		s.Close()
		return nil, err
	}
	return s, nil
}

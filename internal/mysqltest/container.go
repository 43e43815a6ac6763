package mysqltest

import (
	"context"
	"fmt"
	"net"
	"os"
	"strings"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/testcontainers/testcontainers-go"
	"github.com/testcontainers/testcontainers-go/modules/mariadb"
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

// startContainer returns nil, nil when no Docker engine answers.
func startContainer(ctx context.Context) (*Server, error) {
	if !dockerAnswers() {
		return nil, nil
	}
	return startMariaDBContainer(ctx)
}

// ContainerImage is the image the harness runs when it falls back to Docker.
const ContainerImage = "mariadb:10.11"

func startMariaDBContainer(ctx context.Context) (*Server, error) {
	c, err := mariadb.Run(ctx, ContainerImage,
		mariadb.WithUsername("root"), mariadb.WithPassword("election"), mariadb.WithDatabase("election"))
	if err != nil {
		return nil, fmt.Errorf("mysqltest: a Docker engine answers, but starting %s failed: %w", ContainerImage, err)
	}
	dsn, err := c.ConnectionString(ctx)
	if err != nil {
		testcontainers.TerminateContainer(c)
		return nil, fmt.Errorf("mysqltest: %s: %w", ContainerImage, err)
	}
	cfg, err := mysql.ParseDSN(dsn)
	if err != nil {
		testcontainers.TerminateContainer(c)
		return nil, err
	}
	cfg.DBName = ""
	s := &Server{dsn: cfg, stop: func() { testcontainers.TerminateContainer(c) }}
	if err := s.wait(ctx, time.Minute); err != nil {
		s.Close()
		return nil, err
	}
	return s, nil
}

// Command docker starts a MariaDB or MySQL container for the test harness
// (internal/mysqltest) through testcontainers, prints its DSN on a line of
// its own, and removes the container once its standard input is closed (the
// harness closes it, or dies) or a signal arrives.
//
// It is a module of its own so that testcontainers and the Docker client
// stay out of the election module's go.mod: the harness runs it with
// `go run` from this directory, and only when no server binary is found and
// a Docker engine answers.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/testcontainers/testcontainers-go"
	"github.com/testcontainers/testcontainers-go/modules/mariadb"
	"github.com/testcontainers/testcontainers-go/modules/mysql"
)

func main() {
	image := flag.String("image", "mariadb:10.11", "the image to run: MariaDB if its name says mariadb, else MySQL")
	flag.Parse()
	if err := run(*image); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

func run(image string) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	c, err := start(ctx, image)
	if err != nil {
		testcontainers.TerminateContainer(c) // c may be a started container that failed its wait
		return fmt.Errorf("starting %s: %w", image, err)
	}
	dsn, err := c.ConnectionString(ctx)
	if err != nil {
		testcontainers.TerminateContainer(c)
		return fmt.Errorf("%s: %w", image, err)
	}
	fmt.Println(dsn)
	eof := make(chan struct{})
	go func() {
		io.Copy(io.Discard, os.Stdin)
		close(eof)
	}()
	select {
	case <-eof:
	case <-ctx.Done():
	}
	if err := testcontainers.TerminateContainer(c); err != nil {
		return fmt.Errorf("removing the %s container: %w", image, err)
	}
	return nil
}

// container is what both modules' Run return.
type container interface {
	testcontainers.Container
	ConnectionString(ctx context.Context, args ...string) (string, error)
}

// start runs image through the module for its server: a MySQL image ignores
// the MARIADB_* variables, and each module waits for the log line its own
// server prints once ready on port 3306.
func start(ctx context.Context, image string) (container, error) {
	if strings.Contains(image, "mariadb") {
		return mariadb.Run(ctx, image,
			mariadb.WithUsername("root"), mariadb.WithPassword("election"), mariadb.WithDatabase("election"))
	}
	return mysql.Run(ctx, image,
		mysql.WithUsername("root"), mysql.WithPassword("election"), mysql.WithDatabase("election"))
}

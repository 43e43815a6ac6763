package main

import (
	"fmt"
	"os"
	"time"

	"testing"

	"github.com/sqlelect/election/internal/leakcheck"
)

func TestMain(m *testing.M) {
	if id := os.Getenv("DEMO_CANDIDATE"); id != "" {
		candidate(id, os.Getenv("ELECTION_DSN"))
		os.Exit(0)
	}
	code := m.Run()
	if code == 0 {
		if err := leakcheck.Check(5 * time.Second); err != nil {
			fmt.Fprintln(os.Stderr, err)
			code = 1
		}
	}
	os.Exit(code)
}

// The demo as the README runs it, with one kill: it fails unless another
// process takes over after the SIGKILL and after the SIGTERM.
func TestDemo(t *testing.T) {
	if err := run(3, 1); err != nil {
		t.Fatal(err)
	}
}

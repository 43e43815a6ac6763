package main

import (
	"os"

	"testing"

	"github.com/sqlelect/election/internal/leakcheck"
)

func TestMain(m *testing.M) {
	if id := os.Getenv("DEMO_CANDIDATE"); id != "" {
		candidate(id, os.Getenv("ELECTION_DSN"))
		os.Exit(0)
	}
	os.Exit(leakcheck.Run(m))
}

// The demo as the README runs it, with one kill: it fails unless another
// process takes over after the SIGKILL and after the SIGTERM.
func TestDemo(t *testing.T) {
	if err := run(3, 1); err != nil {
		t.Fatal(err)
	}
}

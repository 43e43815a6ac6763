package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sqlelect/election/internal/leakcheck"
)

func TestMain(m *testing.M) {
	if id := os.Getenv("ROLLING_INSTANCE"); id != "" {
		instance(id, os.Getenv("ELECTION_DSN"))
		os.Exit(0)
	}
	os.Exit(leakcheck.Run(m))
}

// The deploy moves leadership once, to v2, another v2 instance takes over
// after the SIGKILL, and the history it draws is an SVG.
func TestRollingDeploy(t *testing.T) {
	svg := filepath.Join(t.TempDir(), "history.svg")
	if err := run(svg); err != nil {
		t.Fatal(err)
	}
	drawn, err := os.ReadFile(svg)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(string(drawn), "<svg") || !strings.Contains(string(drawn), "v2-") {
		t.Fatalf("not a picture of the v2 terms:\n%.300s", drawn)
	}
}

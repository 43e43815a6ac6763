package main

import (
	"io"
	"os"
	"strings"
	"testing"
)

// On a pipe (a CI log), every step is a line of its own.
func TestProgressOnAPipe(t *testing.T) {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	p := newProgress(w)
	p.step("chaos %s: fault %d/%d", "getlock", 1, 2)
	p.step("chaos %s: fault %d/%d", "getlock", 2, 2)
	p.done()
	w.Close()
	out, _ := io.ReadAll(r)
	lines := strings.Split(strings.TrimSuffix(string(out), "\n"), "\n")
	if p.tty || len(lines) != 2 || !strings.HasSuffix(lines[0], " chaos getlock: fault 1/2") || !strings.HasSuffix(lines[1], " chaos getlock: fault 2/2") || strings.Contains(string(out), "\r") {
		t.Fatalf("progress on a pipe printed %q", out)
	}
}

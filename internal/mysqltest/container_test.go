package mysqltest

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// fakeHelper is a stand-in for ./docker with its protocol: it prints the DSN
// it is given (nothing when it is given "fail"), and writes the file "eof"
// once its standard input closes, where the real helper removes the
// container.
const fakeHelper = `package main

import (
	"fmt"
	"io"
	"os"
)

func main() {
	if os.Args[1] == "fail" {
		fmt.Fprintln(os.Stderr, "fake helper: no container")
		os.Exit(1)
	}
	fmt.Println(os.Args[1])
	io.Copy(io.Discard, os.Stdin)
	os.WriteFile("eof", nil, 0o644)
}
`

// The Docker fallback without Docker: the harness's side of the helper
// (go run, the DSN line, closing stdin on Close), against a private server.
func TestContainerHelper(t *testing.T) {
	bin := PrivateBinary()
	if bin == "" {
		t.Skip("no mariadbd or mysqld on PATH")
	}
	if _, err := os.Stat(filepath.Join(containerHelperDir(), "go.mod")); err != nil {
		t.Fatalf("the container helper's module: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	private, err := StartPrivate(ctx, bin)
	if err != nil {
		t.Fatal(err)
	}
	defer private.Close()

	dir := t.TempDir()
	for name, text := range map[string]string{"go.mod": "module fakehelper\n\ngo 1.25.0\n", "main.go": fakeHelper} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	s, err := startHelper(ctx, dir, private.DSN(""))
	if err != nil {
		t.Fatal(err)
	}
	if s.Addr() != private.Addr() {
		t.Errorf("helper's server at %s, want %s", s.Addr(), private.Addr())
	}
	s.Close()
	if _, err := os.Stat(filepath.Join(dir, "eof")); err != nil {
		t.Errorf("Close did not close the helper's input: %v", err)
	}

	if _, err := startHelper(ctx, dir, "fail"); err == nil || !strings.Contains(err.Error(), "helper") {
		t.Errorf("a failing helper: %v", err)
	}
	if _, err := startHelper(ctx, t.TempDir()); err == nil || !strings.Contains(err.Error(), "not in this source tree") {
		t.Errorf("no helper module: %v", err)
	}
}

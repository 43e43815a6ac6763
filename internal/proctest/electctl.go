package proctest

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
)

// BuildElectctl builds cmd/electctl into the test's temporary directory and
// returns the binary's path.
func BuildElectctl(t testing.TB) string {
	t.Helper()
	goBin, err := exec.LookPath("go")
	if err != nil {
		goBin = filepath.Join(os.Getenv("GOROOT"), "bin", "go")
	}
	bin := filepath.Join(t.TempDir(), "electctl")
	cmd := exec.Command(goBin, "build", "-o", bin, "github.com/sqlelect/election/cmd/electctl")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("building electctl: %v\n%s", err, out)
	}
	return bin
}

// Electctl runs the electctl binary bin on dsn and returns its exit code,
// stdout and stderr. It fails the test if electctl runs longer than 30 s.
func Electctl(t testing.TB, bin, dsn string, args ...string) (int, string, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = append(os.Environ(), "ELECTION_DSN="+dsn)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	if err := cmd.Run(); err != nil && cmd.ProcessState == nil {
		t.Fatal(err)
	}
	if ctx.Err() != nil {
		t.Fatalf("electctl %q did not finish within 30s:\n%s%s", args, &out, &errOut)
	}
	return cmd.ProcessState.ExitCode(), out.String(), errOut.String()
}

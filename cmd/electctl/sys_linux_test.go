//go:build linux

package main

import (
	"os"
	"os/exec"
	"syscall"
	"testing"
	"time"
)

// TestRawSyscalls checks the system calls that sys_linux.go makes by hand
// against what the standard library says.
func TestRawSyscalls(t *testing.T) {
	// CLOCK_MONOTONIC is Go's monotonic clock too: both measure a sleep alike.
	t0, start := mono(), time.Now()
	time.Sleep(20 * time.Millisecond)
	d, elapsed := time.Duration(mono()-t0), time.Since(start)
	if d < 20*time.Millisecond || d > elapsed+time.Millisecond || d < elapsed-time.Millisecond {
		t.Errorf("CLOCK_MONOTONIC measured %v, Go's clock %v", d, elapsed)
	}

	cmd := exec.Command("sleep", "60")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	if ended, err := exitedNoWait(cmd.Process.Pid); err != nil || ended {
		t.Errorf("a running child: ended %v, %v", ended, err)
	}
	cmd.Process.Kill()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(time.Millisecond) {
		ended, err := exitedNoWait(cmd.Process.Pid)
		if err != nil {
			t.Fatal(err)
		}
		if ended {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("a killed child did not end")
		}
	}
	// WNOWAIT left it to be reaped.
	if err := cmd.Wait(); err == nil || cmd.ProcessState.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
		t.Errorf("the child's wait after WNOWAIT: %v", err)
	}
	if _, err := exitedNoWait(cmd.Process.Pid); err != syscall.ECHILD {
		t.Errorf("a reaped child: %v, want ECHILD", err)
	}

	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	start = time.Now()
	for {
		if err := pollIn(int(r.Fd()), 50); err != syscall.EINTR {
			if err != nil {
				t.Fatal(err)
			}
			break
		}
	}
	if d := time.Since(start); d < 40*time.Millisecond {
		t.Errorf("poll of an empty pipe returned after %v, want its 50ms timeout", d)
	}
	w.Write([]byte("x"))
	w.Close()
	if err := pollIn(int(r.Fd()), -1); err != nil {
		t.Fatal(err)
	}

	for sig, want := range map[syscall.Signal]string{syscall.SIGTERM: "SIGTERM", syscall.SIGKILL: "SIGKILL", syscall.SIGUSR1: "SIGUSR1", 34: "SIG34"} {
		if got := signalName(sig); got != want {
			t.Errorf("signalName(%d) = %q, want %q", sig, got, want)
		}
	}
}

//go:build linux

package main

// The few system calls electctl run needs that the standard syscall package
// does not wrap. The root module requires only the driver and backoff
// (scripts/lean.sh), so golang.org/x/sys is not an option: these are raw
// system calls, each one that linux/amd64 and linux/arm64 both have (arm64
// has no poll(2), only ppoll(2)), with the constants of the Linux ABI,
// which are the same on both.

import (
	"strconv"
	"syscall"
	"unsafe"
)

// clockGettime reads CLOCK_MONOTONIC with clock_gettime(2). syscall has no
// wrapper; the raw call skips the vDSO, a few hundred nanoseconds that a
// deadline renewed every S/16 does not notice.
func clockGettime() (syscall.Timespec, error) {
	const clockMonotonic = 1 // CLOCK_MONOTONIC
	var ts syscall.Timespec
	_, _, errno := syscall.Syscall(syscall.SYS_CLOCK_GETTIME, clockMonotonic, uintptr(unsafe.Pointer(&ts)), 0)
	if errno != 0 {
		return ts, errno
	}
	return ts, nil
}

// exitedNoWait reports whether process pid, a child of this process, has
// ended, without reaping it: waitid(2) with WNOWAIT, which syscall's Wait4
// cannot do (os/exec's Wait reaps it in its own time). ECHILD, the child
// reaped already, is returned as an error.
func exitedNoWait(pid int) (bool, error) {
	const (
		pPID    = 1          // P_PID
		wNOHANG = 1          // WNOHANG
		wEXITED = 4          // WEXITED
		wNOWAIT = 0x01000000 // WNOWAIT
	)
	// siginfo_t is 128 bytes on Linux, si_signo its first int32. With
	// WNOHANG and no child ended, the kernel leaves si_signo 0.
	var info [128 / 8]uint64
	_, _, errno := syscall.Syscall6(syscall.SYS_WAITID, pPID, uintptr(pid), uintptr(unsafe.Pointer(&info)), wEXITED|wNOHANG|wNOWAIT, 0, 0)
	if errno != 0 {
		return false, errno
	}
	return *(*int32)(unsafe.Pointer(&info)) != 0, nil
}

// pollIn waits until fd is readable (or closed), or for timeoutMS
// milliseconds (-1: no limit), with ppoll(2): syscall has no poll, and
// linux/arm64 has no poll(2) system call.
func pollIn(fd int, timeoutMS int) error {
	const pollIN = 0x1 // POLLIN
	pfd := struct {
		fd      int32
		events  int16
		revents int16
	}{fd: int32(fd), events: pollIN}
	var tsp uintptr // NULL: no limit
	var ts syscall.Timespec
	if timeoutMS >= 0 {
		ts = syscall.NsecToTimespec(int64(timeoutMS) * 1e6)
		tsp = uintptr(unsafe.Pointer(&ts))
	}
	// No signal mask (NULL, size 0): the thread's stays as it is, as with poll.
	_, _, errno := syscall.Syscall6(syscall.SYS_PPOLL, uintptr(unsafe.Pointer(&pfd)), 1, tsp, 0, 0, 0)
	if errno != 0 {
		return errno
	}
	return nil
}

// signalNames are the names logs show ("SIGTERM"); syscall.Signal's String
// gives the C library's description ("terminated").
var signalNames = map[syscall.Signal]string{
	syscall.SIGHUP: "SIGHUP", syscall.SIGINT: "SIGINT", syscall.SIGQUIT: "SIGQUIT",
	syscall.SIGILL: "SIGILL", syscall.SIGTRAP: "SIGTRAP", syscall.SIGABRT: "SIGABRT",
	syscall.SIGBUS: "SIGBUS", syscall.SIGFPE: "SIGFPE", syscall.SIGKILL: "SIGKILL",
	syscall.SIGUSR1: "SIGUSR1", syscall.SIGSEGV: "SIGSEGV", syscall.SIGUSR2: "SIGUSR2",
	syscall.SIGPIPE: "SIGPIPE", syscall.SIGALRM: "SIGALRM", syscall.SIGTERM: "SIGTERM",
	syscall.SIGSTKFLT: "SIGSTKFLT", syscall.SIGCHLD: "SIGCHLD", syscall.SIGCONT: "SIGCONT",
	syscall.SIGSTOP: "SIGSTOP", syscall.SIGTSTP: "SIGTSTP", syscall.SIGTTIN: "SIGTTIN",
	syscall.SIGTTOU: "SIGTTOU", syscall.SIGURG: "SIGURG", syscall.SIGXCPU: "SIGXCPU",
	syscall.SIGXFSZ: "SIGXFSZ", syscall.SIGVTALRM: "SIGVTALRM", syscall.SIGPROF: "SIGPROF",
	syscall.SIGWINCH: "SIGWINCH", syscall.SIGIO: "SIGIO", syscall.SIGPWR: "SIGPWR",
	syscall.SIGSYS: "SIGSYS",
}

// signalName names sig as kill -l does, SIG included; a real-time signal,
// which has no fixed name, by its number ("SIG34").
func signalName(sig syscall.Signal) string {
	if name, ok := signalNames[sig]; ok {
		return name
	}
	return "SIG" + strconv.Itoa(int(sig))
}

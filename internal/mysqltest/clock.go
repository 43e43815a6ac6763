package mysqltest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"time"
)

// faketimeLibs are where Debian's faketime package puts libfaketime's
// multi-threaded variant, which mariadbd needs, by architecture.
var faketimeLibs = []string{
	"/usr/lib/x86_64-linux-gnu/faketime/libfaketimeMT.so.1",
	"/usr/lib/aarch64-linux-gnu/faketime/libfaketimeMT.so.1",
	"/usr/lib/faketime/libfaketimeMT.so.1",
}

// FaketimeLib returns the path of libfaketimeMT, or "" when the faketime
// package is not installed.
func FaketimeLib() string {
	for _, p := range faketimeLibs {
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	return ""
}

// StartSteppable starts a private server whose wall clock a test can step
// (StepClock): the server runs under libfaketime, which reads its offset
// from real time from a file at every clock read (FAKETIME_NO_CACHE), so
// that a step is a write to that file. CLOCK_MONOTONIC is left alone
// (FAKETIME_DONT_FAKE_MONOTONIC), as a stepped clock leaves it. It needs
// mariadbd or mysqld and the faketime package; the error says which is
// missing.
func StartSteppable(ctx context.Context) (*Server, error) {
	bin := PrivateBinary()
	if bin == "" {
		return nil, errors.New("mysqltest: no mariadbd or mysqld on PATH (apt-get install mariadb-server)")
	}
	lib := FaketimeLib()
	if lib == "" {
		return nil, errors.New("mysqltest: libfaketimeMT not found (apt-get install faketime)")
	}
	dir, err := os.MkdirTemp("", "election-mysqld-")
	if err != nil {
		return nil, err
	}
	port, err := FreePort()
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	s, err := NewPrivate(bin, dir, port, "")
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	s.stop = func() { os.RemoveAll(dir) }
	s.clockFile = filepath.Join(dir, "faketime")
	if err := s.StepClock(0); err != nil {
		s.Close()
		return nil, err
	}
	s.env = []string{"LD_PRELOAD=" + lib, "FAKETIME_TIMESTAMP_FILE=" + s.clockFile, "FAKETIME_NO_CACHE=1", "FAKETIME_DONT_FAKE_MONOTONIC=1"}
	if err := s.Initialize(ctx); err != nil {
		s.Close()
		return nil, err
	}
	if err := s.Boot(ctx); err != nil {
		s.Close()
		return nil, err
	}
	return s, nil
}

// Steppable reports whether the server's clock can be stepped.
func (s *Server) Steppable() bool { return s.clockFile != "" }

// StepClock sets the server's wall clock to run offset ahead of real time
// (behind it, if negative), from its next clock read on: a step by the
// difference from the last offset. It changes nothing else: the server's
// process keeps running, its sessions keep their connections.
func (s *Server) StepClock(offset time.Duration) error {
	if !s.Steppable() {
		return errors.New("mysqltest: the server's clock cannot be stepped: start it with StartSteppable")
	}
	// libfaketime reads "+N.Ns" / "-N.Ns": an offset from real time in
	// seconds. Written to a new file and renamed, so that a read never sees
	// half of it.
	secs := strconv.FormatFloat(offset.Seconds(), 'f', 6, 64)
	if offset >= 0 {
		secs = "+" + secs
	}
	tmp := s.clockFile + ".new"
	if err := os.WriteFile(tmp, []byte(secs+"s\n"), 0o644); err != nil {
		return fmt.Errorf("mysqltest: stepping the clock: %w", err)
	}
	if err := os.Rename(tmp, s.clockFile); err != nil {
		return fmt.Errorf("mysqltest: stepping the clock: %w", err)
	}
	return nil
}

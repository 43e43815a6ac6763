// Package proctest runs candidates as separate processes of the test
// binary and reads what they report: one JSON line per event on stdout.
// The root package's tests and the Galera suite share it.
package proctest

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// Event is one line a candidate process prints.
type Event struct {
	Ev     string `json:"ev"` // what happened; "error" fails the test that reads it
	ID     string `json:"id"`
	Token  uint64 `json:"token,omitempty"`
	OK     bool   `json:"ok,omitempty"`
	Fenced bool   `json:"fenced,omitempty"`
	Reason string `json:"reason,omitempty"`
	Shard  int    `json:"shard,omitempty"` // of a group's member (election.Shards)
	At     int64  `json:"at"`              // wall clock, Unix ns: the processes share the machine's clock
}

// Time returns when the event happened.
func (e Event) Time() time.Time { return time.Unix(0, e.At) }

// Emitter returns a function, safe for concurrent use, that stamps an event
// with the time and writes it to w as one line.
func Emitter(w io.Writer) func(Event) {
	out := json.NewEncoder(w)
	var mu sync.Mutex
	return func(ev Event) {
		ev.At = time.Now().UnixNano()
		mu.Lock()
		defer mu.Unlock()
		out.Encode(ev)
	}
}

// Stream is the events of a set of candidate processes, one stream in the
// order received.
type Stream struct {
	t       testing.TB
	events  chan Event
	pending []Event // received, not yet returned by Next

	mu  sync.Mutex
	all []Event // every event, in the order received
}

// NewStream returns an empty stream for test t.
func NewStream(t testing.TB) *Stream {
	return &Stream{t: t, events: make(chan Event, 100000)}
}

// Start launches the test binary as a candidate process, with env added to
// its environment, and streams its events; read is closed once its stdout
// has been read to the end.
func (s *Stream) Start(env ...string) (cmd *exec.Cmd, read <-chan struct{}) {
	s.t.Helper()
	cmd = exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), env...)
	cmd.Stderr = os.Stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		s.t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		s.t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			var ev Event
			if json.Unmarshal(sc.Bytes(), &ev) == nil {
				s.Record(ev)
			}
		}
		io.Copy(io.Discard, stdout)
	}()
	return cmd, done
}

// Record adds an event to the stream, as a process's or the test's own.
func (s *Stream) Record(ev Event) {
	s.mu.Lock()
	s.all = append(s.all, ev)
	s.mu.Unlock()
	s.events <- ev
}

// All returns every event so far, in the order received.
func (s *Stream) All() []Event {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.all)
}

// Next returns the earliest event, not yet returned, for which match is
// true. Events that do not match stay pending for later calls: a process's
// events may arrive interleaved with another's in either order.
func (s *Stream) Next(match func(Event) bool, limit time.Duration) Event {
	s.t.Helper()
	for i, e := range s.pending {
		if match(e) {
			s.pending = slices.Delete(s.pending, i, i+1)
			return e
		}
	}
	timeout := time.After(limit)
	for {
		select {
		case e := <-s.events:
			if e.Ev == "error" {
				s.t.Fatalf("%s: %s", e.ID, e.Reason)
			}
			if match(e) {
				return e
			}
			s.pending = append(s.pending, e)
		case <-timeout:
			s.t.Fatalf("no matching event within %v; events so far:\n%s", limit, s.describe())
		}
	}
}

// describe lists the events so far, but for log lines and failed writes.
func (s *Stream) describe() string {
	var b strings.Builder
	for _, e := range s.All() {
		if e.Ev != "log" && e.Ev != "failed" {
			fmt.Fprintf(&b, "  %s %s %s token %d %s\n", e.Time().Format("15:04:05.000"), e.ID, e.Ev, e.Token, e.Reason)
		}
	}
	return b.String()
}

// Is matches events of kind.
func Is(kind string) func(Event) bool { return func(e Event) bool { return e.Ev == kind } }

// IsFrom matches events of kind from process id.
func IsFrom(kind, id string) func(Event) bool {
	return func(e Event) bool { return e.Ev == kind && e.ID == id }
}

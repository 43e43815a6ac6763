package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/sqlelect/election/internal/failpoint"
)

// Traps are the faults at the worst moments: a candidate stopped or killed
// at a failpoint, by itself, so that the fault lands exactly there and not
// a millisecond before or after. The parent arms the candidates over their
// stdin; the first to reach the point reports it and waits until the
// parent has disarmed the others and tells it to go on.
const (
	// A GetLock candidate granted the lock, before its term began.
	fLockedStop = "locked-stop"
	fLockedKill = "locked-kill"
	// A candidate that claimed the election (its token is committed),
	// before its term began: no lease yet, nothing returned to Run.
	fClaimedStop = "claimed-stop"
	fClaimedKill = "claimed-kill"
	// The leader inside Term.Fenced, its checks passed (the epoch under a
	// shared lock, its lease after the caller's function), its COMMIT not
	// yet sent.
	fFencedStop = "fenced-stop"
	fFencedKill = "fenced-kill"
)

// pointFenced names the fenced traps' point: Term.Fenced's, after its
// checks, as it sends the COMMIT.
const pointFenced = "fenced"

// trapFaults are the traps, in the order the fault list gives them.
var trapFaults = []string{fLockedStop, fLockedKill, fClaimedStop, fClaimedKill, fFencedStop, fFencedKill}

// trapOf splits a trap fault into its failpoint and action (stop or kill);
// ok is false for the other faults.
func trapOf(fault string) (point, action string, ok bool) {
	point, action, ok = strings.Cut(fault, "-")
	switch point {
	case failpoint.Locked, failpoint.Claimed, pointFenced:
		return point, action, ok
	}
	return "", "", false
}

// failpointOf maps the library's failpoints to the traps' points.
func failpointOf(point string) string {
	if point == failpoint.Committing {
		return pointFenced
	}
	return point
}

// trap is the candidate's side: the point it is armed for, if any.
type trap struct {
	mu     sync.Mutex
	point  string // "" when disarmed
	action string
	goes   chan struct{}
	emit   func(event)
}

// listen obeys the parent's lines on r until it closes: "arm POINT
// ACTION", "disarm", "go".
func (t *trap) listen(r io.Reader, emit func(event)) {
	t.goes, t.emit = make(chan struct{}, 1), emit
	go func() {
		sc := bufio.NewScanner(r)
		for sc.Scan() {
			f := strings.Fields(sc.Text())
			t.mu.Lock()
			switch {
			case len(f) == 3 && f[0] == "arm":
				t.point, t.action = f[1], f[2]
				select { // a go left over from an earlier trap must not spring this one
				case <-t.goes:
				default:
				}
			case len(f) == 1 && f[0] == "disarm":
				t.point = ""
			case len(f) == 1 && f[0] == "go":
				select {
				case t.goes <- struct{}{}:
				default:
				}
			}
			t.mu.Unlock()
		}
	}()
}

// reach springs the trap if it is armed for point: it reports the point,
// waits for the parent's go, and stops or kills this process here. A
// parent that never says go (it died) leaves the candidate running.
func (t *trap) reach(point string) {
	t.mu.Lock()
	armed, action := t.point == point && point != "", t.action
	if armed {
		t.point = ""
	}
	t.mu.Unlock()
	if !armed {
		return
	}
	t.emit(event{Ev: "trap", Reason: point + " " + action})
	select {
	case <-t.goes:
	case <-time.After(10 * time.Second):
		return
	}
	sig := syscall.SIGSTOP
	if action == "kill" {
		sig = syscall.SIGKILL
		// Its term acts no longer: the parent sees the output end later.
		t.emit(event{Ev: "exit"})
	}
	// To this thread, not the process: a signal sent to the process goes
	// to its main thread, and this one would run on for a while (measured:
	// past the term's start) before the stop reached it.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	syscall.Tgkill(os.Getpid(), syscall.Gettid(), sig)
}

// send writes one line to candidate p's trap; a candidate that is gone
// does not read it, which is no failure.
func (p *proc) send(line string) { fmt.Fprintln(p.stdin, line) }

// spring injects a trap fault: it arms the leader (fenced) or every other
// candidate (locked, claimed: the leader then gets SIGTERM, resigns and
// exits, so that a waiter wins and reaches the point; it is started again
// afterwards), waits for the first to reach it, disarms the rest, lets it
// stop or kill itself, waits for the next acting leader, and heals.
func (a *arena) spring(ctx context.Context, tr trial, point, action string, old event, limit time.Duration) (trial, error) {
	p := a.proc(old.ID)
	var armed []*proc
	for _, q := range a.all() {
		if (q == p) == (point == pointFenced) {
			armed = append(armed, q)
			q.send("arm " + point + " " + action)
		}
	}
	t0, from := time.Now(), len(a.log)
	tr.At = t0.UnixNano()
	if point != pointFenced {
		p.cmd.Process.Signal(syscall.SIGTERM)
	}
	e, ok := a.next(func(e event) bool { return e.Ev == "trap" }, limit)
	for _, q := range armed {
		if !ok || q.id != e.ID {
			q.send("disarm")
		}
	}
	if ok {
		a.proc(e.ID).send("go")
		t0 = time.Unix(0, e.At)
		newTerm := func(n event) bool {
			return n.Ev == "start" && n.ID != e.ID && n.Term != old.Term && n.At > t0.UnixNano()
		}
		if n, ok := a.next(newTerm, limit); ok {
			tr.FailoverS = time.Unix(0, n.At).Sub(t0).Seconds()
		}
	} else {
		tr.Missed = true
	}
	// Heal: the resigned leader and every candidate that sprang a trap
	// (rarely two: one disarmed too late) come back.
	if point != pointFenced {
		p.stop(limit) // it resigns and exits; one that hangs is killed
		if err := a.spawn(ctx, p.id); err != nil {
			return tr, err
		}
	}
	a.drain()
	for _, s := range a.log[from:] {
		if s.Ev != "trap" {
			continue
		}
		q := a.proc(s.ID)
		if action == "stop" {
			// A second trap, sprung before its disarm, was never told to
			// go: it goes on by itself after a while. A go sent now could
			// reach it after this SIGCONT and stop it for good.
			q.cmd.Process.Signal(syscall.SIGCONT)
			continue
		}
		q.send("go") // a second trap waits for it too
		q.stop(limit)
		if err := a.spawn(ctx, q.id); err != nil {
			return tr, err
		}
	}
	if ok && learns(tr.Fault) {
		if n, ok := a.next(func(n event) bool { return n.Ev == "end" && n.Term == old.Term }, min(limit, 3*a.tm.Interval+5*time.Second)); ok {
			tr.KnewS = time.Unix(0, n.At).Sub(t0).Seconds()
		}
	}
	return tr, nil
}

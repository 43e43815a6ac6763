// Package benchevent is what a candidate process of electbench prints: one
// JSON line per event of its terms and writes, which the parent reads. Both
// electbench's own candidates and electbench-etcd's use it.
package benchevent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// Event is one line a candidate process prints.
type Event struct {
	// ready (obeys Quiet), start, end, call (a write begins), write
	// (it returned), trap (an armed failpoint was reached); other-start and
	// other-end: a term of one of the elections beyond the first began or
	// ended (candidate -elections). A start is printed as the leader's function begins and
	// its end once its last write has returned, as the function returns:
	// between the two the term acts. exit: the process ends, and any term
	// of it that printed no end with it; a candidate that kills itself
	// (a trap) prints it first, and the parent logs one once the output
	// ended, at the time it SIGKILLed the process if it did.
	Ev       string `json:"ev"`
	ID       string `json:"id"`
	Election string `json:"election,omitempty"` // only for other-start and other-end
	Term     string `json:"term"`
	Token    uint64 `json:"token,omitempty"`
	// Op names one write: its call event and its write event carry it,
	// and so does its row if it committed.
	Op string `json:"op,omitempty"`
	// write: accepted; start of a fenced term: its lease was valid (this
	// library) or its key was there (etcd) when it began
	OK      bool   `json:"ok,omitempty"`
	Refused bool   `json:"refused,omitempty"` // the write failed because its fence refused it
	Reason  string `json:"reason,omitempty"`
	TTLS    int64  `json:"ttl_s,omitempty"` // start of an etcd term: the TTL its lease was granted
	At      int64  `json:"at"`              // Unix ns; all processes share the machine's clock
}

// Write is one write as etcd keeps it and electbench-etcd dump prints it,
// with Rev, the revision that committed it.
type Write struct {
	Rev    int64  `json:"rev,omitempty"`
	Holder string `json:"holder"`
	Term   string `json:"term"`
	Token  uint64 `json:"token"`
	Op     string `json:"op"`
	At     int64  `json:"at"` // Unix ns, when its candidate sent it
}

// Signals that pause and resume a candidate's writes, so that the
// election's own cost can be measured.
const (
	Quiet  = syscall.SIGUSR1
	Resume = syscall.SIGUSR2
)

// Printer prints the events of candidate ID, one line each.
type Printer struct {
	ID      string
	refusal error // what a write refused by its fence returns
	mu      sync.Mutex
	out     *json.Encoder
	quiet   atomic.Bool
	ops     atomic.Uint64
}

// NewPrinter returns the printer of candidate id on w, whose refused
// writes fail with refusal.
func NewPrinter(id string, w io.Writer, refusal error) *Printer {
	return &Printer{ID: id, refusal: refusal, out: json.NewEncoder(w)}
}

// Emit prints e, stamped with the candidate and, unless it has one, the
// time.
func (p *Printer) Emit(e Event) {
	e.ID = p.ID
	if e.At == 0 {
		e.At = time.Now().UnixNano()
	}
	p.mu.Lock()
	p.out.Encode(e)
	p.mu.Unlock()
}

// ObeyQuiet pauses and resumes the writes on Quiet and Resume until ctx
// ends.
func (p *Printer) ObeyQuiet(ctx context.Context) {
	ch := make(chan os.Signal, 1)
	signal.Notify(ch, Quiet, Resume)
	go func() {
		defer signal.Stop(ch)
		for {
			select {
			case <-ctx.Done():
				return
			case s := <-ch:
				p.quiet.Store(s == Quiet)
			}
		}
	}()
}

// Quiet reports whether the writes are paused.
func (p *Printer) Quiet() bool { return p.quiet.Load() }

// Record makes one write of term through do, which it gives a new op
// name, between a call event and a write event: a write whose process
// dies in between has a call and no return, its outcome known only from
// what committed. A write cut off because its term ended (ctx) gets no
// write event. It returns what do returned.
func (p *Printer) Record(ctx context.Context, term string, token uint64, do func(op string) error) error {
	op := fmt.Sprintf("%s.%d.%d", p.ID, os.Getpid(), p.ops.Add(1))
	p.Emit(Event{Ev: "call", Term: term, Token: token, Op: op})
	err := do(op)
	if err == nil || ctx.Err() == nil {
		p.Emit(Event{Ev: "write", Term: term, Op: op, OK: err == nil, Refused: errors.Is(err, p.refusal)})
	}
	return err
}

// Command electbench-etcd is the etcd side of electbench: the candidate
// process of its etcd contenders, and the reader of their writes once they
// stopped. A module of its own, outside go.work, so that electbench links
// no etcd client; it also pins the etcd server (tools.go) that
// scripts/etcd.sh builds beside it.
//
//	electbench-etcd candidate -id c0 -endpoints 127.0.0.1:2379 -ttl 2   one candidate, until SIGTERM
//	electbench-etcd dump -endpoints 127.0.0.1:2379                      the writes, one JSON line each
//
// A candidate campaigns with a concurrency.Session and Election. Once
// elected, it prints the start of its term (the token is the leader key's
// create revision, Election.Rev) and writes every -write-every, fenced as
// etcd fences: one transaction, if the leader key still has that revision,
// sets the register and adds writes/<op>. Its term ends when its session
// does (the lease was not refreshed within its TTL, as the client sees it)
// or a write is refused; it then campaigns again with a new session. On
// SIGTERM it resigns and exits. It prints the events of package
// benchevent, as electbench's own candidates do, and obeys their signals.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"

	"github.com/sqlelect/election/internal/benchevent"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	var err error
	switch {
	case len(os.Args) > 1 && os.Args[1] == "candidate":
		err = candidateMain(ctx, os.Args[2:])
	case len(os.Args) > 1 && os.Args[1] == "dump":
		err = dumpMain(ctx, os.Args[2:], os.Stdout)
	default:
		err = errors.New("usage: electbench-etcd candidate|dump [flags]")
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "electbench-etcd:", err)
		os.Exit(1)
	}
}

// keys are where the contest keeps its election and writes.
type keys struct {
	election, register, writes string
}

// keysUnder are the keys under prefix.
func keysUnder(prefix string) keys {
	return keys{election: prefix + "election/", register: prefix + "register", writes: prefix + "writes/"}
}

// flags registers the flags both subcommands share: the endpoints to dial
// and the keys' prefix.
func flags(fs *flag.FlagSet) (endpoints, prefix *string) {
	return fs.String("endpoints", "127.0.0.1:2379", "etcd client addresses, comma-separated"),
		fs.String("prefix", "electbench/", "prefix of the election's and the writes' keys")
}

// errRefused is a write whose guard failed: the term's leader key is gone.
var errRefused = errors.New("refused: the leader key is not the term's")

// candidate runs the election in this process until ctx ends, printing
// its events on stdout.
type candidate struct {
	*benchevent.Printer
	cli   *clientv3.Client
	keys  keys
	ttl   int // asked; the server grants at least its minimum
	every time.Duration
}

// candidateMain is the candidate subcommand: electbench starts one per
// candidate; it runs until SIGTERM.
func candidateMain(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("candidate", flag.ContinueOnError)
	endpoints, prefix := flags(fs)
	id := fs.String("id", "", "this candidate's name")
	ttl := fs.Int("ttl", 60, "the session's TTL, in seconds")
	every := fs.Duration("write-every", 20*time.Millisecond, "how often the leader writes")
	if err := fs.Parse(args); err != nil {
		return err
	}
	cli, err := clientv3.New(clientv3.Config{Endpoints: strings.Split(*endpoints, ",")})
	if err != nil {
		return err
	}
	defer cli.Close()
	c := &candidate{Printer: benchevent.NewPrinter(*id, os.Stdout, errRefused), cli: cli, keys: keysUnder(*prefix), ttl: *ttl, every: *every}
	c.ObeyQuiet(ctx)
	c.Emit(benchevent.Event{Ev: "ready"})
	for ctx.Err() == nil {
		if err := c.term(ctx); err != nil && ctx.Err() == nil {
			// etcd is out of reach, say: try again soon, as a client would.
			sleep(ctx, c.every)
		}
	}
	return nil
}

// term campaigns with a new session and, once elected, leads until the
// session ends, a write is refused, or ctx ends; then it resigns.
func (c *candidate) term(ctx context.Context) error {
	lease, err := c.cli.Grant(ctx, int64(c.ttl))
	if err != nil {
		return err
	}
	s, err := concurrency.NewSession(c.cli, concurrency.WithLease(lease.ID), concurrency.WithTTL(c.ttl), concurrency.WithContext(ctx))
	if err != nil {
		return err
	}
	// Revokes the lease, unless ctx ended (the resign below did the work).
	defer s.Close()
	e := concurrency.NewElection(s, c.keys.election)
	if err := e.Campaign(s.Ctx(), c.ID); err != nil {
		return err
	}
	term := fmt.Sprint(e.Rev())
	// The time comes before the look at the key: if the key was there
	// then, no later term had begun by then, however long this process is
	// paused before the event is printed.
	at := time.Now().UnixNano()
	got, err := c.cli.Get(s.Ctx(), e.Key())
	held := err == nil && len(got.Kvs) == 1 && got.Kvs[0].CreateRevision == e.Rev()
	c.Emit(benchevent.Event{Ev: "start", Term: term, Token: uint64(e.Rev()), OK: held, TTLS: lease.TTL, At: at})
	// The term ends, as far as the candidate knows, when its session does
	// or a write is refused, even while a write is in flight: the guard
	// answers that one.
	refused, wrote := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(wrote)
		ttl := time.Duration(lease.TTL) * time.Second
		for s.Ctx().Err() == nil {
			if !c.Quiet() {
				if err := c.record(ctx, e, term, ttl); errors.Is(err, errRefused) {
					close(refused)
					return
				}
			}
			sleep(s.Ctx(), c.every)
		}
	}()
	defer func() { <-wrote }()
	reason := "session ended"
	select {
	case <-s.Done():
	case <-refused:
		reason = "write refused"
	}
	if ctx.Err() == nil {
		c.Emit(benchevent.Event{Ev: "end", Term: term, Reason: reason})
		return nil
	}
	c.Emit(benchevent.Event{Ev: "end", Term: term, Reason: "resigned"})
	rctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return e.Resign(rctx)
}

// record makes one write of the term e leads, as Printer.Record does. The
// write's context is not the session's: a write sent as the session ends
// is answered by the guard, as a paused leader's is once it resumes; but
// it outlives neither the process nor the lease's TTL.
func (c *candidate) record(ctx context.Context, e *concurrency.Election, term string, ttl time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, ttl)
	defer cancel()
	return c.Record(ctx, term, uint64(e.Rev()), func(op string) error { return c.write(ctx, e, term, op) })
}

// write is one write, op, of the term e leads: in one transaction that
// commits only if the leader key is still the term's, the register and
// writes/<op>.
func (c *candidate) write(ctx context.Context, e *concurrency.Election, term, op string) error {
	w, err := json.Marshal(benchevent.Write{Holder: c.ID, Term: term, Token: uint64(e.Rev()), Op: op, At: time.Now().UnixNano()})
	if err != nil {
		return err
	}
	resp, err := c.cli.Txn(ctx).If(clientv3.Compare(clientv3.CreateRevision(e.Key()), "=", e.Rev())).
		Then(clientv3.OpPut(c.keys.register, op), clientv3.OpPut(c.keys.writes+op, string(w))).Commit()
	if err == nil && !resp.Succeeded {
		return errRefused
	}
	return err
}

// dumpMain is the dump subcommand: it prints every write, with the
// revision that committed it, one JSON line each, in key order.
func dumpMain(ctx context.Context, args []string, out io.Writer) error {
	fs := flag.NewFlagSet("dump", flag.ContinueOnError)
	endpoints, prefix := flags(fs)
	if err := fs.Parse(args); err != nil {
		return err
	}
	cli, err := clientv3.New(clientv3.Config{Endpoints: strings.Split(*endpoints, ","), DialTimeout: 10 * time.Second})
	if err != nil {
		return err
	}
	defer cli.Close()
	enc := json.NewEncoder(out)
	writes := keysUnder(*prefix).writes
	from, end := writes, clientv3.GetPrefixRangeEnd(writes)
	for {
		resp, err := cli.Get(ctx, from, clientv3.WithRange(end), clientv3.WithLimit(1000))
		if err != nil {
			return err
		}
		for _, kv := range resp.Kvs {
			var w benchevent.Write
			if err := json.Unmarshal(kv.Value, &w); err != nil {
				return fmt.Errorf("%s: %w", kv.Key, err)
			}
			w.Rev = kv.ModRevision
			if err := enc.Encode(w); err != nil {
				return err
			}
		}
		if !resp.More {
			return nil
		}
		from = string(resp.Kvs[len(resp.Kvs)-1].Key) + "\x00"
	}
}

// sleep waits d or until ctx ends.
func sleep(ctx context.Context, d time.Duration) {
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}

package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/sqlelect/election"
)

// watchHelp follows watch's flags in its help.
const watchHelp = `
Prints who leads now, then every term's start and end, in order, until
interrupted. If its reads fail before one has succeeded for a reason that
retrying cannot fix (tables missing, a login or grant refused), it exits at
once: 4 not found, 5 refused. Later it retries them: one line on stderr
when reads start to fail, with the error, and one when they work again;
the changes made meanwhile follow.
`

// watch prints every change of leader of election name until interrupted.
// It exits at once, with the code fail gives, when its reads fail before
// the first succeeded for a reason that retrying cannot fix (tables or
// database missing, a login or grant refused); later it says on stderr
// when reads start to fail, once, and when they work again.
func (c *cli) watch(ctx context.Context, name string) int {
	// Operator.Watch retries failed reads, and logs each to its logger: a
	// failed read is a record that carries the error.
	failures := make(chan error, 1)
	e, err := election.NewOperator(c.db, name, election.Config{TablePrefix: c.prefix, Interval: c.interval, Logger: slog.New(readFailures(failures))})
	if err != nil {
		return c.fail(err)
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	events := e.Watch(ctx)
	p := watchPrinter{c: c, ended: map[uint64]bool{}}
	var (
		read    bool      // a read has succeeded: an event came
		failing time.Time // when reads started to fail; zero while they work
		retry   *time.Ticker
		tick    <-chan time.Time // retry's, while reads fail
	)
	defer func() {
		if retry != nil {
			retry.Stop()
		}
	}()
	recovered := func() {
		fmt.Fprintf(c.errOut, "electctl: watch: reading election %s works again (%s, after %v of failures); changes made meanwhile are printed next\n",
			shown(name), stamp(time.Now()), time.Since(failing).Round(time.Millisecond))
		failing, tick = time.Time{}, nil
		retry.Stop()
		select {
		case <-failures: // of a read that began before they worked again
		default:
		}
	}
	for {
		select {
		case ev, ok := <-events:
			if !ok {
				return exitOK
			}
			if !failing.IsZero() {
				recovered()
			}
			read = true
			p.print(ev)
		case err := <-failures:
			if ctx.Err() != nil {
				continue // the read was cut short by the interrupt
			}
			if !read && lasting(err) {
				cancel()
				for range events {
				}
				return c.fail(err)
			}
			if !failing.IsZero() {
				continue // said once already
			}
			failing = time.Now()
			line, _ := c.explain(err)
			fmt.Fprintf(c.errOut, "electctl: watch: reading election %s failed (%s): %s; retrying every %v, with a line here when reads work again\n",
				shown(name), stamp(failing), line, c.interval)
			// Watch says nothing when a read succeeds but what it sends, and
			// nothing may change for a long time: while reads fail,
			// electctl reads the same rows itself to see them work again.
			retry = time.NewTicker(c.interval)
			tick = retry.C
		case <-tick:
			rctx, rcancel := context.WithTimeout(ctx, c.timeout)
			_, err := e.History(rctx, 1) // the record and the last term, as Watch reads them
			rcancel()
			if err == nil && ctx.Err() == nil {
				recovered()
			}
		}
	}
}

// lasting reports whether a failed read will fail the same way until
// someone acts: retrying cannot fix it.
func lasting(err error) bool {
	return errors.Is(err, election.ErrSchema) || errors.Is(err, election.ErrAccessDenied) || errors.Is(err, election.ErrInvalidConfig) || denied(err)
}

// readFailures is the slog handler of the Operator that watch reads with:
// every record at Warn or above is a failed read, sent to the channel with
// its error when the channel has room (watch wants to know that reads
// fail, not each failure).
type readFailures chan<- error

func (h readFailures) Enabled(_ context.Context, l slog.Level) bool { return l >= slog.LevelWarn }

func (h readFailures) Handle(_ context.Context, r slog.Record) error {
	err := errors.New(r.Message)
	r.Attrs(func(a slog.Attr) bool {
		if e, ok := a.Value.Any().(error); ok {
			err = e
			return false
		}
		return true
	})
	select {
	case h <- err:
	default:
	}
	return nil
}

func (h readFailures) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h readFailures) WithGroup(string) slog.Handler      { return h }

// watchPrinter prints Watch's events, as lines or JSON.
type watchPrinter struct {
	c *cli
	// Watch sends a term's end again when its leader later writes its own
	// account (see Event): that line is marked revised, and says who leads
	// now rather than "no leader" when a later term has started.
	newest election.Event // the latest start seen, and whether it has ended
	ended  map[uint64]bool
}

func (p *watchPrinter) print(ev election.Event) {
	c := p.c
	revised := !ev.Leading && ev.Token != 0 && p.ended[ev.Token]
	if !ev.Leading && ev.Token != 0 {
		p.ended[ev.Token] = true
	}
	switch {
	case ev.Leading:
		p.newest = ev
	case ev.Token != 0 && ev.Token >= p.newest.Token:
		p.newest.Leading = false
	}
	if c.json {
		c.writeJSON(map[string]any{"token": ev.Token, "leader": ev.Identity, "leading": ev.Leading, "reason": ev.Reason, "at": jsonTime(ev.At), "revised": revised}, "")
		return
	}
	switch {
	case ev.Leading:
		fmt.Fprintf(c.out, "%s  term %d started: %s leads\n", stamp(ev.At), ev.Token, shown(ev.Identity))
	case ev.Token == 0:
		fmt.Fprintf(c.out, "%s  no leader: the election has had no term\n", stamp(time.Now()))
	default:
		now := "no leader"
		if p.newest.Leading {
			now = fmt.Sprintf("%s leads (term %d)", shown(p.newest.Identity), p.newest.Token)
		}
		mark := ""
		if revised {
			mark = ", revised"
		}
		fmt.Fprintf(c.out, "%s  term %d of %s ended (%s)%s: %s\n", stamp(ev.At), ev.Token, shown(ev.Identity), shown(ev.Reason), mark, now)
	}
}

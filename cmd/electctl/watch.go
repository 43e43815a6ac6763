package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/sqlelect/election"
)

// watchHelp follows watch's flags in its help.
const watchHelp = `
Prints who leads now, then every term's start and end, in order, and each
new value a leader proclaims, until interrupted. If its reads fail before
one has succeeded for a reason that retrying cannot fix (tables missing, a
login or grant refused), it exits at once: 4 not found, 5 refused. Later it
retries them: one line on stderr when reads start to fail, with the error,
and one when they work again; the changes made meanwhile follow.
`

// watch prints every change of leader of election name until interrupted.
// It exits at once, with the code fail gives, when its reads fail before
// the first succeeded for a reason that retrying cannot fix (tables or
// database missing, a login or grant refused); later it says on stderr
// when reads start to fail, once, and when they work again.
func (c *cli) watch(ctx context.Context, name string) int {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	// Operator.Watch retries failed reads, and logs when they start to fail
	// (WARN, with the error) and when they work again (INFO).
	reads := make(chan error)
	e, err := election.NewOperator(c.db, name, election.Config{TablePrefix: c.prefix, Interval: c.interval, Logger: slog.New(readLog{ctx, reads})})
	if err != nil {
		return c.fail(err)
	}
	events := e.Watch(ctx)
	p := watchPrinter{c: c, ended: map[uint64]bool{}}
	var (
		read    bool      // a read has succeeded: an event came
		failing time.Time // when reads started to fail; zero while they work
	)
	recovered := func() {
		fmt.Fprintf(c.errOut, "electctl: watch: reading election %s works again (%s, after %v of failures)\n",
			shown(name), stamp(time.Now()), time.Since(failing).Round(time.Millisecond))
		failing = time.Time{}
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
		case err := <-reads:
			switch {
			case ctx.Err() != nil: // the read was cut short by the interrupt
			case err == nil:
				if !failing.IsZero() {
					recovered()
				}
			case !read && lasting(err):
				cancel()
				for range events {
				}
				return c.fail(err)
			case failing.IsZero():
				failing = time.Now()
				line, _ := c.explain(err)
				fmt.Fprintf(c.errOut, "electctl: watch: reading election %s failed (%s): %s; retrying every %v, with a line here when reads work again\n",
					shown(name), stamp(failing), line, c.interval)
			}
		}
	}
}

// lasting reports whether a failed read will fail the same way until
// someone acts: retrying cannot fix it.
func lasting(err error) bool {
	return errors.Is(err, election.ErrSchema) || errors.Is(err, election.ErrAccessDenied) || errors.Is(err, election.ErrInvalidConfig) || denied(err)
}

// readLog is the slog handler of the Operator that watch reads with: Watch
// logs a WARN, with the error, when its reads start to fail, and an INFO
// when they work again; each goes to the channel as the error, or nil,
// until ctx ends.
type readLog struct {
	ctx   context.Context
	reads chan<- error
}

func (h readLog) Enabled(_ context.Context, l slog.Level) bool { return l >= slog.LevelInfo }

func (h readLog) Handle(_ context.Context, r slog.Record) error {
	if !strings.HasPrefix(r.Message, "watch: ") {
		return nil // not about Watch's reads
	}
	var err error
	if r.Level >= slog.LevelWarn {
		err = errors.New(r.Message)
		r.Attrs(func(a slog.Attr) bool {
			if e, ok := a.Value.Any().(error); ok {
				err = e
				return false
			}
			return true
		})
	}
	select {
	case h.reads <- err:
	case <-h.ctx.Done():
	}
	return nil
}

func (h readLog) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h readLog) WithGroup(string) slog.Handler      { return h }

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
	// Watch sends a term's start again when its leader proclaims a new value.
	proclaimed := ev.Leading && p.newest.Leading && ev.Token == p.newest.Token
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
		c.writeJSON(map[string]any{"token": ev.Token, "leader": ev.Identity, "leading": ev.Leading, "value": ev.Value, "reason": ev.Reason,
			"at": jsonTime(ev.At), "revised": revised}, "")
		return
	}
	switch {
	case proclaimed:
		fmt.Fprintf(c.out, "%s  term %d: %s proclaims %s\n", stamp(time.Now()), ev.Token, shown(ev.Identity), shownOrDash(ev.Value))
	case ev.Leading:
		value := ""
		if ev.Value != "" {
			value = " (value " + shown(ev.Value) + ")"
		}
		fmt.Fprintf(c.out, "%s  term %d started: %s leads%s\n", stamp(ev.At), ev.Token, shown(ev.Identity), value)
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

// Package electiongocron adapts github.com/sqlelect/election to gocron v2
// (github.com/go-co-op/gocron/v2): an Elector for
// gocron.WithDistributedElector, under which only the leader's scheduler
// runs jobs, and a Locker for gocron.WithDistributedLocker, under which
// each run of a job takes an election of its own, named after the job.
//
// It is a module of its own, so that gocron never becomes a dependency of
// the election module.
//
// gocron asks the Elector (or the Locker) only before a run starts, and
// never stops a running job when leadership is lost: a job that must stop
// with the term, or fence its writes, takes the term from Elector.Term or
// its context from Elector.JobContext.
package electiongocron

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"sync"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/go-co-op/gocron/v2"

	"github.com/sqlelect/election"
)

// ErrNotLeader is what Elector.IsLeader returns when this instance does not
// lead, so that gocron skips the run.
var ErrNotLeader = errors.New("electiongocron: not the leader")

// ErrClosed is returned by Locker.Lock after Close.
var ErrClosed = errors.New("electiongocron: closed")

var (
	_ gocron.Elector = (*Elector)(nil)
	_ gocron.Locker  = (*Locker)(nil)
)

// Elector is a gocron.Elector: NewElector runs an election.Elector in the
// background (its Run), and IsLeader answers from that candidate's local
// lease, without a round trip to the server.
type Elector struct {
	e      *election.Elector
	cancel context.CancelFunc
	done   chan struct{}

	mu   sync.Mutex
	term *election.Term
	err  error // Run's result, once it returned
}

// NewElector starts campaigning with e in the background until Close. e
// must not campaign otherwise (Run, Campaign or TryRun) meanwhile. Run
// retries failed campaigns with backoff; an error that retrying cannot fix
// (election.ErrAccessDenied, ErrSchema, ErrInvalidConfig) ends it, and
// IsLeader returns it, wrapped with ErrNotLeader, from then on.
func NewElector(e *election.Elector) *Elector {
	ctx, cancel := context.WithCancel(context.Background())
	g := &Elector{e: e, cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(g.done)
		err := e.Run(ctx, func(ctx context.Context, t *election.Term) error {
			g.setTerm(t)
			defer g.setTerm(nil)
			<-ctx.Done() // the term ended, or Close
			return context.Cause(ctx)
		})
		g.mu.Lock()
		g.err = err
		g.mu.Unlock()
	}()
	return g
}

func (g *Elector) setTerm(t *election.Term) {
	g.mu.Lock()
	g.term = t
	g.mu.Unlock()
}

// IsLeader returns nil while this instance holds a term whose local lease
// is valid, and an error wrapping ErrNotLeader otherwise. It sends nothing
// to the server. ctx is not used.
func (g *Elector) IsLeader(context.Context) error {
	if g.e.IsLeader() {
		return nil
	}
	g.mu.Lock()
	err := g.err
	g.mu.Unlock()
	if err != nil {
		return fmt.Errorf("%w: %w", ErrNotLeader, err)
	}
	return ErrNotLeader
}

// Term returns the term this instance leads in, or nil. A job calls it
// when it starts: Token is its fencing token, Context ends when the term
// ends (gocron does not stop the job then), and Fenced makes a write that
// a newer term's leader has made stale fail with election.ErrFenced.
func (g *Elector) Term() *election.Term {
	g.mu.Lock()
	t := g.term
	g.mu.Unlock()
	if t == nil || !t.IsLeader() {
		return nil
	}
	return t
}

// JobContext returns a context derived from ctx that is also cancelled when
// the current term ends, for a job to stop its work with the term; its
// cause is then the term's Err. When this instance does not lead, the
// context is already cancelled, with cause ErrNotLeader. Call cancel when
// the job returns.
func (g *Elector) JobContext(ctx context.Context) (context.Context, context.CancelFunc) {
	c, cancel := context.WithCancelCause(ctx)
	t := g.Term()
	if t == nil {
		cancel(ErrNotLeader)
		return c, func() {}
	}
	stop := context.AfterFunc(t.Context(), func() {
		err := t.Err()
		if err == nil {
			err = ErrNotLeader
		}
		cancel(err)
	})
	return c, func() { stop(); cancel(context.Canceled) }
}

// Close stops campaigning: the term, if any, is resigned (call it once the
// scheduler has shut down, so that no job runs on), and this candidate's
// row is removed. It returns when that is done, or ctx's error when ctx
// ends first (the background work still finishes). It returns nil, or the
// error that had ended the campaign earlier.
func (g *Elector) Close(ctx context.Context) error {
	g.cancel()
	select {
	case <-g.done:
	case <-ctx.Done():
		return ctx.Err()
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.err != nil && !errors.Is(g.err, context.Canceled) {
		return g.err
	}
	return nil
}

// DefaultMinHold is the Locker's default minimum hold.
const DefaultMinHold = 5 * time.Second

// DefaultPrefix is put before a job's key to name its election.
const DefaultPrefix = "gocron:"

// maxNameBytes is the election module's limit for an election's name.
const maxNameBytes = 65535

// readableBytes is how much of a key that is too long, or not printable, is
// kept before its hash.
const readableBytes = 64

// LockerOption configures a Locker.
type LockerOption func(*Locker)

// WithMinHold sets how long a lock is held at least from the moment it was
// taken, even when the job and Unlock come sooner (ShedLock's
// lockAtLeastFor): schedulers whose clocks or timers fire a little apart
// then find the job held and skip it, instead of running it again once the
// first run is over. Make it longer than the schedulers can fire apart and
// shorter than the job's period. Default DefaultMinHold.
func WithMinHold(d time.Duration) LockerOption {
	return func(l *Locker) { l.minHold = d }
}

// WithPrefix sets what is put before a job's key to name its election.
// Default DefaultPrefix.
func WithPrefix(p string) LockerOption {
	return func(l *Locker) { l.prefix = p }
}

// Locker is a gocron.Locker: each Lock campaigns, without waiting, in the
// election named after the job (WithPrefix + key), and the run goes ahead
// only if it won. gocron's key is the job's name (WithName), else the
// function's name: give every job a name, the same on every instance.
type Locker struct {
	db      *sql.DB
	cfg     election.Config
	minHold time.Duration
	prefix  string

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu       sync.Mutex
	closed   bool
	electors map[string]*election.Elector
}

// NewLocker returns a Locker whose elections live in db, with cfg for each
// (one Elector per key, made on the key's first Lock). cfg is checked here
// as election.New checks it.
func NewLocker(db *sql.DB, cfg election.Config, opts ...LockerOption) (*Locker, error) {
	l := &Locker{db: db, cfg: cfg, minHold: DefaultMinHold, prefix: DefaultPrefix, electors: map[string]*election.Elector{}}
	for _, o := range opts {
		o(l)
	}
	if l.minHold < 0 {
		return nil, fmt.Errorf("%w: the minimum hold %v is negative", election.ErrInvalidConfig, l.minHold)
	}
	if _, err := election.New(db, ElectionName(l.prefix, "check"), cfg); err != nil {
		return nil, err
	}
	l.ctx, l.cancel = context.WithCancel(context.Background())
	return l, nil
}

// ElectionName returns the name of the election a Locker with prefix uses
// for key: prefix + key, unless that is longer than an election's name may
// be, or holds invalid UTF-8 or characters that are not printable; then the
// first 64 bytes of it, made printable, a '#', and the hex SHA-256 of the
// key.
func ElectionName(prefix, key string) string {
	name := prefix + key
	if len(name) <= maxNameBytes && printable(name) {
		return name
	}
	sum := sha256.Sum256([]byte(key))
	readable := []rune{}
	n := 0
	for _, r := range name {
		if !unicode.IsPrint(r) {
			r = '_'
		}
		if n+utf8.RuneLen(r) > readableBytes {
			break
		}
		n += utf8.RuneLen(r)
		readable = append(readable, r)
	}
	return string(readable) + "#" + hex.EncodeToString(sum[:])
}

func printable(s string) bool {
	if !utf8.ValidString(s) {
		return false
	}
	for _, r := range s {
		if !unicode.IsPrint(r) {
			return false
		}
	}
	return true
}

func (l *Locker) elector(name string) (*election.Elector, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return nil, ErrClosed
	}
	if e := l.electors[name]; e != nil {
		return e, nil
	}
	e, err := election.New(l.db, name, l.cfg)
	if err != nil {
		return nil, err
	}
	l.electors[name] = e
	return e, nil
}

// Lock campaigns for key's election without waiting (election.TryRun). It
// returns a Lock when this instance won, and an error wrapping
// election.ErrHeld when another candidate holds the election, which makes
// gocron skip the run; also election.ErrCampaigning when this Locker still
// holds key (a run, or its minimum hold, not over).
func (l *Locker) Lock(ctx context.Context, key string) (gocron.Lock, error) {
	e, err := l.elector(ElectionName(l.prefix, key))
	if err != nil {
		return nil, err
	}
	won := make(chan *election.Term, 1)
	release := make(chan struct{})
	result := make(chan error, 1)
	l.wg.Add(1)
	go func() {
		defer l.wg.Done()
		result <- e.TryRun(l.ctx, l.minHold, func(ctx context.Context, t *election.Term) error {
			won <- t
			select {
			case <-release:
			case <-ctx.Done():
			}
			return nil
		})
	}()
	lk := &lock{release: release}
	select {
	case t := <-won:
		lk.term = t
		return lk, nil
	case err := <-result:
		return nil, fmt.Errorf("electiongocron: lock %q: %w", key, err)
	case <-ctx.Done():
		lk.unlock()
		return nil, ctx.Err()
	}
}

// Close ends every term the Locker holds, minimum holds included, waits
// until they are resigned and the candidate rows removed, or ctx ends, and
// refuses Lock from then on.
func (l *Locker) Close(ctx context.Context) error {
	l.mu.Lock()
	l.closed = true
	l.mu.Unlock()
	l.cancel()
	done := make(chan struct{})
	go func() { l.wg.Wait(); close(done) }()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// lock is a gocron.Lock: one won term.
type lock struct {
	term    *election.Term
	release chan struct{}
	once    sync.Once
}

func (k *lock) unlock() { k.once.Do(func() { close(k.release) }) }

// Unlock releases the lock: the term is resigned once the minimum hold has
// passed since it began, in the background, so that Unlock returns at once.
// It returns the term's error when the term had ended before (its lease ran
// out, it was demoted, its session was lost): the job may have run on
// without it.
func (k *lock) Unlock(context.Context) error {
	err := k.term.Err()
	k.unlock()
	return err
}

package election

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"fmt"
	"log/slog"
	"math"
	"os"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"
)

// Defaults of the timing contract; see the package documentation.
const (
	DefaultInterval = time.Second
	DefaultLease    = 5 * time.Second
	DefaultMargin   = time.Second
)

// DefaultHistoryLimit is how many past terms each election keeps.
const DefaultHistoryLimit = 1000

// maxWaitTimeout is the largest wait_timeout the server accepts, in seconds.
const maxWaitTimeout = 31536000

// maxDuration bounds every timing, so that no relation between them
// overflows: a year, the longest wait_timeout a server accepts.
const maxDuration = maxWaitTimeout * time.Second

// maxIdentity is what the tables' identity columns hold, in characters.
const maxIdentity = 255

// maxValue and maxVersion bound a proclaimed value, in bytes, and a
// version, in characters, as their columns do.
const (
	maxValue   = 1024
	maxVersion = 64
)

// Strategy is how candidates hold an election.
type Strategy int

const (
	// Auto (the default) is settled at a candidate's first campaign, from
	// the server: GetLock where GET_LOCK holds for the whole server,
	// LeaseRow where it cannot hold an election (Galera, multi-primary
	// Group Replication, TiDB). The candidate logs which and why. Every
	// candidate on one server settles on the same.
	Auto Strategy = iota
	// GetLock pins one session per candidate and holds the election with
	// GET_LOCK: failover in milliseconds when a leader dies. A server whose
	// GET_LOCK cannot hold an election refuses it (ErrUnsupported).
	GetLock
	// LeaseRow holds the election with a lease in the record row, renewed
	// every Interval through the pool: no pinned session, so it works
	// through proxies and on Galera, multi-primary Group Replication and
	// TiDB, but a dead leader is replaced only after Lease+Margin.
	LeaseRow
)

// String returns the name stored in the record: "get_lock" or "lease"
// ("auto" for Auto, which is never stored).
func (s Strategy) String() string {
	switch s {
	case Auto:
		return "auto"
	case GetLock:
		return "get_lock"
	case LeaseRow:
		return "lease"
	}
	return fmt.Sprintf("Strategy(%d)", int(s))
}

// Config tunes an Elector or an Operator. The zero value of every field
// means its default. New checks the timings as a whole; see the package
// documentation for what they mean together.
type Config struct {
	// Strategy is Auto (default: the one the server supports), GetLock or
	// LeaseRow. Every candidate of an election must use the same one; a
	// candidate of another is refused with ErrStrategy while one is alive.
	Strategy Strategy
	// Identity names this candidate in the record, to operators and in
	// logs. Default: host-pid-random. At most 255 characters, printable
	// (no control, format or invisible characters), not ending in a space: the tables
	// compare identities ignoring trailing spaces. Give every candidate its
	// own.
	Identity string
	// Interval is how often the leader renews its keepalive, and how often
	// an Operator's Watch reads the election. Default 1s.
	Interval time.Duration
	// Lease is how long the leader may act after a keepalive it sent was
	// confirmed, on its local monotonic clock. Default 5s; at least
	// 2×Interval, so that one slow keepalive does not end a term.
	Lease time.Duration
	// Margin is how long after the lease ends the server may first free the
	// lock of a silent leader. Default 1s. It covers the leader's clock
	// running slow and the time its code takes to stop after its context is
	// cancelled.
	Margin time.Duration
	// CheckInterval is the shortest wait of the deputy, the one waiting
	// candidate that watches the leader for the others (GetLock), between
	// two looks for a leader that hangs or ignores a demotion (it looks
	// CheckInterval after the leader it read could first be overdue: about
	// every Lease + Margin + CheckInterval while one leads), and how often
	// a LeaseRow candidate tries the lease. Other GetLock waiters send nothing while they wait: they
	// block in GET_LOCK for up to an hour at a time. A DSN readTimeout
	// shorter than these waits cuts them, as it cuts any statement that
	// runs longer: a GetLock candidate learns it from the first two waits
	// it cuts, logs a WARN, and from then on waits in steps of half of it,
	// sending a statement per step. Default Interval; at most Lease.
	CheckInterval time.Duration
	// OwnSession keeps a GetLock candidate on a session of its own, which
	// blocks in GET_LOCK, so that its election fails over in milliseconds
	// however many elections the process is in. Without it the candidate
	// may share a session with the process's other elections on the pool,
	// and fail over at that session's tries (the package doc, "Sessions",
	// says which do; Candidate.Session shows it; the cost to plan for:
	// docs/operations.md, "Connections and cost to plan for").
	OwnSession bool
	// TablePrefix starts the table names. Default DefaultTablePrefix.
	TablePrefix string
	// SkipCreateTables stops the Elector from creating missing tables on
	// first use; see SchemaDDL.
	SkipCreateTables bool
	// HistoryLimit bounds the term history kept per election: each
	// candidate trims it to the newest HistoryLimit terms at its first term
	// and every 16th after, so it holds at most 16 more per candidate.
	// Default DefaultHistoryLimit.
	HistoryLimit int
	// Logger receives structured logs: terms started and ended (Info),
	// failed keepalives and campaigns (Warn), and at Debug what a waiting
	// candidate does (queued, became the deputy, whom it waits for: once
	// per leader, not per check). Default: none. The MySQL driver prints
	// its own faults to stderr, unstructured; route them to slog with
	// mysql.SetLogger before sql.Open, or per pool with the Logger of a
	// mysql.Config (docs/operations.md, "Logs"). The library leaves the driver's
	// logger, which is process-wide, to you.
	Logger *slog.Logger
	// Observer receives events, for metrics. Default: none. New and
	// NewOperator take its hooks as they are then: set them before.
	Observer *Observer

	// Value is what this candidate proclaims while it leads: an address
	// clients can dial, an endpoint, a version. Followers read it
	// (Elector.Leader, Operator.Leader, Watch, electctl status), and
	// RedirectToLeader sends their HTTP clients to it. A leader changes it
	// with Term.Proclaim. At most 1024 bytes of printable UTF-8.
	Value string
	// Priority ranks this candidate for leadership, higher first (default
	// 0). Whenever a term ends, a candidate that wins the election while a
	// live, healthy candidate of a higher priority waits gives it back, for
	// up to 2×(Interval + CheckInterval), so that the next term is the
	// highest's; equals never wait for each other. A candidate that joins
	// during a term moves the leader only where PreferAfter is set.
	Priority int32
	// Version is shown beside this candidate (Candidates, electctl), for
	// rolling deploys; it is not compared: to prefer a version, give it a
	// higher Priority. At most 64 printable characters.
	Version string
	// PreferAfter turns preferred leaders on: a leader whose term has
	// lasted PreferAfter hands over (as Operator.Handover does, lock-delay
	// and all) to the live, healthy candidate of the highest Priority above
	// its own that has campaigned for PreferAfter without a break. It looks
	// every PreferAfter/2, in one statement. A candidate that does not stay
	// PreferAfter never moves the leader, equals never do, and a leader
	// moves for priority at most once per PreferAfter. It is the leader's
	// setting: give every candidate the same. Default 0: never; else at
	// least Lease.
	PreferAfter time.Duration
	// Health is a check Run makes every Interval, with a context that ends
	// after Interval (a check still running then fails). After
	// HealthFailures failures in a row the candidate is unhealthy: a leader
	// resigns (its term ends "unhealthy", its function stopped first, as
	// on a demotion), and a waiting candidate stops campaigning, so it is
	// neither elected nor a hand-over target, until a check passes.
	// Default: none. Campaign and TryRun do not run it.
	Health func(ctx context.Context) error
	// HealthFailures is how many checks in a row must fail before the
	// candidate counts as unhealthy. Default 3.
	HealthFailures int
}

// Observer receives an Elector's events (and an Operator's kills), for
// metrics and tracing. Every field is optional. The functions are called
// synchronously from the goroutine that saw the event (the Elector's, or
// the one that called Operator.Demote): they must be fast and must not call
// the Elector or the Operator.
type Observer struct {
	// TermStarted: this candidate began a term. A term whose lease ran out
	// before Campaign could return it is reported too, and ends at once
	// (TermEnded).
	TermStarted func(election, identity string, token uint64)
	// TermEnded: the term ended; reason is as in TermRecord.Reason.
	TermEnded func(election, identity string, token uint64, reason string)
	// Failover: this candidate began a term that followed another, after
	// leaderless, on the database clock: the time since the last term's
	// last sign of life (its recorded end; for a leader that crashed or was
	// cut off, its last renewal, so an upper bound), or, for a GetLock term
	// started in one statement on the deputy's last look, the claim's round
	// trip: the last term's session had ended when the lock was won (the
	// server's noticing that end is not in it). A step of the server's
	// clock in between is in it. Not called for an election's first term.
	Failover func(election string, leaderless time.Duration)
	// Renewed: a keepalive finished after latency; err is nil if it was
	// confirmed.
	Renewed func(election string, latency time.Duration, err error)
	// Killed: this candidate (or Operator) killed (err nil) or failed to
	// kill the session of a stuck or disobedient leader; reason is
	// hang-killed or demote-killed.
	Killed func(election, reason string, err error)
	// CampaignFailed: a campaign under Run failed. Run retries it, or
	// returns err when retrying cannot fix it (see Run).
	CampaignFailed func(election string, err error)
	// HealthChecked: Run made a health check (Config.Health); err is nil
	// if it passed. healthy is what the candidate counts as after it.
	HealthChecked func(election string, healthy bool, err error)
	// Preempted: this leader asked to hand over to candidate to, of a
	// higher priority (Config.PreferAfter).
	Preempted func(election, to string)
	// Campaigning: this candidate joined the election's candidates, on
	// session, which says how it reaches the server (SessionOwn,
	// SessionShared or SessionPool, as Candidate.Session); once per
	// campaign.
	Campaigning func(election, session string)
	// Running: Run began (running true, err nil), or returned (running
	// false), once for each start: with err nil when it was asked to (its
	// context ended, or its function returned ErrStop) or found another Run
	// of the Elector under way (ErrCampaigning), else with the error it
	// returned, one retrying cannot fix (see Run), after which this
	// candidate campaigns no more until Run is called again. TryRun and
	// Campaign do not report it.
	Running func(election string, running bool, err error)
}

// The hooks, each a no-op where its field is nil.

func (o *Observer) termStarted(election, identity string, token uint64) {
	if o.TermStarted != nil {
		o.TermStarted(election, identity, token)
	}
}

func (o *Observer) failover(election string, leaderless time.Duration) {
	if o.Failover != nil {
		o.Failover(election, leaderless)
	}
}

func (o *Observer) termEnded(election, identity string, token uint64, reason string) {
	if o.TermEnded != nil {
		o.TermEnded(election, identity, token, reason)
	}
}

func (o *Observer) renewed(election string, latency time.Duration, err error) {
	if o.Renewed != nil {
		o.Renewed(election, latency, err)
	}
}

func (o *Observer) killed(election, reason string, err error) {
	if o.Killed != nil {
		o.Killed(election, reason, err)
	}
}

func (o *Observer) campaignFailed(election string, err error) {
	if o.CampaignFailed != nil {
		o.CampaignFailed(election, err)
	}
}

func (o *Observer) healthChecked(election string, healthy bool, err error) {
	if o.HealthChecked != nil {
		o.HealthChecked(election, healthy, err)
	}
}

func (o *Observer) preempted(election, to string) {
	if o.Preempted != nil {
		o.Preempted(election, to)
	}
}

func (o *Observer) campaigning(election, session string) {
	if o.Campaigning != nil {
		o.Campaigning(election, session)
	}
}

func (o *Observer) running(election string, running bool, err error) {
	if o.Running != nil {
		o.Running(election, running, err)
	}
}

// waitTimeout is the pinned sessions' wait_timeout W, in whole seconds.
func (c Config) waitTimeout() int64 {
	return int64(math.Ceil((c.Lease + c.Margin).Seconds()))
}

// tryLimit bounds one try to take the election (a term start, or a lease
// try), 2W: a statement sent into a network partition gives up, yet one
// that waits behind a row lock lasts as long as a pinned session's lock
// waits (innodb_lock_wait_timeout = 2W).
func (c Config) tryLimit() time.Duration {
	return 2 * time.Duration(c.waitTimeout()) * time.Second
}

// targetHold is how long the others give an election back to a candidate
// it is meant for (a shard's hand-over target, a waiting candidate of
// higher priority): time for it to see the lock free and take it, its next
// poll or a walk of the queue, and room for a slow round trip. Should it die
// meanwhile, the others stop giving the election back soon.
func (c Config) targetHold() time.Duration { return 2 * (c.Interval + c.CheckInterval) }

// heartbeatPeriod is how often a LeaseRow candidate refreshes its row: at
// most once per lease, so that waiting costs almost nothing. (A GetLock
// candidate's liveness is its candidate lock; it writes its row once.)
func (c Config) heartbeatPeriod() time.Duration { return c.Lease }

func (c Config) withDefaults() Config {
	if c.Interval == 0 {
		c.Interval = DefaultInterval
	}
	if c.Lease == 0 {
		c.Lease = DefaultLease
	}
	if c.Margin == 0 {
		c.Margin = DefaultMargin
	}
	if c.CheckInterval == 0 {
		c.CheckInterval = c.Interval
	}
	if c.TablePrefix == "" {
		c.TablePrefix = DefaultTablePrefix
	}
	if c.HistoryLimit == 0 {
		c.HistoryLimit = DefaultHistoryLimit
	}
	if c.HealthFailures == 0 {
		c.HealthFailures = 3
	}
	if c.Identity == "" {
		c.Identity = defaultIdentity()
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.Observer == nil {
		c.Observer = &Observer{}
	}
	return c
}

func (c Config) validate() error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: "+format, append([]any{ErrInvalidConfig}, args...)...)
	}
	for _, d := range []struct {
		field string
		value time.Duration
	}{{"Interval", c.Interval}, {"Lease", c.Lease}, {"Margin", c.Margin}, {"CheckInterval", c.CheckInterval}, {"PreferAfter", c.PreferAfter}} {
		if d.value > maxDuration {
			return bad("%s %v exceeds %v, the longest wait_timeout a server accepts (Lease+Margin must fit in it)", d.field, d.value, maxDuration)
		}
	}
	if err := validIdentity(c.Identity); err != nil {
		return err
	}
	if err := validValue(c.Value); err != nil {
		return err
	}
	// Every value is at most a year now, so no sum or product below
	// overflows.
	switch {
	case c.Interval < time.Millisecond:
		return bad("Interval %v is below 1ms: keepalives that often would load the server; use 100ms or more", c.Interval)
	case c.Lease < 2*c.Interval:
		return bad("Lease %v must be at least 2×Interval (%v), so that one slow keepalive does not end the term: raise Lease or lower Interval", c.Lease, c.Interval)
	case c.Margin < time.Millisecond:
		return bad("Margin %v is below 1ms: it must cover clock drift and the time your code takes to stop; the default is %v", c.Margin, DefaultMargin)
	case c.CheckInterval < time.Millisecond:
		return bad("CheckInterval %v is below 1ms", c.CheckInterval)
	case c.CheckInterval > c.Lease:
		// Waiters check for hung leaders and refresh their rows between
		// waits: longer than the lease, dead candidates look alive and a
		// hung leader goes unnoticed.
		return bad("CheckInterval %v is longer than Lease %v: the deputy would look for hung leaders too rarely; lower it (default: Interval)", c.CheckInterval, c.Lease)
	case c.waitTimeout() > maxWaitTimeout:
		return bad("Lease+Margin %v exceeds what the server's wait_timeout can express (%ds)", c.Lease+c.Margin, maxWaitTimeout)
	case c.HistoryLimit < 1:
		return bad("HistoryLimit %d must be at least 1", c.HistoryLimit)
	case c.PreferAfter != 0 && c.PreferAfter < c.Lease:
		return bad("PreferAfter %v is shorter than Lease %v: a candidate that came and went within a lease could move the leader; use Lease or more, or 0 to never move a leader for priority", c.PreferAfter, c.Lease)
	case c.HealthFailures < 1:
		return bad("HealthFailures %d must be at least 1", c.HealthFailures)
	case !utf8.ValidString(c.Version) || utf8.RuneCountInString(c.Version) > maxVersion || !printable(c.Version):
		return bad("Version %q must be at most %d printable characters", c.Version, maxVersion)
	case c.Strategy != Auto && c.Strategy != GetLock && c.Strategy != LeaseRow:
		return bad("Strategy %v is unknown: leave it unset, or use election.GetLock or election.LeaseRow", c.Strategy)
	}
	return validatePrefix(c.TablePrefix)
}

// checked validates what New and NewOperator are given, and returns cfg
// with its defaults.
func checked(db *sql.DB, name string, cfg Config) (Config, error) {
	if db == nil {
		return cfg, fmt.Errorf("%w: db is nil", ErrInvalidConfig)
	}
	if err := validateName(name); err != nil {
		return cfg, err
	}
	cfg = cfg.withDefaults()
	return cfg, cfg.validate()
}

// validIdentity refuses an identity the tables would confuse with another
// or that would garble what operators read.
func validIdentity(id string) error {
	bad := func(why string) error {
		return fmt.Errorf("%w: Identity %q %s", ErrInvalidConfig, id, why)
	}
	switch {
	case !utf8.ValidString(id):
		return bad("is not valid UTF-8")
	case utf8.RuneCountInString(id) > maxIdentity:
		return bad(fmt.Sprintf("is %d characters long; the limit is %d", utf8.RuneCountInString(id), maxIdentity))
	case strings.HasSuffix(id, " "):
		return bad("ends in a space, which the tables ignore when they compare identities: \"a \" and \"a\" would be one candidate; remove it")
	case !printable(id):
		return bad("holds control, format or invisible characters, which would garble what operators read; use printable characters")
	}
	return nil
}

// validValue refuses a value (Config.Value, Term.Proclaim) the record
// cannot hold or that would garble what operators read.
func validValue(v string) error {
	switch {
	case len(v) > maxValue:
		return fmt.Errorf("%w: the value is %d bytes long; the limit is %d", ErrInvalidConfig, len(v), maxValue)
	case !utf8.ValidString(v) || !printable(v):
		return fmt.Errorf("%w: the value %q is not printable UTF-8 (control, format or invisible characters would garble what operators read)", ErrInvalidConfig, v)
	}
	return nil
}

// defaultIdentity is host-pid-random, with anything in the host name that
// validIdentity would refuse replaced: a default must never fail New.
func defaultIdentity() string {
	host, _ := os.Hostname()
	host = strings.Map(func(r rune) rune {
		if !unicode.IsGraphic(r) || r == ' ' {
			return '_'
		}
		return r
	}, strings.ToValidUTF8(host, "_"))
	if n := []rune(host); len(n) > 200 {
		host = string(n[:200])
	}
	b := make([]byte, 3)
	rand.Read(b)
	return fmt.Sprintf("%s-%d-%s", host, os.Getpid(), hex.EncodeToString(b))
}

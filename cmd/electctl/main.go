// Command electctl shows and steers the leader elections of a MySQL or
// MariaDB database: who leads and since when, who else is in the race, the
// history of terms, and forced re-elections and hand-overs.
//
// Usage:
//
//	electctl [flags] status [NAME]          who leads (every election without NAME)
//	electctl [flags] watch NAME             print every change of leader until interrupted
//	electctl [flags] history NAME           past terms, newest first
//	electctl [flags] candidates NAME        who is in the race
//	electctl [flags] demote NAME            force a re-election
//	electctl [flags] handover NAME ID       hand leadership to the live candidate ID
//	electctl [flags] check NAME ID          exit 0 if ID leads: a leader check for load balancers
//	electctl [flags] schema                 print the tables' DDL
//
// Flags (before or after the command): --dsn (default $ELECTION_DSN),
// --prefix, --json, --timeout, --limit (history), --interval (watch). Exit codes: 0 done,
// 1 error, 2 usage, 3 no leader, 4 election or tables not found,
// 5 refused, 6 another candidate leads.
package main

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/sqlelect/election"
)

// Exit codes.
const (
	exitOK        = 0
	exitError     = 1
	exitUsage     = 2
	exitNoLeader  = 3
	exitNotFound  = 4
	exitRefused   = 5
	exitNotLeader = 6
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

const usage = `usage: electctl [flags] COMMAND [ARGS]

commands:
  status [NAME]          who leads (every election without NAME)
  watch NAME             print every change of leader until interrupted
  history NAME           past terms, newest first
  candidates NAME        who is in the race
  demote NAME            force a re-election
  handover NAME ID       hand leadership to the live candidate ID
  check NAME ID          exit 0 if ID leads, 6 if another does, 3 if none
  schema                 print the tables' DDL

exit codes: 0 done, 1 error, 2 usage, 3 no leader, 4 not found, 5 refused, 6 another leads
run "electctl COMMAND --help" for a command's flags
`

// commands: name -> positional arguments (a trailing ? marks optional).
var commands = map[string][]string{
	"status": {"NAME?"}, "watch": {"NAME"}, "history": {"NAME"}, "candidates": {"NAME"},
	"demote": {"NAME"}, "handover": {"NAME", "ID"}, "check": {"NAME", "ID"}, "schema": nil,
}

type cli struct {
	out, errOut io.Writer
	dsn         string
	prefix      string
	json        bool
	timeout     time.Duration
	limit       int
	interval    time.Duration
	db          *sql.DB
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	c := &cli{out: stdout, errOut: stderr}
	// Flags may come before or after the command.
	cmd, rest := "", []string(nil)
	for i, a := range args {
		if _, ok := commands[a]; ok {
			cmd, rest = a, append(append([]string{}, args[:i]...), args[i+1:]...)
			break
		}
	}
	if cmd == "" {
		if len(args) > 0 && (args[0] == "-h" || args[0] == "--help" || args[0] == "help") {
			fmt.Fprint(stdout, usage)
			return exitOK
		}
		fmt.Fprint(stderr, usage)
		return exitUsage
	}
	fs := flag.NewFlagSet("electctl "+cmd, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&c.dsn, "dsn", os.Getenv("ELECTION_DSN"), "the database, as user:pass@tcp(host:3306)/dbname (default $ELECTION_DSN)")
	fs.StringVar(&c.prefix, "prefix", election.DefaultTablePrefix, "the tables' prefix")
	fs.BoolVar(&c.json, "json", false, "print JSON instead of tables")
	fs.DurationVar(&c.timeout, "timeout", 30*time.Second, "give up after this long (not for watch)")
	switch cmd {
	case "history":
		fs.IntVar(&c.limit, "limit", 20, "how many terms")
	case "watch":
		fs.DurationVar(&c.interval, "interval", 250*time.Millisecond, "how often to read the election (at most 2.5s)")
	}
	fs.Usage = func() {
		fmt.Fprintf(stderr, "usage: electctl %s [flags] %s\n\nflags:\n", cmd, strings.ReplaceAll(strings.Join(commands[cmd], " "), "?", " (optional)"))
		fs.PrintDefaults()
	}
	var pos []string
	for {
		if err := fs.Parse(rest); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return exitOK
			}
			return exitUsage
		}
		if fs.NArg() == 0 {
			break
		}
		pos, rest = append(pos, fs.Arg(0)), fs.Args()[1:]
	}
	want := commands[cmd]
	required := 0
	for _, w := range want {
		if !strings.HasSuffix(w, "?") {
			required++
		}
	}
	if len(pos) < required || len(pos) > len(want) {
		fs.Usage()
		return exitUsage
	}
	if cmd == "schema" {
		return c.schema()
	}
	if c.dsn == "" {
		fmt.Fprintln(stderr, "electctl: no database: pass --dsn user:pass@tcp(host:3306)/dbname or set ELECTION_DSN")
		return exitUsage
	}
	cfg, err := mysql.ParseDSN(c.dsn)
	if err != nil {
		fmt.Fprintf(stderr, "electctl: --dsn is not a valid DSN: %v\n", err)
		return exitUsage
	}
	if cfg.DBName == "" {
		fmt.Fprintf(stderr, "electctl: the DSN %s names no database; add /dbname\n", redact(cfg))
		return exitUsage
	}
	c.db, err = sql.Open("mysql", c.dsn)
	if err != nil {
		fmt.Fprintf(stderr, "electctl: %v\n", err)
		return exitError
	}
	defer c.db.Close()
	if cmd != "watch" {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, c.timeout)
		defer cancel()
	}
	if err := c.db.PingContext(ctx); err != nil {
		fmt.Fprintf(stderr, "electctl: cannot reach %s: %v\n", redact(cfg), err)
		return exitError
	}
	switch cmd {
	case "status":
		if len(pos) == 0 {
			return c.statusAll(ctx)
		}
		return c.status(ctx, pos[0])
	case "watch":
		return c.watch(ctx, pos[0])
	case "history":
		return c.history(ctx, pos[0])
	case "candidates":
		return c.candidates(ctx, pos[0])
	case "demote":
		return c.demote(ctx, pos[0], "")
	case "handover":
		return c.demote(ctx, pos[0], pos[1])
	case "check":
		return c.check(ctx, pos[0], pos[1])
	}
	return exitUsage
}

// redact prints a DSN without its password.
func redact(cfg *mysql.Config) string {
	cfg = cfg.Clone()
	if cfg.Passwd != "" {
		cfg.Passwd = "xxxxx"
	}
	return cfg.FormatDSN()
}

// operator reads and steers the election; it never campaigns.
func (c *cli) operator(name string) (*election.Operator, error) {
	return election.NewOperator(c.db, name, election.Config{TablePrefix: c.prefix, Interval: c.interval})
}

// fail prints err and maps it to an exit code.
func (c *cli) fail(err error) int {
	fmt.Fprintf(c.errOut, "electctl: %v\n", err)
	switch {
	case errors.Is(err, election.ErrNoLeader):
		return exitNoLeader
	case errors.Is(err, election.ErrSchema):
		return exitNotFound
	case errors.Is(err, election.ErrNotCandidate), errors.Is(err, election.ErrKillDenied):
		return exitRefused
	case errors.Is(err, election.ErrInvalidConfig):
		return exitUsage
	}
	return exitError
}

func (c *cli) printJSON(v any) int {
	enc := json.NewEncoder(c.out)
	enc.SetIndent("", "  ")
	if err := enc.Encode(v); err != nil {
		return c.fail(err)
	}
	return exitOK
}

func (c *cli) table(header string, rows [][]string) {
	w := tabwriter.NewWriter(c.out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, header)
	for _, r := range rows {
		fmt.Fprintln(w, strings.Join(r, "\t"))
	}
	w.Flush()
}

func stamp(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.UTC().Format("2006-01-02 15:04:05.000Z")
}

func ago(d time.Duration) string { return d.Round(time.Millisecond).String() + " ago" }

// recordView is the JSON form of a record.
type recordView struct {
	Election     string  `json:"election"`
	Strategy     string  `json:"strategy"`
	Leading      bool    `json:"leading"`
	State        string  `json:"state"`
	Leader       string  `json:"leader"`
	Host         string  `json:"host"`
	PID          int     `json:"pid"`
	Token        uint64  `json:"token"`
	Since        string  `json:"since"`
	RenewedAgoMS float64 `json:"renewed_ago_ms"`
	ExpiryMS     float64 `json:"expiry_ms"`
	ConnID       uint64  `json:"conn_id"`
	LockConnID   uint64  `json:"lock_conn_id"`
	Demoting     bool    `json:"demotion_pending"`
	HandoverTo   string  `json:"handover_to,omitempty"`
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

func view(r election.Record) recordView {
	return recordView{
		Election: r.Name, Strategy: r.Strategy, Leading: r.Leading(), State: r.State, Leader: r.Identity, Host: r.Host, PID: r.PID,
		Token: r.Token, Since: stamp(r.Since), RenewedAgoMS: ms(r.RenewedAgo), ExpiryMS: ms(r.Expiry),
		ConnID: r.ConnID, LockConnID: r.LockConnID, Demoting: r.DemotedAgo > 0, HandoverTo: r.HandoverTo,
	}
}

// lockState says whether the lock is held by the recorded session.
func lockState(r election.Record) string {
	switch {
	case r.Strategy == election.LeaseRow.String():
		return "not used (lease)"
	case r.LockConnID == 0:
		return "free"
	case r.LockConnID == r.ConnID:
		return fmt.Sprintf("held by session %d (recorded)", r.LockConnID)
	}
	return fmt.Sprintf("held by session %d (not the recorded %d)", r.LockConnID, r.ConnID)
}

func (c *cli) statusAll(ctx context.Context) int {
	recs, err := election.Elections(ctx, c.db, c.prefix)
	if err != nil {
		return c.fail(err)
	}
	if c.json {
		views := []recordView{}
		for _, r := range recs {
			views = append(views, view(r))
		}
		return c.printJSON(views)
	}
	var rows [][]string
	for _, r := range recs {
		leader, state := r.Identity, r.State
		if !r.Leading() {
			leader = "(none)"
			if r.State == "leading" {
				state = "stale"
			}
		}
		rows = append(rows, []string{r.Name, r.Strategy, leader, fmt.Sprint(r.Token), state, stamp(r.Since), ago(r.RenewedAgo), lockState(r)})
	}
	c.table("ELECTION\tSTRATEGY\tLEADER\tTOKEN\tSTATE\tSINCE\tRENEWED\tLOCK", rows)
	return exitOK
}

func (c *cli) status(ctx context.Context, name string) int {
	e, err := c.operator(name)
	if err != nil {
		return c.fail(err)
	}
	r, err := e.Leader(ctx)
	if errors.Is(err, election.ErrNoLeader) && r.Token == 0 {
		fmt.Fprintf(c.errOut, "electctl: election %q not found: it has had no term\n", name)
		return exitNotFound
	}
	if err != nil && !errors.Is(err, election.ErrNoLeader) {
		return c.fail(err)
	}
	code := exitOK
	if !r.Leading() {
		code = exitNoLeader
	}
	if c.json {
		c.printJSON(view(r))
		return code
	}
	w := tabwriter.NewWriter(c.out, 0, 4, 2, ' ', 0)
	if r.Leading() {
		fmt.Fprintf(w, "election:\t%s\nstrategy:\t%s\nleader:\t%s (host %s, pid %d)\ntoken:\t%d\nsince:\t%s\nrenewed:\t%s (expires after %v)\nlock:\t%s\n",
			r.Name, r.Strategy, r.Identity, r.Host, r.PID, r.Token, stamp(r.Since), ago(r.RenewedAgo), r.Expiry, lockState(r))
		if r.DemotedAgo > 0 {
			fmt.Fprintf(w, "demotion:\trequested %s", ago(r.DemotedAgo))
			if r.HandoverTo != "" {
				fmt.Fprintf(w, ", hand-over to %s", r.HandoverTo)
			}
			fmt.Fprintln(w)
		}
	} else {
		fmt.Fprintf(w, "election:\t%s\nstrategy:\t%s\nleader:\tnone\nlast term:\t%d, %s (host %s), %s\nended:\t%s\nlock:\t%s\n",
			r.Name, r.Strategy, r.Token, r.Identity, r.Host, r.State, stamp(r.Ended), lockState(r))
	}
	w.Flush()
	return code
}

func (c *cli) watch(ctx context.Context, name string) int {
	e, err := c.operator(name)
	if err != nil {
		return c.fail(err)
	}
	enc := json.NewEncoder(c.out)
	for ev := range e.Watch(ctx) {
		if c.json {
			enc.Encode(map[string]any{"token": ev.Token, "leader": ev.Identity, "leading": ev.Leading, "reason": ev.Reason, "at": stamp(ev.At)})
			continue
		}
		switch {
		case ev.Leading:
			fmt.Fprintf(c.out, "%s  term %d started: %s leads\n", stamp(ev.At), ev.Token, ev.Identity)
		case ev.Token == 0:
			fmt.Fprintf(c.out, "%s  no leader: the election has had no term\n", stamp(time.Now()))
		default:
			fmt.Fprintf(c.out, "%s  term %d of %s ended (%s): no leader\n", stamp(ev.At), ev.Token, ev.Identity, ev.Reason)
		}
	}
	return exitOK
}

func (c *cli) history(ctx context.Context, name string) int {
	e, err := c.operator(name)
	if err != nil {
		return c.fail(err)
	}
	hist, err := e.History(ctx, c.limit)
	if err != nil {
		return c.fail(err)
	}
	if len(hist) == 0 {
		fmt.Fprintf(c.errOut, "electctl: election %q not found: it has had no term\n", name)
		return exitNotFound
	}
	if c.json {
		type termView struct {
			Token    uint64 `json:"token"`
			Leader   string `json:"leader"`
			Host     string `json:"host"`
			PID      int    `json:"pid"`
			Started  string `json:"started"`
			Ended    string `json:"ended"`
			Reason   string `json:"reason"`
			Duration string `json:"duration"`
		}
		views := []termView{}
		for _, t := range hist {
			views = append(views, termView{t.Token, t.Identity, t.Host, t.PID, stamp(t.Started), stamp(t.Ended), t.Reason, duration(t)})
		}
		return c.printJSON(views)
	}
	var rows [][]string
	for _, t := range hist {
		reason := t.Reason
		if reason == "" {
			reason = "(leading)"
		}
		rows = append(rows, []string{fmt.Sprint(t.Token), t.Identity, t.Host, fmt.Sprint(t.PID), stamp(t.Started), stamp(t.Ended), duration(t), reason})
	}
	c.table("TOKEN\tLEADER\tHOST\tPID\tSTARTED\tENDED\tLASTED\tREASON", rows)
	return exitOK
}

func duration(t election.TermRecord) string {
	if t.Ended.IsZero() {
		return "-"
	}
	return t.Ended.Sub(t.Started).Round(time.Millisecond).String()
}

func (c *cli) candidates(ctx context.Context, name string) int {
	e, err := c.operator(name)
	if err != nil {
		return c.fail(err)
	}
	cs, err := e.Candidates(ctx)
	if err != nil {
		return c.fail(err)
	}
	if len(cs) == 0 {
		fmt.Fprintf(c.errOut, "electctl: election %q has no candidates\n", name)
		return exitNotFound
	}
	if c.json {
		type candView struct {
			Identity  string  `json:"identity"`
			Host      string  `json:"host"`
			PID       int     `json:"pid"`
			Since     string  `json:"since"`
			SeenAgoMS float64 `json:"seen_ago_ms"`
			Alive     bool    `json:"alive"`
			Leader    bool    `json:"leader"`
		}
		views := []candView{}
		for _, k := range cs {
			views = append(views, candView{k.Identity, k.Host, k.PID, stamp(k.Since), ms(k.SeenAgo), k.Alive, k.Leader})
		}
		return c.printJSON(views)
	}
	var rows [][]string
	for _, k := range cs {
		role := "candidate"
		switch {
		case k.Leader:
			role = "leader"
		case !k.Alive:
			role = "dead"
		}
		rows = append(rows, []string{k.Identity, role, k.Host, fmt.Sprint(k.PID), stamp(k.Since), ago(k.SeenAgo)})
	}
	c.table("CANDIDATE\tROLE\tHOST\tPID\tSINCE\tSEEN", rows)
	return exitOK
}

func (c *cli) demote(ctx context.Context, name, to string) int {
	e, err := c.operator(name)
	if err != nil {
		return c.fail(err)
	}
	before, err := e.Leader(ctx)
	if err != nil {
		return c.fail(err)
	}
	if to != "" && to == before.Identity {
		fmt.Fprintf(c.out, "%s leads already (token %d)\n", to, before.Token)
		return exitOK
	}
	var killed bool
	if to == "" {
		killed, err = e.Demote(ctx)
	} else {
		killed, err = e.Handover(ctx, to)
	}
	if err != nil {
		return c.fail(err)
	}
	// Wait for the next leader, so that the operator sees the outcome.
	var after election.Record
	for {
		after, err = e.Leader(ctx)
		if err == nil && after.Token != before.Token && (to == "" || after.Identity == to) {
			break
		}
		select {
		case <-ctx.Done():
			fmt.Fprintf(c.errOut, "electctl: term %d of %s ended, but no new leader within --timeout\n", before.Token, before.Identity)
			return exitNoLeader
		case <-time.After(50 * time.Millisecond):
		}
	}
	how := "stepped down"
	if killed {
		how = "did not step down in time; its session was killed"
	}
	if c.json {
		return c.printJSON(map[string]any{"old_leader": before.Identity, "old_token": before.Token, "killed": killed,
			"new_leader": after.Identity, "new_token": after.Token})
	}
	fmt.Fprintf(c.out, "%s (token %d) %s\n%s leads now (token %d)\n", before.Identity, before.Token, how, after.Identity, after.Token)
	return exitOK
}

func (c *cli) check(ctx context.Context, name, id string) int {
	e, err := c.operator(name)
	if err != nil {
		return c.fail(err)
	}
	r, err := e.Leader(ctx)
	switch {
	case errors.Is(err, election.ErrNoLeader):
		fmt.Fprintln(c.out, "no leader")
		return exitNoLeader
	case err != nil:
		return c.fail(err)
	case r.Identity != id:
		fmt.Fprintf(c.out, "%s leads, not %s\n", r.Identity, id)
		return exitNotLeader
	}
	fmt.Fprintf(c.out, "%s leads (token %d)\n", id, r.Token)
	return exitOK
}

func (c *cli) schema() int {
	ddl, err := election.SchemaDDL(c.prefix)
	if err != nil {
		return c.fail(err)
	}
	fmt.Fprint(c.out, ddl)
	return exitOK
}

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

// cli is one run of electctl: its output, its flags and its database.
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

// run parses args, opens the database, runs the command and returns the exit code.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	c := &cli{out: stdout, errOut: stderr}
	cmd, pos, code, ok := c.parse(args)
	if !ok {
		return code
	}
	if cmd == "schema" {
		return c.schema()
	}
	cfg, code, ok := c.open()
	if !ok {
		return code
	}
	defer c.db.Close()
	if cmd != "watch" {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, c.timeout)
		defer cancel()
	}
	if err := c.db.PingContext(ctx); err != nil {
		fmt.Fprintf(c.errOut, "electctl: cannot reach %s: %v\n", redact(cfg), err)
		return exitError
	}
	return c.dispatch(ctx, cmd, pos)
}

// parse finds the command, its flags and its positional arguments; when ok is
// false it has printed usage or a flag error and run exits with code.
func (c *cli) parse(args []string) (cmd string, pos []string, code int, ok bool) {
	cmd, rest := splitCommand(args)
	if cmd == "" {
		if len(args) > 0 && (args[0] == "-h" || args[0] == "--help" || args[0] == "help") {
			fmt.Fprint(c.out, usage)
			return "", nil, exitOK, false
		}
		fmt.Fprint(c.errOut, usage)
		return "", nil, exitUsage, false
	}
	fs := c.flagSet(cmd)
	for {
		if err := fs.Parse(rest); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return cmd, nil, exitOK, false
			}
			return cmd, nil, exitUsage, false
		}
		if fs.NArg() == 0 {
			break
		}
		pos, rest = append(pos, fs.Arg(0)), fs.Args()[1:]
	}
	if want := commands[cmd]; len(pos) < required(want) || len(pos) > len(want) {
		fs.Usage()
		return cmd, nil, exitUsage, false
	}
	return cmd, pos, exitOK, true
}

// splitCommand finds the first command word in args, so that flags may come
// before or after it, and returns it with the other arguments.
func splitCommand(args []string) (cmd string, rest []string) {
	for i, a := range args {
		if _, ok := commands[a]; ok {
			return a, append(append([]string{}, args[:i]...), args[i+1:]...)
		}
	}
	return "", nil
}

// required counts the positional arguments a command cannot do without.
func required(want []string) int {
	n := 0
	for _, w := range want {
		if !strings.HasSuffix(w, "?") {
			n++
		}
	}
	return n
}

// flagSet defines the flags of cmd into c, and its --help text.
func (c *cli) flagSet(cmd string) *flag.FlagSet {
	fs := flag.NewFlagSet("electctl "+cmd, flag.ContinueOnError)
	fs.SetOutput(c.errOut)
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
		fmt.Fprintf(c.errOut, "usage: electctl %s [flags] %s\n\nflags:\n", cmd, strings.ReplaceAll(strings.Join(commands[cmd], " "), "?", " (optional)"))
		fs.PrintDefaults()
	}
	return fs
}

// open checks the --dsn and opens (but does not yet reach) the database into
// c.db; when ok is false it has printed why and run exits with code.
func (c *cli) open() (cfg *mysql.Config, code int, ok bool) {
	if c.dsn == "" {
		fmt.Fprintln(c.errOut, "electctl: no database: pass --dsn user:pass@tcp(host:3306)/dbname or set ELECTION_DSN")
		return nil, exitUsage, false
	}
	cfg, err := mysql.ParseDSN(c.dsn)
	if err != nil {
		fmt.Fprintf(c.errOut, "electctl: --dsn is not a valid DSN: %v\n", err)
		return nil, exitUsage, false
	}
	if cfg.DBName == "" {
		fmt.Fprintf(c.errOut, "electctl: the DSN %s names no database; add /dbname\n", redact(cfg))
		return nil, exitUsage, false
	}
	c.db, err = sql.Open("mysql", c.dsn)
	if err != nil {
		fmt.Fprintf(c.errOut, "electctl: %v\n", err)
		return nil, exitError, false
	}
	return cfg, exitOK, true
}

// dispatch runs the command cmd, which needs the database, with its
// positional arguments.
func (c *cli) dispatch(ctx context.Context, cmd string, pos []string) int {
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

// schema prints the DDL of the tables with --prefix; it needs no database.
func (c *cli) schema() int {
	ddl, err := election.SchemaDDL(c.prefix)
	if err != nil {
		return c.fail(err)
	}
	fmt.Fprint(c.out, ddl)
	return exitOK
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

// noTerm tells the operator that election name has never had a leader.
func (c *cli) noTerm(name string) int {
	fmt.Fprintf(c.errOut, "electctl: election %q not found: it has had no term\n", name)
	return exitNotFound
}

// printJSON prints v as indented JSON.
func (c *cli) printJSON(v any) int {
	enc := json.NewEncoder(c.out)
	enc.SetIndent("", "  ")
	if err := enc.Encode(v); err != nil {
		return c.fail(err)
	}
	return exitOK
}

// table prints rows of tab-separated cells under header, aligned.
func (c *cli) table(header string, rows [][]string) {
	w := tabwriter.NewWriter(c.out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, header)
	for _, r := range rows {
		fmt.Fprintln(w, strings.Join(r, "\t"))
	}
	w.Flush()
}

// stamp prints a time in UTC to the millisecond, or - for none.
func stamp(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.UTC().Format("2006-01-02 15:04:05.000Z")
}

// ago prints how long ago something was, to the millisecond.
func ago(d time.Duration) string { return d.Round(time.Millisecond).String() + " ago" }

// ms gives a duration in milliseconds, for JSON.
func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

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
//	electctl [flags] shards GROUP           who owns which shard of GROUP (election.Shards)
//	electctl [flags] demote NAME            force a re-election
//	electctl [flags] handover NAME ID       hand leadership to the live candidate ID
//	electctl [flags] remove NAME            delete an election nobody campaigns in
//	electctl [flags] check NAME ID          exit 0 if ID leads: a leader check for load balancers
//	electctl [flags] schema                 print the tables' DDL
//	electctl [flags] run NAME -- CMD [ARG...]  run CMD only while this process leads NAME
//	electctl help [COMMAND]                 print the usage, or a command's flags
//
// Flags (before or after the command): --dsn (default $ELECTION_DSN),
// --prefix, --json, --timeout, --limit and --svg (history), --interval
// (watch). The
// command is the first argument that is neither a flag nor a flag's value;
// after -- every argument is positional. Exit codes: 0 done, 1 error,
// 2 usage, 3 no leader, 4 not found (an election that has had no term,
// for candidates one that has neither a term nor a candidate; the tables;
// the DSN's database), 5 refused (the login, the database or a grant the
// server refused, a hand-over target that is not campaigning, a kill, a
// removal while a candidate campaigns), 6 another candidate leads. run
// exits with its command's code instead (see run.go and electctl help
// run). An error is one line on stderr: what could not be done, and the
// fix.
//
// watch exits at once, with such a line and 4 or 5, when its reads fail
// before one has succeeded for a reason retrying cannot fix (tables
// missing, a login or grant refused). Later it retries: one line on stderr
// when reads start to fail, with the error, and one when they work again;
// the changes made meanwhile follow on stdout.
//
// Times are in UTC to the millisecond: 2026-11-23 12:31:05.245Z in
// tables, RFC 3339 (2026-11-23T12:31:05.245Z) in JSON, where none is null.
// The MySQL driver's own log lines are printed as electctl's, or dropped
// when they report a connection that failed: the driver then retries the
// statement on another, or electctl reports it as failed (see driverLog).
//
// Text read from the database is printed as it is only when every
// character is printable and visible; otherwise it is quoted with Go
// escapes, so that rows anyone with INSERT on the tables can write cannot
// drive the operator's terminal nor pass for other rows. Messages on
// stderr have such characters escaped too, and JSON has them as \uXXXX.
// An unknown command is echoed only when it is a word: it may be a DSN
// whose --dsn was mistyped.
package main

import (
	"context"
	"database/sql"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
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
	// run's watchdog and the gate its command starts through are electctl
	// itself, started again with a command of their own.
	if code, ok := internalCommand(os.Args[1:]); ok {
		os.Exit(code)
	}
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
  shards GROUP           who owns which shard of GROUP (exit 3 if one has no owner)
  demote NAME            force a re-election
  handover NAME ID       hand leadership to the live candidate ID
  remove NAME            delete an election nobody campaigns in (refused, 5, while one does)
  check NAME ID          exit 0 if ID leads, 6 if another does, 3 if none
  schema                 print the tables' DDL
  run NAME -- CMD [ARG...]
                         run CMD only while this process leads NAME: campaign,
                         start CMD, stop it when the term ends; exit with its code
  help [COMMAND]         print this, or COMMAND's flags

flags may come before or after the command; put -- before a NAME or ID that starts with -
--json prints times as RFC 3339 in UTC (2026-11-23T12:31:05.245Z), null for none
exit codes: 0 done, 1 error, 2 usage, 3 no leader, 4 not found (election, tables, database),
5 refused (login, database, grant, hand-over target, kill, remove in use), 6 another leads
(run: CMD's code; see electctl help run)
run "electctl help COMMAND" for a command's flags
`

// envDSN names the environment variable --dsn defaults to.
const envDSN = "ELECTION_DSN"

// The range of watch's --interval. Watch reads every Config.Interval,
// which the library requires to be at least 1ms and at most half the lease
// (the Operator runs with the default lease, election.DefaultLease).
const (
	minInterval = time.Millisecond
	maxInterval = election.DefaultLease / 2
)

// commands: name -> positional arguments (a trailing ? marks optional).
var commands = map[string][]string{
	"status": {"NAME?"}, "watch": {"NAME"}, "history": {"NAME"}, "candidates": {"NAME"}, "shards": {"GROUP"},
	"demote": {"NAME"}, "handover": {"NAME", "ID"}, "remove": {"NAME"}, "check": {"NAME", "ID"}, "schema": nil,
	"run": {"NAME", "--", "CMD", "[ARG...]"},
}

// cli is one run of electctl: its output, its flags and its database.
type cli struct {
	out, errOut io.Writer
	dsn         string
	dsnFrom     string        // where the DSN came from, for messages: --dsn or $ELECTION_DSN
	cfg         *mysql.Config // the DSN, parsed; its password is never printed
	prefix      string
	json        bool
	svg         bool // history: draw the terms as an SVG timeline
	timeout     time.Duration
	limit       int
	interval    time.Duration
	run         runOptions // run's flags and command
	db          *sql.DB
	src         source // the server it reads from
}

// run parses args, opens the database, runs the command and returns the exit code.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	c := &cli{out: stdout, errOut: plainWriter{&lockedWriter{w: stderr}}}
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
	defer func() { c.db.Close() }() // source may reopen it
	if cmd == "run" {
		// run reaches the database itself: its --timeout is the wait to
		// lead, and a signal must end that wait.
		return c.runCommand(pos[0], cfg)
	}
	// --timeout bounds reaching the database for every command, and
	// everything else for every command but watch, which runs until
	// interrupted.
	pingCtx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	if cmd != "watch" {
		ctx = pingCtx
	}
	if err := c.db.PingContext(pingCtx); err != nil {
		if line, code, ok := c.refused(err); ok {
			fmt.Fprintf(c.errOut, "electctl: %s\n", line)
			return code
		}
		fmt.Fprintf(c.errOut, "electctl: cannot reach %s: %v\n", redact(cfg), err)
		return exitError
	}
	if code, ok := c.source(pingCtx, cfg); !ok {
		return code
	}
	return c.dispatch(ctx, cmd, pos)
}

// source learns what server c.db reaches and warns when what it shows may
// be behind the election. On Galera it reads causally from then on
// (wsrep_sync_wait=1): a node back from a pause serves old rows for
// seconds before it learns that it left the cluster, and would show an old
// leader as current.
func (c *cli) source(ctx context.Context, cfg *mysql.Config) (int, bool) {
	src, err := readSource(ctx, c.db)
	if err != nil {
		return c.fail(fmt.Errorf("reading what server %s is: %w", redact(cfg), err)), false
	}
	c.src = src
	if src.Behind != "" {
		fmt.Fprintf(c.errOut, "electctl: warning: %s (%s): %s\n", src.Name, src.Role, src.Behind)
	}
	if src.galera {
		cfg = cfg.Clone()
		if cfg.Params == nil {
			cfg.Params = map[string]string{}
		}
		cfg.Params["wsrep_sync_wait"] = "1"
		conn, err := mysql.NewConnector(cfg)
		if err != nil {
			return c.fail(err), false
		}
		c.db.Close()
		c.db = sql.OpenDB(conn)
	}
	return exitOK, true
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
	case "shards":
		return c.shards(ctx, pos[0])
	case "demote":
		return c.demote(ctx, pos[0], "")
	case "handover":
		return c.demote(ctx, pos[0], pos[1])
	case "remove":
		return c.remove(ctx, pos[0])
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

// operator reads and steers the election; it never campaigns.
func (c *cli) operator(name string) (*election.Operator, error) {
	return election.NewOperator(c.db, name, election.Config{TablePrefix: c.prefix, Interval: c.interval})
}

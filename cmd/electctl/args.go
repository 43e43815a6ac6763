package main

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/sqlelect/election"
)

// Parsing the command line: the command, its flags and arguments, and
// what is wrong with them.

// parse finds the command, its flags and its positional arguments; when ok is
// false it has printed usage, help or what is wrong, and run exits with code.
func (c *cli) parse(args []string) (cmd string, pos []string, code int, ok bool) {
	flags, pos, after, dashed := splitCommand(args)
	if len(pos) > 0 && pos[0] == "run" {
		// run's -- ends electctl's arguments: what follows is the command
		// to run, its flags included.
		c.run.argv, c.run.dashed = after, dashed
	} else {
		pos = append(pos, after...)
	}
	if len(pos) == 0 {
		if wantsHelp(flags) {
			fmt.Fprint(c.out, usage)
			return "", nil, exitOK, false
		}
		fmt.Fprint(c.errOut, usage)
		return "", nil, exitUsage, false
	}
	cmd, pos = pos[0], pos[1:]
	if cmd == "help" {
		return "", nil, c.help(pos), false
	}
	if _, known := commands[cmd]; !known {
		fmt.Fprintf(c.errOut, "electctl: unknown command %s\n\n%s", echo(cmd), usage)
		return "", nil, exitUsage, false
	}
	// The flag package prints its usage for --help as for an error: buffer
	// it, so that help asked for goes to stdout and the rest to stderr.
	var help bytes.Buffer
	fs := c.flagSet(cmd, &help)
	if err := fs.Parse(flags); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			io.Copy(c.out, &help)
			return cmd, nil, exitOK, false
		}
		io.Copy(c.errOut, &help)
		return cmd, nil, exitUsage, false
	}
	if msg := c.validate(cmd, fs, pos); msg != "" {
		fmt.Fprintf(c.errOut, "electctl: %s\n", msg)
		return cmd, nil, exitUsage, false
	}
	return cmd, pos, exitOK, true
}

// help prints the usage, or with a command the command's flags, to stdout.
func (c *cli) help(pos []string) int {
	if len(pos) == 0 {
		fmt.Fprint(c.out, usage)
		return exitOK
	}
	if _, known := commands[pos[0]]; !known || len(pos) > 1 {
		fmt.Fprintf(c.errOut, "electctl: help takes one command; got %s\n\n%s", echo(pos...), usage)
		return exitUsage
	}
	c.flagSet(pos[0], c.out).Usage()
	return exitOK
}

// word matches what may be a mistyped command, and so is echoed: see echo.
var word = regexp.MustCompile(`^[a-z][a-z-]*$`)

// echo quotes args, found where a command was expected, for a message if
// each is a word; else it does not show them. A mistyped (--dns) or
// missing --dsn leaves the DSN, password and all, where the command is
// expected; a word is never a DSN, which has a slash.
func echo(args ...string) string {
	for _, a := range args {
		if !word.MatchString(a) {
			return "(not shown: it may hold a password)"
		}
	}
	return strconv.Quote(strings.Join(args, " "))
}

// splitCommand separates args into flags (with their values) and
// positional arguments, the first of which is the command: a flag's value
// is never taken for the command, nor for NAME or ID. What follows -- is
// given apart (run's command), with whether there was a --, so that a
// name may start with a dash.
func splitCommand(args []string) (flags, pos, after []string, dashed bool) {
	for i := 0; i < len(args); i++ {
		a := args[i]
		switch {
		case a == "--":
			return flags, pos, args[i+1:], true
		case len(a) > 1 && a[0] == '-':
			flags = append(flags, a)
			if takesValue(a) && i+1 < len(args) {
				i++
				flags = append(flags, args[i])
			}
		default:
			pos = append(pos, a)
		}
	}
	return flags, pos, nil, false
}

// takesValue reports whether the flag arg (-name or --name, without =value)
// reads the next argument as its value: any flag of any command but a
// boolean one. An unknown flag takes none; parsing rejects it later.
func takesValue(arg string) bool {
	name := strings.TrimLeft(arg, "-")
	if strings.Contains(name, "=") {
		return false
	}
	for cmd := range commands {
		if f := (&cli{}).flagSet(cmd, io.Discard).Lookup(name); f != nil {
			b, ok := f.Value.(interface{ IsBoolFlag() bool })
			return !ok || !b.IsBoolFlag()
		}
	}
	return false
}

// wantsHelp reports whether flags, as splitCommand gives them, ask for help
// as -h or --help. A flag's value is not a flag: --dsn -h asks for none.
func wantsHelp(flags []string) bool {
	for i := 0; i < len(flags); i++ {
		switch f := flags[i]; {
		case takesValue(f):
			i++ // splitCommand put its value next
		case strings.TrimLeft(f, "-") == "h", strings.TrimLeft(f, "-") == "help":
			return true
		}
	}
	return false
}

// argNames names a command's positional arguments, for messages.
func argNames(want []string) string {
	if len(want) == 0 {
		return "no arguments"
	}
	return strings.ReplaceAll(strings.Join(want, " "), "?", " (optional)")
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

// flagSet defines the flags of cmd into c, and its help text, printed to w.
func (c *cli) flagSet(cmd string, w io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet("electctl "+cmd, flag.ContinueOnError)
	fs.SetOutput(w)
	// No default from the environment here: the usage lists defaults, and
	// the DSN holds the password.
	fs.StringVar(&c.dsn, "dsn", "", "the database, as user:pass@tcp(host:3306)/dbname (default $"+envDSN+")")
	fs.StringVar(&c.prefix, "prefix", election.DefaultTablePrefix, "the tables' prefix")
	fs.BoolVar(&c.json, "json", false, "print JSON instead of tables")
	if cmd == "run" {
		fs.DurationVar(&c.timeout, "timeout", 0, "give up if this process does not lead within this long, exiting with --conflict-exit-code (0: wait as long as it takes)")
	} else {
		fs.DurationVar(&c.timeout, "timeout", 30*time.Second, "give up after this long (watch: on reaching the database only)")
	}
	switch cmd {
	case "history":
		fs.IntVar(&c.limit, "limit", 20, "how many terms, at least 1")
		fs.BoolVar(&c.svg, "svg", false, "draw the terms as an SVG timeline (a lane per leader, colours by how each ended, the times nobody led hatched red) instead of a table")
	case "watch":
		fs.DurationVar(&c.interval, "interval", 250*time.Millisecond, "how often to read the election, "+intervalRange())
	case "run":
		c.runFlags(fs)
	}
	fs.Usage = func() {
		fmt.Fprintf(w, "usage: electctl %s [flags] %s\n\nflags:\n", cmd, strings.ReplaceAll(strings.Join(commands[cmd], " "), "?", " (optional)"))
		fs.PrintDefaults()
		switch cmd {
		case "run":
			fmt.Fprint(w, runHelp)
		case "watch":
			fmt.Fprint(w, watchHelp)
		}
	}
	return fs
}

// intervalRange says which --interval watch accepts, in its help and its
// error alike.
func intervalRange() string {
	return fmt.Sprintf("%v to %v (the library's bounds: at most half the lease, which is the default %v)",
		minInterval, maxInterval, election.DefaultLease)
}

// validate checks the parsed flags and positional arguments of cmd, and
// takes --dsn from the environment if it was not given; it returns what is
// wrong, or "".
func (c *cli) validate(cmd string, fs *flag.FlagSet, pos []string) string {
	given := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { given[f.Name] = true })
	want := commands[cmd]
	switch {
	case cmd == "run" && (len(pos) != 1 || !c.run.dashed || len(c.run.argv) == 0):
		return "run takes NAME, then -- and the command to run: electctl run [flags] NAME -- CMD [ARG...]; see electctl help run"
	case cmd != "run" && (len(pos) < required(want) || len(pos) > len(want)):
		return fmt.Sprintf("%s takes %s; got %d; see electctl help %s", cmd, argNames(want), len(pos), cmd)
	case given["dsn"] && c.dsn == "":
		// An empty --dsn "$VAR" is a mistake, not a wish for $ELECTION_DSN.
		return "--dsn is empty; leave it out to use $" + envDSN
	case c.prefix == "":
		// The library would take it for the default: refuse, as it is more
		// likely an unset variable than a wish for the default tables.
		return fmt.Sprintf("--prefix is empty; leave it out for the default %q", election.DefaultTablePrefix)
	case cmd == "run" && c.timeout < 0:
		return fmt.Sprintf("--timeout %v is negative; give how long to wait to lead, as 30s or 2m, or 0 to wait as long as it takes", c.timeout)
	case cmd != "run" && c.timeout <= 0:
		return fmt.Sprintf("--timeout %v is not positive; give how long to wait, as 30s or 2m", c.timeout)
	case cmd == "history" && c.limit < 1:
		return fmt.Sprintf("--limit %d: give how many terms to print, at least 1", c.limit)
	case c.svg && c.json:
		return "--svg and --json: give one; --svg draws the terms, --json lists them"
	case cmd == "watch" && (c.interval < minInterval || c.interval > maxInterval):
		return fmt.Sprintf("--interval %v is out of range: use %s", c.interval, intervalRange())
	case cmd == "run":
		if msg := c.validateRun(given); msg != "" {
			return msg
		}
	}
	// SchemaDDL checks the prefix as every command will, but here a bad one
	// is a usage error even when the database cannot be reached.
	if _, err := election.SchemaDDL(c.prefix); err != nil {
		return err.Error()
	}
	for i, p := range pos {
		// An empty ID would turn handover into a demote to anyone.
		if p == "" {
			return fmt.Sprintf("%s is empty", strings.TrimSuffix(want[i], "?"))
		}
	}
	c.dsnFrom = "--dsn"
	if !given["dsn"] {
		c.dsn, c.dsnFrom = os.Getenv(envDSN), "$"+envDSN
	}
	return ""
}

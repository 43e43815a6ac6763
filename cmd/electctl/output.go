package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/sqlelect/election"
)

// What electctl prints: tables, JSON, exit codes, and strings from the
// database escaped so that they cannot drive the operator's terminal.

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

// shown gives a string read from the database (or echoed from the command
// line) as it is when every rune is printable, else quoted with Go escapes:
// an ESC sequence, a carriage return or a bidi override in an identity
// must not erase or reorder what the operator reads. Empty strings,
// strings with a space at either end and strings that start with a quote
// are quoted too, so that none passes for another ("a " for "a") and no
// plain string for a quoted one.
func shown(s string) string {
	if s == "" || s[0] == '"' || s[0] == ' ' || s[len(s)-1] == ' ' || !printable(s) {
		return strconv.Quote(s)
	}
	return s
}

// printable reports whether s is valid UTF-8 of printable runes (letters,
// marks, numbers, punctuation, symbols and the ASCII space): no control or
// format character.
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

// plainWriter escapes every rune but newline and tab that is not printable,
// for messages: errors may quote what the server or the tables hold.
type plainWriter struct{ w io.Writer }

// Write writes b with its unprintable runes escaped.
func (p plainWriter) Write(b []byte) (int, error) {
	var out strings.Builder
	for s := string(b); s != ""; {
		r, n := utf8.DecodeRuneInString(s)
		switch {
		case r == utf8.RuneError && n == 1:
			fmt.Fprintf(&out, `\x%02x`, s[0])
		case r == '\n' || r == '\t' || unicode.IsPrint(r):
			out.WriteString(s[:n])
		default:
			q := strconv.QuoteRune(r)
			out.WriteString(q[1 : len(q)-1])
		}
		s = s[n:]
	}
	if _, err := io.WriteString(p.w, out.String()); err != nil {
		return 0, err
	}
	return len(b), nil
}

package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"regexp"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
	"unicode"
	"unicode/utf16"
	"unicode/utf8"
)

// What electctl prints: tables, JSON, exit codes, and strings from the
// database escaped so that they cannot drive the operator's terminal.

// fail prints what err kept electctl from doing, and the fix, as one line
// (see explain), and returns the exit code for it.
func (c *cli) fail(err error) int {
	line, code := c.explain(err)
	fmt.Fprintf(c.errOut, "electctl: %s\n", line)
	return code
}

// noTerm tells the operator that election name has never had a leader.
func (c *cli) noTerm(name string) int {
	fmt.Fprintf(c.errOut, "electctl: election %q not found: it has had no term\n", name)
	return exitNotFound
}

// printJSON prints v as indented JSON.
func (c *cli) printJSON(v any) int {
	if err := c.writeJSON(v, "  "); err != nil {
		return c.fail(err)
	}
	return exitOK
}

// writeJSON writes v as JSON, indented by indent, and a newline, with every
// rune that is not visible escaped: encoding/json leaves C1 controls,
// bidi overrides and DEL as they are, and they would drive the terminal
// of an operator who reads the JSON. The escapes decode to the same text.
func (c *cli) writeJSON(v any, indent string) error {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetIndent("", indent)
	if err := enc.Encode(v); err != nil {
		return err
	}
	_, err := io.WriteString(c.out, escapeJSON(buf.String()))
	return err
}

// escapeJSON rewrites as \uXXXX (a surrogate pair above U+FFFF) every rune
// of the encoded JSON js but newline and space that is not visible. Only
// strings can hold such runes, as what is outside them is ASCII; the
// encoder has escaped those below U+0020 already, and made js valid UTF-8.
func escapeJSON(js string) string {
	var out strings.Builder
	for _, r := range js {
		switch {
		case r == '\n' || r == ' ' || visible(r):
			out.WriteRune(r)
		case r > 0xFFFF:
			r1, r2 := utf16.EncodeRune(r)
			fmt.Fprintf(&out, `\u%04x\u%04x`, r1, r2)
		default:
			fmt.Fprintf(&out, `\u%04x`, r)
		}
	}
	return out.String()
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

// jsonTime is a time in JSON: RFC 3339 in UTC to the millisecond, as
// "2026-11-26T01:37:10.318Z" (what the tables print, in the form JSON
// readers parse), or null for none.
type jsonTime time.Time

// rfc3339Milli is jsonTime's layout; the times are in UTC.
const rfc3339Milli = "2006-01-02T15:04:05.000Z"

func (t jsonTime) MarshalJSON() ([]byte, error) {
	if time.Time(t).IsZero() {
		return []byte("null"), nil
	}
	return []byte(`"` + time.Time(t).UTC().Format(rfc3339Milli) + `"`), nil
}

func (t *jsonTime) UnmarshalJSON(b []byte) error {
	if string(b) == "null" {
		*t = jsonTime{}
		return nil
	}
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return err
	}
	v, err := time.Parse(time.RFC3339, s)
	*t = jsonTime(v)
	return err
}

// ago prints how long ago something was, to the millisecond.
// A stamp more than a moment ahead of the server's clock was made before
// that clock was stepped back: its age cannot be read off it.
func ago(d time.Duration) string {
	if d < -time.Millisecond {
		return (-d).Round(time.Millisecond).String() + " in the future (the server's clock went back since)"
	}
	return max(d, 0).Round(time.Millisecond).String() + " ago"
}

// ms gives a duration in milliseconds, for JSON.
func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// shown gives a string read from the database (or echoed from the command
// line) as it is when every rune is printable, else quoted with Go escapes:
// an ESC sequence, a carriage return or a bidi override in an identity
// must not erase or reorder what the operator reads, nor an invisible rune
// make "a\u3164" pass for "a". Empty strings, strings with a space at
// either end and strings that start with a quote are quoted too, so that
// none passes for another ("a " for "a") and no plain string for a quoted
// one.
func shown(s string) string {
	if s == "" || s[0] == '"' || s[0] == ' ' || s[len(s)-1] == ' ' || !printable(s) {
		return quote(s)
	}
	return s
}

// shownOrDash gives shown(s), or - for an empty s: a field left unset. A
// value "-" is quoted, so that it does not pass for none.
func shownOrDash(s string) string {
	switch s {
	case "":
		return "-"
	case "-":
		return quote(s)
	}
	return shown(s)
}

// quote quotes s as strconv.Quote does, but escapes the invisible runes
// too, which strconv.Quote leaves as they are.
func quote(s string) string {
	var out strings.Builder
	for _, r := range strconv.Quote(s) {
		if invisible(r) {
			out.WriteString(escaped(r))
		} else {
			out.WriteRune(r)
		}
	}
	return out.String()
}

// printable reports whether s is valid UTF-8 of visible runes (letters,
// marks, numbers, punctuation, symbols and the ASCII space): no control or
// format character, nor a filler that shows nothing.
func printable(s string) bool {
	if !utf8.ValidString(s) {
		return false
	}
	for _, r := range s {
		if !visible(r) {
			return false
		}
	}
	return true
}

// visible reports whether r may be printed as it is: unicode.IsPrint
// (which excludes controls, format characters such as bidi overrides, and
// spaces but the ASCII one) and not invisible.
func visible(r rune) bool { return unicode.IsPrint(r) && !invisible(r) }

// invisible reports whether r is a rune that unicode.IsPrint accepts but
// that shows nothing, or nothing of its own: the Hangul fillers and other
// default-ignorable code points, variation selectors, and the blank
// braille pattern.
func invisible(r rune) bool {
	return r == '\u2800' || unicode.In(r, unicode.Other_Default_Ignorable_Code_Point, unicode.Variation_Selector)
}

// escaped gives r, which is not visible, as a Go escape.
func escaped(r rune) string {
	switch {
	case !unicode.IsPrint(r):
		q := strconv.QuoteRune(r)
		return q[1 : len(q)-1]
	case r > 0xFFFF:
		return fmt.Sprintf(`\U%08x`, r)
	}
	return fmt.Sprintf(`\u%04x`, r)
}

// plainWriter escapes every rune but newline and tab that is not visible,
// for messages: errors may quote what the server or the tables hold. It
// also blanks anything shaped like a DSN's user:password@, wherever a
// message quotes one (a DSN passed as an election name or a flag's value).
type plainWriter struct{ w io.Writer }

// credentials matches the user:password@ of a DSN.
var credentials = regexp.MustCompile(`([^\s:"'/@]+):[^\s"'@]+@`)

// Write writes b with its unprintable runes escaped and passwords blanked.
func (p plainWriter) Write(b []byte) (int, error) {
	var out strings.Builder
	for s := credentials.ReplaceAllString(string(b), "${1}:xxxxx@"); s != ""; {
		r, n := utf8.DecodeRuneInString(s)
		switch {
		case r == utf8.RuneError && n == 1:
			fmt.Fprintf(&out, `\x%02x`, s[0])
		case r == '\n' || r == '\t' || visible(r):
			out.WriteString(s[:n])
		default:
			out.WriteString(escaped(r))
		}
		s = s[n:]
	}
	if _, err := io.WriteString(p.w, out.String()); err != nil {
		return 0, err
	}
	return len(b), nil
}

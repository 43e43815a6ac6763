package main

import (
	"fmt"
	"io"
	"os"
	"time"
)

// progress prints where a long run is: on a terminal one line rewritten in
// place, elsewhere (a CI log, a pipe) one stamped line per step, so that a
// log shows the run advancing instead of one line at the end.
type progress struct {
	w    io.Writer
	tty  bool
	last int // length of the line on a terminal, to blank it
}

func newProgress(f *os.File) *progress {
	st, err := f.Stat()
	return &progress{w: f, tty: err == nil && st.Mode()&os.ModeCharDevice != 0}
}

// step prints one step.
func (p *progress) step(format string, args ...any) {
	line := fmt.Sprintf(format, args...)
	if !p.tty {
		fmt.Fprintf(p.w, "%s %s\n", time.Now().UTC().Format("15:04:05"), line)
		return
	}
	fmt.Fprintf(p.w, "\r%-*s", p.last, line)
	p.last = len(line)
}

// done ends the steps: a terminal's line is kept.
func (p *progress) done() {
	if p.tty && p.last > 0 {
		fmt.Fprintln(p.w)
	}
	p.last = 0
}

// Package timeline draws an election's history as an SVG picture: one lane
// per leader, each term a bar in its leader's lane, coloured by how it
// ended, with the times nobody led marked on a band along the top.
//
// It has its own Term, not election.TermRecord, so that the root package
// can use it without an import cycle.
package timeline

import (
	"strconv"
	"time"
)

// Term is one term of the history, as the picture needs it.
type Term struct {
	Token   uint64
	Leader  string    // the identity; its lane
	Started time.Time // the database's clock
	Ended   time.Time // zero while the term goes on: drawn to now
	// Reason is why it ended, in the library's words (resigned,
	// handed-over, hang-killed, ...); Leading for a term that leads now,
	// "" for one with no end recorded.
	Reason string
}

// Leading is the Reason of the term that leads now.
const Leading = "leading"

// Open says whether the term has no end recorded.
func (t Term) Open() bool { return t.Ended.IsZero() }

// ShortToken is the token's label on its bar: its last four digits, which
// tell neighbouring terms apart; the tooltip gives it whole.
func ShortToken(token uint64) string {
	s := strconv.FormatUint(token, 10)
	if len(s) > 5 {
		return "…" + s[len(s)-4:]
	}
	return s
}

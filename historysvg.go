package election

import (
	"context"
	"io"
	"time"

	"github.com/sqlelect/election/internal/timeline"
)

// WriteHistorySVG draws terms (as History returns them) to w as an SVG
// timeline: a lane per leader, each term a bar from its start to its end
// labelled with its token's last digits (the whole token, the times and
// the reason in its tooltip), coloured by its Reason; the times nobody led
// hatched red on a band along the top, hand-overs an arrow to the
// successor, kills a cross at the term's end. leading is the token of the
// term that leads now (0: none), drawn as leading; another term with no
// end recorded is drawn as such. Open terms, and the time axis, end at now,
// which is best taken from the database's clock, as the terms' times are.
// The layout is the same on every machine: text widths come from fixed
// tables, not fonts.
func WriteHistorySVG(w io.Writer, name string, terms []TermRecord, leading uint64, now time.Time) error {
	ts := make([]timeline.Term, len(terms))
	for i, t := range terms {
		ts[i] = timeline.Term{Token: t.Token, Leader: t.Identity, Started: t.Started, Ended: t.Ended, Reason: t.Reason}
		if t.Ended.IsZero() && leading != 0 && t.Token == leading {
			ts[i].Reason = timeline.Leading
		}
	}
	return timeline.Write(w, "Terms of election "+name, ts, now)
}

// HistorySVG draws the election's last terms, at most limit (see
// History), as WriteHistorySVG does, to now by this machine's clock.
func (o *Operator) HistorySVG(ctx context.Context, w io.Writer, limit int) error {
	terms, err := o.History(ctx, limit)
	if err != nil {
		return err
	}
	var leading uint64
	if rec, err := o.Leader(ctx); err == nil && rec.Leading() {
		leading = rec.Token
	}
	return WriteHistorySVG(w, o.Name(), terms, leading, time.Now())
}

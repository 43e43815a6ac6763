package election

import (
	"context"
	"io"
	"time"

	"github.com/sqlelect/election/internal/timeline"
)

// HistorySVG draws the election's last terms, at most limit (see History),
// to w as an SVG timeline: a lane per leader, each term a bar from its
// start to its end labelled with its token's last digits (the whole token,
// the times and the reason in its tooltip), coloured by its Reason; the
// times nobody led hatched red on a band along the top, hand-overs an arrow
// to the successor, kills a cross at the term's end. Terms still open, and
// the time axis, end at now by this machine's clock, while the terms' times
// are the database's: a difference between the two clocks stretches or
// shortens the open term. The layout is the same on every machine: text
// widths come from fixed tables, not fonts.
func (o *Operator) HistorySVG(ctx context.Context, w io.Writer, limit int) error {
	terms, err := o.History(ctx, limit)
	if err != nil {
		return err
	}
	var leading uint64
	if rec, err := o.Leader(ctx); err == nil && rec.Leading() {
		leading = rec.Token
	}
	ts := make([]timeline.Term, len(terms))
	for i, t := range terms {
		ts[i] = timeline.Term{Token: t.Token, Leader: t.Identity, Started: t.Started, Ended: t.Ended, Reason: t.Reason}
		if t.Ended.IsZero() && t.Token == leading {
			ts[i].Reason = timeline.Leading
		}
	}
	return timeline.Write(w, "Terms of election "+o.Name(), ts, time.Now())
}

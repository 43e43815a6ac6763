package timeline

import (
	"fmt"
	"io"
	"time"

	"github.com/sqlelect/election/internal/svgdraw"
)

// Write draws terms as Arrange lays them out, to w.
func Write(w io.Writer, title string, terms []Term, now time.Time) error {
	_, err := w.Write(Arrange(title, terms, now).SVG())
	return err
}

// SVG draws the layout. Each bar and gap has a <title>, the tooltip a
// browser shows, with what its label abbreviates: the whole token, the
// times to the millisecond.
func (l *Layout) SVG() []byte {
	var c svgdraw.Canvas
	// The hatching of the times nobody led.
	c.Printf(`<defs><pattern id="nobody-led" width="6" height="6" patternUnits="userSpaceOnUse" patternTransform="rotate(45)">` +
		`<rect width="6" height="6" fill="` + gapShade + `"/><line x1="0" y1="0" x2="0" y2="6" stroke="` + gapColor + `" stroke-width="3"/></pattern></defs>` + "\n")
	if l.Title.Text != "" {
		text(&c, l.Title, inkColor)
	}
	for _, ln := range l.Lanes {
		c.Rect(ln.Box.X, ln.Box.Y, ln.Box.W, ln.Box.H, 0, laneColor, gridColor, "")
		text(&c, ln.Name, inkColor)
	}
	for _, t := range l.Ticks {
		c.Line(gridColor, 1, "", t.X, l.Axis.Y, t.X, t.Box.Y-2)
	}
	for _, g := range l.Gaps {
		c.Rect(g.Shade.X, g.Shade.Y, g.Shade.W, g.Shade.H, 0, gapShade, "none", "")
	}
	c.Rect(l.Axis.X, l.Axis.Y, l.Axis.W, l.Axis.H, 0, ledColor, gridColor, "")
	text(&c, l.AxisName, inkColor)
	for _, g := range l.Gaps {
		c.Printf("<g><title>%s</title>\n", svgdraw.Escape(fmt.Sprintf("nobody led for %v: %s to %s", rounded(g.To.Sub(g.From)), stamp(g.From), stamp(g.To))))
		c.Rect(g.Band.X, g.Band.Y, g.Band.W, g.Band.H, 0, "url(#nobody-led)", gapColor, "")
		c.Printf("</g>\n")
	}
	for _, b := range l.Bars {
		c.Printf("<g><title>%s</title>\n", svgdraw.Escape(tooltip(b.Term)))
		dash := ""
		if b.Term.Open() {
			dash = "4 2" // goes on, or its end is not known
		}
		c.Rect(b.Box.X, b.Box.Y, b.Box.W, b.Box.H, 2, ReasonColor(b.Term.Reason), markColor, dash)
		text(&c, b.Token, inkColor)
		c.Printf("</g>\n")
	}
	for _, h := range l.HandOvers {
		c.Line(markColor, 1.5, "", h.Points...)
		n := len(h.Points)
		c.Arrowhead(h.Points[n-2], h.Points[n-1], 0, h.DirY, markColor)
	}
	for _, k := range l.Kills {
		const r = 5.0
		c.Line(killColor, 2.5, "", k.X-r, k.Y-r, k.X+r, k.Y+r)
		c.Line(killColor, 2.5, "", k.X-r, k.Y+r, k.X+r, k.Y-r)
	}
	for _, t := range l.Ticks {
		text(&c, t, "#333333")
	}
	for _, it := range l.Legend {
		fill := ReasonColor(it.Reason)
		if it.Reason == gapItem {
			fill = "url(#nobody-led)"
		}
		c.Rect(it.Swatch.X, it.Swatch.Y, it.Swatch.W, it.Swatch.H, 2, fill, markColor, "")
		text(&c, it.Name, "#333333")
	}
	title := l.Title.Text
	if title == "" {
		title = "Terms"
	}
	return c.SVG(l.Width, l.Height, title)
}

func text(c *svgdraw.Canvas, lb Label, fill string) {
	c.Text(lb.X, lb.Y, lb.Text, lb.Size, lb.Bold, lb.Anchor, fill)
}

// tooltip says everything about a term its bar abbreviates.
func tooltip(t Term) string {
	s := fmt.Sprintf("token %d, leader %s: %s to ", t.Token, laneName(t.Leader), stamp(t.Started))
	if t.Open() {
		return s + "now, " + reasonLabel(t.Reason)
	}
	return s + fmt.Sprintf("%s (%v), %s", stamp(t.Ended), rounded(t.Ended.Sub(t.Started)), reasonLabel(t.Reason))
}

func stamp(t time.Time) string { return t.UTC().Format("2006-01-02 15:04:05.000 UTC") }

// rounded is d to the millisecond, or to the microsecond below one, so that
// a gap of a few hundred microseconds does not read "0s".
func rounded(d time.Duration) time.Duration {
	if d < time.Millisecond {
		return d.Round(time.Microsecond)
	}
	return d.Round(time.Millisecond)
}

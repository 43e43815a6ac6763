package timeline

import (
	"cmp"
	"slices"
	"time"

	"github.com/sqlelect/election/internal/svgdraw"
)

// Sizes, in pixels.
const (
	margin    = 16.0
	plotWidth = 720.0 // the time axis
	axisH     = 16.0  // the top band: who led, and when nobody did
	barH      = 18.0
	barPad    = 6.0  // above and below a lane's bars
	rowH      = 14.0 // a row of labels under the bars, at size 11
	small     = 11.0 // font size of tokens, ticks and the legend
	minBarW   = 2.0  // a term too short to see still shows
	swatch    = 12.0
)

// Box is a rectangle: X, Y its top left corner.
type Box struct{ X, Y, W, H float64 }

// Overlaps says whether b and o share any area; touching edges do not.
func (b Box) Overlaps(o Box) bool {
	return b.X < o.X+o.W && o.X < b.X+b.W && b.Y < o.Y+o.H && o.Y < b.Y+b.H
}

// Label is a line of text; Box is where it is drawn, its width estimated
// by svgdraw.Width as the diagrams' is.
type Label struct {
	Text   string
	X, Y   float64 // the anchor, on the baseline
	Anchor string  // start, middle or end
	Size   float64
	Bold   bool
	Box    Box
}

func newLabel(text string, x, y, size float64, bold bool, anchor string) Label {
	w := svgdraw.Width(text, size, bold)
	left := x
	switch anchor {
	case "middle":
		left = x - w/2
	case "end":
		left = x - w
	}
	// The box holds the ascent (0.8 em) and the descent (0.25 em).
	return Label{Text: text, X: x, Y: y, Anchor: anchor, Size: size, Bold: bold, Box: Box{left, y - 0.8*size, w, 1.05 * size}}
}

// Lane is the row of one leader's terms.
type Lane struct {
	Leader string
	Box    Box // across the plot
	Name   Label
}

// Bar is a term, in its leader's lane.
type Bar struct {
	Term  Term
	Lane  int
	Box   Box
	Token Label // inside the bar if it fits, else in a row under it
}

// Gap is a time nobody led.
type Gap struct {
	From, To time.Time
	Band     Box // on the top band
	Shade    Box // across the lanes
}

// HandOver is the arrow from a term handed over to its successor's.
type HandOver struct {
	From, To int // Bars' indexes
	Points   []float64
	DirY     float64 // the arrowhead's direction: 1 down, -1 up
}

// Kill marks the end of a term whose leader's session was killed.
type Kill struct {
	Bar  int
	X, Y float64
}

// LegendItem names a colour.
type LegendItem struct {
	Reason string // "" for no end recorded; gapItem for the gaps
	Swatch Box
	Name   Label
}

// gapItem is the legend's item for the hatching of a gap.
const gapItem = "(nobody led)"

// Layout is where everything of the picture goes.
type Layout struct {
	Width, Height float64
	From, To      time.Time // the time axis's ends
	Title         Label
	Axis          Box // the top band
	AxisName      Label
	Lanes         []Lane
	Bars          []Bar // oldest first
	Gaps          []Gap
	HandOvers     []HandOver
	Kills         []Kill
	Ticks         []Label
	Legend        []LegendItem
}

// Labels is every text of the picture, for checking that none overlaps
// another.
func (l *Layout) Labels() []Label {
	out := []Label{l.Title, l.AxisName}
	for _, ln := range l.Lanes {
		out = append(out, ln.Name)
	}
	for _, b := range l.Bars {
		out = append(out, b.Token)
	}
	out = append(out, l.Ticks...)
	for _, it := range l.Legend {
		out = append(out, it.Name)
	}
	return out
}

// Arrange lays terms (in any order) out on a time axis that ends at now,
// or at the last end if later; an open term is drawn to now.
func Arrange(title string, terms []Term, now time.Time) *Layout {
	terms = slices.Clone(terms)
	slices.SortStableFunc(terms, func(a, b Term) int {
		if c := a.Started.Compare(b.Started); c != 0 {
			return c
		}
		return cmp.Compare(a.Token, b.Token)
	})
	l := &Layout{}
	top := margin
	if title != "" {
		l.Title = newLabel(title, margin, margin+14, 14, true, "start")
		top += 14 + 12
	}
	l.From, l.To = span(terms, now)

	// The names' column: as wide as the widest name.
	var leaders []string
	nameW := svgdraw.Width("leader", 12, true)
	for _, t := range terms {
		if !slices.Contains(leaders, t.Leader) {
			leaders = append(leaders, t.Leader)
			nameW = max(nameW, svgdraw.Width(laneName(t.Leader), 12, true))
		}
	}
	x0 := margin + nameW + 12
	x := func(t time.Time) float64 {
		return x0 + float64(t.Sub(l.From))/float64(l.To.Sub(l.From))*plotWidth
	}
	l.Width = x0 + plotWidth + margin
	l.Width = max(l.Width, l.Title.Box.W+2*margin)

	l.Axis = Box{x0, top, plotWidth, axisH}
	l.AxisName = newLabel("leader", x0-12, top+12, 12, true, "end")
	y := top + axisH + 8
	l.Bars = make([]Bar, len(terms))
	for i, t := range terms {
		end := t.Ended
		if t.Open() {
			end = now
		}
		end = later(end, t.Started)
		l.Bars[i] = Bar{Term: t, Lane: slices.Index(leaders, t.Leader), Box: Box{X: x(t.Started), W: max(x(end)-x(t.Started), minBarW), H: barH}}
	}
	for li, who := range leaders {
		var mine []int
		for i := range l.Bars {
			if l.Bars[i].Lane == li {
				mine = append(mine, i)
			}
		}
		rows := l.placeLane(mine, y)
		h := barPad + barH + barPad + float64(rows)*rowH
		l.Lanes = append(l.Lanes, Lane{Leader: who, Box: Box{x0, y, plotWidth, h},
			Name: newLabel(laneName(who), x0-12, y+barPad+13, 12, true, "end")})
		y += h + 4
	}
	lanesTop, lanesBottom := top+axisH, y
	l.gaps(terms, now, x, lanesTop, lanesBottom)
	l.marks()
	l.Ticks = ticks(l.From, l.To, x, x0, lanesBottom+14, l.Width)
	l.Height = l.legend(lanesBottom+14+16) + margin
	return l
}

// placeLane puts the bars of one lane (indexes, oldest first) at y, and
// their tokens: inside a bar where it fits, else in the first row under
// the bars where it clears the label before it. It returns the rows used.
func (l *Layout) placeLane(mine []int, y float64) int {
	var rowsEnd []float64 // the right edge of each row's last label
	for k, i := range mine {
		b := &l.Bars[i]
		b.Box.Y = y + barPad
		if k+1 < len(mine) {
			// Only the minimum width can reach into the next term.
			b.Box.W = min(b.Box.W, max(l.Bars[mine[k+1]].Box.X-b.Box.X, 0))
		}
		text := ShortToken(b.Term.Token)
		cx := b.Box.X + b.Box.W/2
		if svgdraw.Width(text, small, false)+6 <= b.Box.W {
			b.Token = newLabel(text, cx, b.Box.Y+13, small, false, "middle")
			continue
		}
		w := svgdraw.Width(text, small, false)
		left := min(max(cx-w/2, l.Axis.X), l.Axis.X+plotWidth-w)
		r := 0
		for r < len(rowsEnd) && rowsEnd[r]+4 > left {
			r++
		}
		if r == len(rowsEnd) {
			rowsEnd = append(rowsEnd, 0)
		}
		rowsEnd[r] = left + w
		b.Token = newLabel(text, left, b.Box.Y+barH+barPad+float64(r)*rowH+small-2, small, false, "start")
	}
	return len(rowsEnd)
}

// gaps finds the times nobody led, between the terms and after the last.
func (l *Layout) gaps(terms []Term, now time.Time, x func(time.Time) float64, lanesTop, lanesBottom float64) {
	if len(terms) == 0 {
		return
	}
	covered := terms[0].Started
	add := func(from, to time.Time) {
		x0, x1 := x(from), x(to)
		w := max(x1-x0, minBarW)
		l.Gaps = append(l.Gaps, Gap{From: from, To: to, Band: Box{x0, l.Axis.Y, w, axisH}, Shade: Box{x0, lanesTop, w, lanesBottom - lanesTop}})
	}
	for _, t := range terms {
		if t.Started.After(covered) {
			add(covered, t.Started)
		}
		if t.Open() {
			covered = later(covered, now)
		} else {
			covered = later(covered, t.Ended)
		}
	}
	// Nobody leads from the last end to now; the axis may run on past now
	// (a second at least), into no one's time.
	if now.After(covered) {
		add(covered, now)
	}
}

// marks finds the hand-overs (an arrow to the successor's lane) and the
// kills (a cross at the term's end).
func (l *Layout) marks() {
	for i, b := range l.Bars {
		end := b.Box.X + b.Box.W
		mid := b.Box.Y + barH/2
		switch b.Term.Reason {
		case "hang-killed", "demote-killed":
			l.Kills = append(l.Kills, Kill{Bar: i, X: end, Y: mid})
		case "handed-over":
			if i+1 >= len(l.Bars) || l.Bars[i+1].Lane == b.Lane {
				continue
			}
			n := l.Bars[i+1]
			tip, dir := n.Box.Y, 1.0
			if n.Box.Y < b.Box.Y {
				tip, dir = n.Box.Y+barH, -1
			}
			l.HandOvers = append(l.HandOvers, HandOver{From: i, To: i + 1, Points: []float64{end, mid, n.Box.X, mid, n.Box.X, tip}, DirY: dir})
		}
	}
}

// legend lays out one item per colour drawn, in rows that wrap at the
// picture's width, from y; it returns the bottom.
func (l *Layout) legend(y float64) float64 {
	var items []string
	for _, r := range reasonOrder {
		if slices.ContainsFunc(l.Bars, func(b Bar) bool { return b.Term.Reason == r }) {
			items = append(items, r)
		}
	}
	for _, b := range l.Bars {
		if _, known := reasonColors[b.Term.Reason]; !known && !slices.Contains(items, b.Term.Reason) {
			items = append(items, b.Term.Reason)
		}
	}
	if len(l.Gaps) > 0 {
		items = append(items, gapItem)
	}
	x := margin
	for _, r := range items {
		name := reasonLabel(r)
		w := swatch + 4 + svgdraw.Width(name, small, false)
		if x > margin && x+w > l.Width-margin {
			x, y = margin, y+rowH+4
		}
		l.Legend = append(l.Legend, LegendItem{Reason: r, Swatch: Box{x, y, swatch, swatch}, Name: newLabel(name, x+swatch+4, y+swatch-2, small, false, "start")})
		x += w + 16
	}
	return y + rowH
}

// span is the time axis: from the first start to now, or to the last end
// if that is later; a second at least.
func span(terms []Term, now time.Time) (from, to time.Time) {
	if len(terms) == 0 {
		return now.Add(-time.Second), now
	}
	from, to = terms[0].Started, now
	for _, t := range terms {
		to = later(to, later(t.Started, t.Ended))
	}
	return from, later(to, from.Add(time.Second))
}

func laneName(leader string) string {
	if leader == "" {
		return "(unknown)"
	}
	return leader
}

// later is the later of a and b.
func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

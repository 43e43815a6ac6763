package main

// Sequence diagrams (NAME.seq). One statement a line, in the order they
// happen; # starts a comment line. In every text, \n breaks the line and
// `backticks` set code in the monospaced font.
//
//	title: TEXT
//	participant ID "HEAD LINE" "HEAD LINE" ...   (left to right, in order)
//	ID -> ID: TEXT                 a message (solid arrow)
//	ID --> ID: TEXT                a reply (dashed arrow)
//	note over ID: TEXT             a note on a lifeline
//	note over ID, ID: TEXT         a note across lifelines
//	note right of ID: TEXT         (and left of)
//	loop TEXT ... end              a frame around what repeats
//	activate ID ... deactivate ID  a bar on the lifeline, from the last
//	                               arrow before the one to the other
//	divider: TEXT                  a dashed line across, for time passing
//
// Layout: each participant is a lifeline; the gap between two neighbours
// is as wide as the widest label of a message between them needs; every
// message, note and frame edge takes a row of its own, top to bottom, so
// nothing drawn in one row can overlap another.

import (
	"errors"
	"strings"

	"github.com/sqlelect/election/internal/svgdraw"
)

type seqParticipant struct {
	id   string
	head []string
	w    float64 // the head box's width
}

type seqEvent struct {
	src    sourceLine
	kind   string // message, note, loop, end, activate, deactivate, divider
	from   int    // message: sender; note, activate: the (first) participant
	to     int    // message: receiver; note over two: the last participant
	dashed bool
	side   string // note: over, left, right
	text   []string
	frame  int // loop and end: the frame's index
}

type seqFrame struct {
	label    []string
	depth    int
	lo, hi   int // the participants it spans
	top, bot float64
}

type seqBar struct {
	p        int
	top, bot float64
}

type sequence struct {
	title  string
	parts  []seqParticipant
	events []seqEvent
	frames []seqFrame
}

func parseSequence(src string) (*sequence, error) {
	s := &sequence{}
	index := map[string]int{}
	part := func(l sourceLine, id string) (int, error) {
		i, ok := index[strings.TrimSpace(id)]
		if !ok {
			return 0, l.errorf("unknown participant %q", id)
		}
		return i, nil
	}
	var open []int // frames not yet ended
	for _, l := range sourceLines(src) {
		t := l.text
		switch {
		case strings.HasPrefix(t, "title:"):
			s.title = strings.TrimSpace(strings.TrimPrefix(t, "title:"))
		case strings.HasPrefix(t, "participant "):
			id, rest, _ := strings.Cut(strings.TrimPrefix(t, "participant "), " ")
			head, extra, err := quoted(rest)
			if err != nil || extra != "" || len(head) == 0 {
				return nil, l.errorf(`want: participant ID "HEAD" ...`)
			}
			if _, dup := index[id]; dup {
				return nil, l.errorf("participant %q declared twice", id)
			}
			index[id] = len(s.parts)
			s.parts = append(s.parts, seqParticipant{id: id, head: head})
		case strings.HasPrefix(t, "note "):
			spec, text, ok := strings.Cut(strings.TrimPrefix(t, "note "), ":")
			if !ok {
				return nil, l.errorf("want: note over|left of|right of ID: TEXT")
			}
			e := seqEvent{src: l, kind: "note", text: splitLabel(text)}
			var ids string
			switch {
			case strings.HasPrefix(spec, "over "):
				e.side, ids = "over", strings.TrimPrefix(spec, "over ")
			case strings.HasPrefix(spec, "left of "):
				e.side, ids = "left", strings.TrimPrefix(spec, "left of ")
			case strings.HasPrefix(spec, "right of "):
				e.side, ids = "right", strings.TrimPrefix(spec, "right of ")
			default:
				return nil, l.errorf("want: note over|left of|right of ID: TEXT")
			}
			first, last, two := strings.Cut(ids, ",")
			var err error
			if e.from, err = part(l, first); err != nil {
				return nil, err
			}
			e.to = e.from
			if two {
				if e.side != "over" {
					return nil, l.errorf("only a note over may span two participants")
				}
				if e.to, err = part(l, last); err != nil {
					return nil, err
				}
				if e.to < e.from {
					e.from, e.to = e.to, e.from
				}
			}
			s.events = append(s.events, e)
		case strings.HasPrefix(t, "loop "):
			label := splitLabel(strings.TrimPrefix(t, "loop "))
			if len(label) != 1 {
				return nil, l.errorf("a loop's label is one line")
			}
			open = append(open, len(s.frames))
			s.frames = append(s.frames, seqFrame{label: label, depth: len(open) - 1, lo: -1, hi: -1})
			s.events = append(s.events, seqEvent{src: l, kind: "loop", frame: len(s.frames) - 1})
		case t == "end":
			if len(open) == 0 {
				return nil, l.errorf("end without loop")
			}
			f := open[len(open)-1]
			open = open[:len(open)-1]
			if s.frames[f].lo < 0 {
				return nil, l.errorf("empty loop")
			}
			s.events = append(s.events, seqEvent{src: l, kind: "end", frame: f})
		case strings.HasPrefix(t, "activate "), strings.HasPrefix(t, "deactivate "):
			kind, id, _ := strings.Cut(t, " ")
			p, err := part(l, id)
			if err != nil {
				return nil, err
			}
			s.events = append(s.events, seqEvent{src: l, kind: kind, from: p})
		case strings.HasPrefix(t, "divider:"):
			s.events = append(s.events, seqEvent{src: l, kind: "divider", text: splitLabel(strings.TrimPrefix(t, "divider:"))})
		default:
			arrow, text, ok := strings.Cut(t, ":")
			if !ok {
				return nil, l.errorf("not a statement: %q", t)
			}
			e := seqEvent{src: l, kind: "message", text: splitLabel(text)}
			from, to, dashed := strings.Cut(arrow, "-->")
			if !dashed {
				if from, to, ok = strings.Cut(arrow, "->"); !ok {
					return nil, l.errorf("not a statement: %q", t)
				}
			}
			e.dashed = dashed
			var err error
			if e.from, err = part(l, from); err != nil {
				return nil, err
			}
			if e.to, err = part(l, to); err != nil {
				return nil, err
			}
			if e.from == e.to {
				return nil, l.errorf("a message to oneself is not drawn; use a note")
			}
			s.events = append(s.events, e)
		}
		// Frames span the participants of what they hold.
		if n := len(s.events); n > 0 && (s.events[n-1].kind == "message" || s.events[n-1].kind == "note") && s.events[n-1].src == l {
			e := s.events[n-1]
			lo, hi := min(e.from, e.to), max(e.from, e.to)
			for _, f := range open {
				fr := &s.frames[f]
				if fr.lo < 0 || lo < fr.lo {
					fr.lo = lo
				}
				fr.hi = max(fr.hi, hi)
			}
		}
	}
	if len(open) > 0 {
		return nil, errors.New("loop without end")
	}
	if len(s.parts) < 2 {
		return nil, errors.New("a sequence needs two participants")
	}
	return s, nil
}

const (
	seqMargin   = 16.0
	seqFrameOut = 26.0 // how far a frame reaches past its outer lifelines
	seqFrameIn  = 8.0  // and again per level of nesting
	seqBarHalf  = 5.0
	seqTabH     = 20.0
)

func drawSequence(src string) ([]byte, error) {
	s, err := parseSequence(src)
	if err != nil {
		return nil, err
	}
	n := len(s.parts)
	for i := range s.parts {
		s.parts[i].w = svgdraw.MaxWidth(s.parts[i].head, 12, true) + 24
	}
	// Horizontal room: gap[i] between lifelines i and i+1, and the margins
	// left of the first and right of the last.
	gap := make([]float64, n-1)
	for i := range gap {
		gap[i] = (s.parts[i].w+s.parts[i+1].w)/2 + 24
	}
	left, right := s.parts[0].w/2, s.parts[n-1].w/2
	needSpan := func(lo, hi int, need float64) {
		have := 0.0
		for i := lo; i < hi; i++ {
			have += gap[i]
		}
		if have < need {
			gap[hi-1] += need - have
		}
	}
	needLeft := func(p int, need float64) {
		if p == 0 {
			left = max(left, need)
		} else {
			gap[p-1] = max(gap[p-1], need)
		}
	}
	needRight := func(p int, need float64) {
		if p == n-1 {
			right = max(right, need)
		} else {
			gap[p] = max(gap[p], need)
		}
	}
	for _, e := range s.events {
		w := svgdraw.MaxWidth(e.text, 12, false)
		switch e.kind {
		case "message":
			needSpan(min(e.from, e.to), max(e.from, e.to), w+2*12+2*seqBarHalf)
		case "note":
			w += 16
			switch e.side {
			case "over":
				if e.from == e.to {
					needLeft(e.from, w/2+16)
					needRight(e.to, w/2+16)
				} else {
					needSpan(e.from, e.to, w-40)
					needLeft(e.from, 36)
					needRight(e.to, 36)
				}
			case "right":
				needRight(e.from, w+seqBarHalf+4+16)
			case "left":
				needLeft(e.from, w+seqBarHalf+4+16)
			}
		}
	}
	for _, f := range s.frames {
		out := seqFrameOut + seqFrameIn*float64(maxDepth(s.frames)-f.depth) // outer frames reach further
		needLeft(f.lo, out+8)
		needRight(f.hi, out+8)
		tab := svgdraw.Width("loop", 12, true) + 16
		need := tab + 8 + svgdraw.MaxWidth(f.label[:1], 12, false) + 12 - 2*out
		if f.lo == f.hi {
			if need > 0 {
				right = max(right, out+need)
			}
		} else {
			needSpan(f.lo, f.hi, need)
		}
	}
	xs := make([]float64, n)
	xs[0] = seqMargin + left
	for i := 1; i < n; i++ {
		xs[i] = xs[i-1] + gap[i-1]
	}
	wTotal := xs[n-1] + right + seqMargin
	if s.title != "" {
		wTotal = max(wTotal, svgdraw.Width(s.title, 14, true)+2*seqMargin)
	}

	// Rows, top to bottom.
	var (
		c        svgdraw.Canvas
		y        = seqMargin
		headTop  float64
		headH    = 0.0
		lastY    = -1.0
		bars     []seqBar
		active   = map[int]int{} // participant: index in bars
		arrows   []int           // events that are messages, with their y in arrowY
		arrowY   = map[int]float64{}
		labelTop = map[int]float64{}
	)
	if s.title != "" {
		y += 20
	}
	headTop = y
	for _, p := range s.parts {
		headH = max(headH, svgdraw.TextHeight(len(p.head))+12)
	}
	y += headH + 18
	for i, e := range s.events {
		switch e.kind {
		case "message":
			labelTop[i] = y
			y += svgdraw.TextHeight(len(e.text))
			arrowY[i] = y + 5
			lastY = arrowY[i]
			arrows = append(arrows, i)
			y = arrowY[i] + 14
		case "note":
			labelTop[i] = y
			y += svgdraw.TextHeight(len(e.text)) + 10 + 12
		case "loop":
			s.frames[e.frame].top = y
			y += seqTabH + 8
		case "end":
			y += 2
			s.frames[e.frame].bot = y
			y += 14
		case "divider":
			labelTop[i] = y
			y += svgdraw.TextHeight(len(e.text)) + 14
		case "activate":
			if _, on := active[e.from]; on {
				return nil, e.src.errorf("%s is active already", s.parts[e.from].id)
			}
			top := lastY
			if top < 0 {
				top = y
			}
			active[e.from] = len(bars)
			bars = append(bars, seqBar{p: e.from, top: top})
		case "deactivate":
			b, on := active[e.from]
			if !on {
				return nil, e.src.errorf("%s is not active", s.parts[e.from].id)
			}
			delete(active, e.from)
			bars[b].bot = max(lastY, bars[b].top+10)
		}
	}
	if len(active) > 0 {
		return nil, errors.New("activate without deactivate")
	}
	y += 6
	bottom := y
	hTotal := bottom + seqMargin

	if s.title != "" {
		c.Text(seqMargin, seqMargin+14, s.title, 14, true, "start", "#111111")
	}
	// Frames first, under everything.
	depth := maxDepth(s.frames)
	for _, f := range s.frames {
		out := seqFrameOut + seqFrameIn*float64(depth-f.depth)
		x0, x1 := xs[f.lo]-out, xs[f.hi]+out
		c.Rect(x0, f.top, x1-x0, f.bot-f.top, 0, "#f5f7fa", "#8c96a0", "")
	}
	for i, p := range s.parts {
		c.Line("#9aa3ad", 1, "4 4", xs[i], headTop+headH, xs[i], bottom)
		c.Rect(xs[i]-p.w/2, headTop, p.w, headH, 4, "#e8eef7", "#3a4a5c", "")
		c.Lines(xs[i], headTop+6+12, p.head, 12, true, "middle", "#111111")
	}
	for _, b := range bars {
		c.Rect(xs[b.p]-seqBarHalf, b.top, 2*seqBarHalf, b.bot-b.top, 0, "#cfe0f5", "#3a4a5c", "")
	}
	// Frame tabs and labels over the lifelines and bars.
	for _, f := range s.frames {
		out := seqFrameOut + seqFrameIn*float64(depth-f.depth)
		x0 := xs[f.lo] - out
		tab := svgdraw.Width("loop", 12, true) + 16
		c.Printf(`<polygon points="%s,%s %s,%s %s,%s %s,%s %s,%s" fill="#dde3ea" stroke="#8c96a0"/>`+"\n",
			svgdraw.Num(x0), svgdraw.Num(f.top), svgdraw.Num(x0+tab), svgdraw.Num(f.top), svgdraw.Num(x0+tab), svgdraw.Num(f.top+seqTabH-6), svgdraw.Num(x0+tab-6), svgdraw.Num(f.top+seqTabH), svgdraw.Num(x0), svgdraw.Num(f.top+seqTabH))
		c.Text(x0+8, f.top+14, "loop", 12, true, "start", "#333333")
		lw := svgdraw.MaxWidth(f.label, 12, false)
		c.Rect(x0+tab+4, f.top+2, lw+8, svgdraw.TextHeight(len(f.label)), 0, "#f5f7fa", "none", "")
		c.Lines(x0+tab+8, f.top+14, f.label, 12, false, "start", "#333333")
	}
	covered := func(p int, y float64) bool {
		for _, b := range bars {
			if b.p == p && b.top <= y && y <= b.bot {
				return true
			}
		}
		return false
	}
	for _, i := range arrows {
		e := s.events[i]
		ay := arrowY[i]
		dir := 1.0
		if xs[e.to] < xs[e.from] {
			dir = -1
		}
		x0, x1 := xs[e.from], xs[e.to]
		if covered(e.from, ay) {
			x0 += dir * seqBarHalf
		}
		if covered(e.to, ay) {
			x1 -= dir * seqBarHalf
		}
		dash := ""
		if e.dashed {
			dash = "6 4"
		}
		c.Line("#1f2d3d", 1.3, dash, x0, ay, x1-dir*4, ay)
		c.Arrowhead(x1, ay, dir, 0, "#1f2d3d")
		c.Lines((xs[e.from]+xs[e.to])/2, labelTop[i]+12, e.text, 12, false, "middle", "#111111")
	}
	for i, e := range s.events {
		switch e.kind {
		case "note":
			w := svgdraw.MaxWidth(e.text, 12, false) + 16
			var x0 float64
			switch {
			case e.side == "over" && e.from == e.to:
				x0 = xs[e.from] - w/2
			case e.side == "over":
				span := xs[e.to] - xs[e.from] + 40
				w = max(w, span)
				x0 = (xs[e.from]+xs[e.to])/2 - w/2
			case e.side == "right":
				x0 = xs[e.from] + seqBarHalf + 4
			case e.side == "left":
				x0 = xs[e.from] - seqBarHalf - 4 - w
			}
			h := svgdraw.TextHeight(len(e.text)) + 10
			c.Printf(`<path d="M%s,%s H%s L%s,%s V%s H%s Z" fill="#fff8d6" stroke="#b59a3a"/>`+"\n",
				svgdraw.Num(x0), svgdraw.Num(labelTop[i]), svgdraw.Num(x0+w-8), svgdraw.Num(x0+w), svgdraw.Num(labelTop[i]+8), svgdraw.Num(labelTop[i]+h), svgdraw.Num(x0))
			c.Lines(x0+8, labelTop[i]+5+12, e.text, 12, false, "start", "#111111")
		case "divider":
			my := labelTop[i] + svgdraw.TextHeight(len(e.text))/2 + 2
			c.Line("#8c96a0", 1, "2 3", seqMargin, my, wTotal-seqMargin, my)
			w := svgdraw.MaxWidth(e.text, 12, false) + 16
			c.Rect(wTotal/2-w/2, labelTop[i], w, svgdraw.TextHeight(len(e.text))+4, 3, "#ffffff", "#8c96a0", "")
			c.Lines(wTotal/2, labelTop[i]+13, e.text, 12, false, "middle", "#333333")
		}
	}
	return c.SVG(wTotal, hTotal, s.title), nil
}

// maxDepth is the deepest nesting of frames.
func maxDepth(fs []seqFrame) int {
	d := 0
	for _, f := range fs {
		d = max(d, f.depth)
	}
	return d
}

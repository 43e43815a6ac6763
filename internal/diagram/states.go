package main

// State diagrams (NAME.states). One statement a line; # starts a comment
// line. In every text, \n breaks the line and `backticks` set code in the
// monospaced font.
//
//	title: TEXT
//	group ID "TITLE" "LINE" ...              a box around states
//	state ID "NAME" "LINE" ... [in GROUP] [start]
//	edge FROM -> TO: LABEL                    FROM and TO: states or groups
//
// Layout, in layers from left to right:
//
//   - A block is a group, or a state outside any group. Edges between
//     blocks are forward, or back where they close a cycle (found by a
//     depth-first search in the order of the source). A block's layer is
//     the longest path of forward edges that leads to it; a forward edge
//     must span one layer.
//   - A layer's states are stacked top to bottom in the order of the
//     source, all as wide as the widest; each sits at the mean height of
//     the states its edges lead to (an edge from a group counts for its
//     first state), or lower if the one above needs the room.
//   - A forward edge leaves its source on the right, runs to a vertical
//     bus of its own in the gap, and enters its target from the left, its
//     label above that last stretch. An edge between two consecutive
//     states of one group runs straight down, its label beside it. A back
//     edge runs below everything, its label above that stretch. An edge
//     from a block to itself loops over the block, its label above.
//
// The result is checked: no label may overlap a box, another label or an
// edge; a source that would need one is refused.

import (
	"errors"
	"fmt"
	"math"
	"strings"

	"github.com/sqlelect/election/internal/svgdraw"
)

type stNode struct {
	id     string
	lines  []string
	group  int // -1 outside any
	start  bool
	block  int
	layer  int
	x, y   float64 // left edge, and centre height
	w, h   float64
	inEdge int // the forward edge that enters it, or -1
}

type stGroup struct {
	id      string
	lines   []string
	members []int
	block   int
}

type stEdge struct {
	src      sourceLine
	from, to string
	label    []string
	kind     string // forward, back, intra, self
	fromB    int
	toB      int
	bus      int // forward: the bus's index in its gap
	path     []float64
	headDX   float64
	headDY   float64
	labelBox box
}

type box struct{ x0, y0, x1, y1 float64 }

func (b box) overlaps(o box) bool {
	return b.x0 < o.x1 && o.x0 < b.x1 && b.y0 < o.y1 && o.y0 < b.y1
}

// block is a group, or a state outside groups.
type stBlock struct {
	group int // or -1
	node  int // when group is -1
	layer int
	self  int // the edge looping over it, or -1
	first int // its first node
}

type stDiagram struct {
	title  string
	nodes  []stNode
	groups []stGroup
	edges  []stEdge
	blocks []stBlock
}

func parseStates(src string) (*stDiagram, error) {
	d := &stDiagram{}
	nodeIdx, groupIdx := map[string]int{}, map[string]int{}
	for _, l := range sourceLines(src) {
		t := l.text
		switch {
		case strings.HasPrefix(t, "title:"):
			d.title = strings.TrimSpace(strings.TrimPrefix(t, "title:"))
		case strings.HasPrefix(t, "group "):
			id, rest, _ := strings.Cut(strings.TrimPrefix(t, "group "), " ")
			lines, extra, err := quoted(rest)
			if err != nil || extra != "" || len(lines) == 0 {
				return nil, l.errorf(`want: group ID "TITLE" ...`)
			}
			if _, dup := groupIdx[id]; dup {
				return nil, l.errorf("%q declared twice", id)
			}
			groupIdx[id] = len(d.groups)
			d.groups = append(d.groups, stGroup{id: id, lines: lines})
		case strings.HasPrefix(t, "state "):
			id, rest, _ := strings.Cut(strings.TrimPrefix(t, "state "), " ")
			lines, extra, err := quoted(rest)
			if err != nil || len(lines) == 0 {
				return nil, l.errorf(`want: state ID "NAME" ... [in GROUP] [start]`)
			}
			if _, dup := nodeIdx[id]; dup {
				return nil, l.errorf("%q declared twice", id)
			}
			if _, dup := groupIdx[id]; dup {
				return nil, l.errorf("%q names a group", id)
			}
			n := stNode{id: id, lines: lines, group: -1, inEdge: -1}
			f := strings.Fields(extra)
			for i := 0; i < len(f); i++ {
				switch {
				case f[i] == "start":
					n.start = true
				case f[i] == "in" && i+1 < len(f):
					g, ok := groupIdx[f[i+1]]
					if !ok {
						return nil, l.errorf("unknown group %q (declare it first)", f[i+1])
					}
					n.group = g
					i++
				default:
					return nil, l.errorf("unexpected %q", f[i])
				}
			}
			nodeIdx[id] = len(d.nodes)
			if n.group >= 0 {
				d.groups[n.group].members = append(d.groups[n.group].members, len(d.nodes))
			}
			d.nodes = append(d.nodes, n)
		case strings.HasPrefix(t, "edge "):
			arrow, label, ok := strings.Cut(strings.TrimPrefix(t, "edge "), ":")
			from, to, ok2 := strings.Cut(arrow, "->")
			if !ok || !ok2 {
				return nil, l.errorf("want: edge FROM -> TO: LABEL")
			}
			d.edges = append(d.edges, stEdge{src: l, from: strings.TrimSpace(from), to: strings.TrimSpace(to), label: splitLabel(label)})
		default:
			return nil, l.errorf("not a statement: %q", t)
		}
	}
	for _, g := range d.groups {
		if len(g.members) == 0 {
			return nil, fmt.Errorf("group %q has no states", g.id)
		}
	}
	// Blocks, in the order of the source.
	blockOfGroup := map[int]int{}
	for i := range d.nodes {
		n := &d.nodes[i]
		if n.group < 0 {
			n.block = len(d.blocks)
			d.blocks = append(d.blocks, stBlock{group: -1, node: i, self: -1, first: i})
			continue
		}
		b, ok := blockOfGroup[n.group]
		if !ok {
			b = len(d.blocks)
			blockOfGroup[n.group] = b
			d.groups[n.group].block = b
			d.blocks = append(d.blocks, stBlock{group: n.group, node: -1, self: -1, first: i})
		}
		n.block = b
	}
	endpoint := func(e stEdge, id string) (int, error) {
		if i, ok := nodeIdx[id]; ok {
			return d.nodes[i].block, nil
		}
		if g, ok := groupIdx[id]; ok {
			return d.groups[g].block, nil
		}
		return 0, e.src.errorf("unknown state or group %q", id)
	}
	for i := range d.edges {
		e := &d.edges[i]
		var err error
		if e.fromB, err = endpoint(*e, e.from); err != nil {
			return nil, err
		}
		if e.toB, err = endpoint(*e, e.to); err != nil {
			return nil, err
		}
		switch {
		case e.from == e.to:
			if _, isNode := nodeIdx[e.from]; isNode && d.nodes[nodeIdx[e.from]].group >= 0 {
				return nil, e.src.errorf("a loop may go over a group or a state outside groups only")
			}
			if d.blocks[e.fromB].self >= 0 {
				return nil, e.src.errorf("a second loop over %q", e.from)
			}
			e.kind = "self"
			d.blocks[e.fromB].self = i
		case e.fromB == e.toB:
			a, aok := nodeIdx[e.from]
			b, bok := nodeIdx[e.to]
			if !aok || !bok {
				return nil, e.src.errorf("an edge within a group joins two of its states")
			}
			if !consecutive(d.groups[d.nodes[a].group].members, a, b) {
				return nil, e.src.errorf("an edge within a group must go to the next state of the group")
			}
			e.kind = "intra"
		}
	}
	// Back edges: those that close a cycle, in a depth-first search.
	state := make([]int, len(d.blocks)) // 0 new, 1 on the stack, 2 done
	var visit func(b int)
	visit = func(b int) {
		state[b] = 1
		for i := range d.edges {
			e := &d.edges[i]
			if e.kind != "" || e.fromB != b {
				continue
			}
			switch state[e.toB] {
			case 1:
				e.kind = "back"
			case 0:
				e.kind = "forward"
				visit(e.toB)
			default:
				e.kind = "forward"
			}
		}
		state[b] = 2
	}
	for b := range d.blocks {
		if state[b] == 0 {
			visit(b)
		}
	}
	// Layers: the longest path of forward edges.
	for range d.blocks {
		for _, e := range d.edges {
			if e.kind == "forward" {
				d.blocks[e.toB].layer = max(d.blocks[e.toB].layer, d.blocks[e.fromB].layer+1)
			}
		}
	}
	for i, e := range d.edges {
		if e.kind != "forward" {
			continue
		}
		if d.blocks[e.toB].layer != d.blocks[e.fromB].layer+1 {
			return nil, e.src.errorf("a forward edge must span one layer; this one spans %d", d.blocks[e.toB].layer-d.blocks[e.fromB].layer)
		}
		t, ok := nodeIdx[e.to]
		if !ok {
			return nil, e.src.errorf("a forward edge must end at a state")
		}
		if d.nodes[t].inEdge >= 0 {
			return nil, e.src.errorf("%q has a forward edge into it already", e.to)
		}
		d.nodes[t].inEdge = i
	}
	for i := range d.nodes {
		d.nodes[i].layer = d.blocks[d.nodes[i].block].layer
	}
	return d, nil
}

func consecutive(members []int, a, b int) bool {
	for i := 0; i+1 < len(members); i++ {
		if members[i] == a && members[i+1] == b {
			return true
		}
	}
	return false
}

const (
	stMargin   = 16.0
	stGroupPad = 12.0
	stLoopH    = 20.0
	stNodeGap  = 14.0
)

func drawStates(src string) ([]byte, error) {
	d, err := parseStates(src)
	if err != nil {
		return nil, err
	}
	nodeIdx := map[string]int{}
	for i, n := range d.nodes {
		nodeIdx[n.id] = i
	}
	groupIdx := map[string]int{}
	for i, g := range d.groups {
		groupIdx[g.id] = i
	}
	layers := 0
	for _, n := range d.nodes {
		layers = max(layers, n.layer+1)
	}
	// Each layer's states, top to bottom: by block, then as declared.
	order := make([][]int, layers)
	for b := range d.blocks {
		for i, n := range d.nodes {
			if n.block == b {
				order[n.layer] = append(order[n.layer], i)
			}
		}
	}
	labelH := func(e stEdge) float64 { return svgdraw.TextHeight(len(e.label)) }
	groupTitleH := func(g int) float64 { return svgdraw.TextHeight(len(d.groups[g].lines)) + 6 }

	// Widths.
	inner := make([]float64, layers) // the states' width
	hasGroup := make([]bool, layers)
	for i := range d.nodes {
		n := &d.nodes[i]
		n.w = svgdraw.MaxWidth(n.lines, 12, true) + 24
		n.h = svgdraw.TextHeight(len(n.lines)) + 12
		inner[n.layer] = max(inner[n.layer], n.w)
		if n.group >= 0 {
			hasGroup[n.layer] = true
		}
	}
	for _, e := range d.edges {
		switch e.kind {
		case "intra":
			l := d.nodes[nodeIdx[e.from]].layer
			inner[l] = max(inner[l], 26+svgdraw.MaxWidth(e.label, 12, false)+8)
		case "self":
			l := d.blocks[e.fromB].layer
			pad := 0.0
			if d.blocks[e.fromB].group >= 0 {
				pad = 2 * stGroupPad
			}
			inner[l] = max(inner[l], svgdraw.MaxWidth(e.label, 12, false)+16-pad)
		}
	}
	for _, g := range d.groups {
		l := d.nodes[g.members[0]].layer
		inner[l] = max(inner[l], svgdraw.MaxWidth(g.lines, 12, true)+16-2*stGroupPad)
	}
	outer := make([]float64, layers)
	for l := range outer {
		outer[l] = inner[l]
		if hasGroup[l] {
			outer[l] += 2 * stGroupPad
		}
	}
	// Gaps: after layer l, a bus per source with forward edges, then the
	// labels.
	buses := make([]int, layers)
	labelW := make([]float64, layers)
	busOf := map[string]int{}
	for i := range d.edges {
		e := &d.edges[i]
		if e.kind != "forward" {
			continue
		}
		l := d.blocks[e.fromB].layer
		key := fmt.Sprint(l, "/", e.from)
		b, ok := busOf[key]
		if !ok {
			b = buses[l]
			busOf[key] = b
			buses[l]++
		}
		e.bus = b
		labelW[l] = max(labelW[l], svgdraw.MaxWidth(e.label, 12, false))
	}
	left := make([]float64, layers) // each layer's left edge
	x := stMargin
	for l := 0; l < layers; l++ {
		left[l] = x
		x += outer[l]
		if l+1 < layers {
			x += 12 + 10*float64(max(buses[l]-1, 0)) + 14 + labelW[l] + 12
		}
	}
	wTotal := x + stMargin
	for i := range d.nodes {
		n := &d.nodes[i]
		n.x = left[n.layer]
		if hasGroup[n.layer] {
			n.x += stGroupPad
		}
		n.w = inner[n.layer]
	}

	// Heights: the room a state needs above its centre, from the one above.
	topRoom := func(i int) float64 { // above the box, within its layer
		n := d.nodes[i]
		r := 0.0
		b := d.blocks[n.block]
		if b.first == i {
			if n.group >= 0 {
				r += stGroupPad + groupTitleH(n.group)
			}
			if b.self >= 0 {
				r += stLoopH + labelH(d.edges[b.self]) + 8
			}
		}
		return r
	}
	bottomRoom := func(i int) float64 {
		n := d.nodes[i]
		if n.group >= 0 {
			m := d.groups[n.group].members
			if m[len(m)-1] == i {
				return stGroupPad
			}
		}
		return 0
	}
	minDist := func(a, b int) float64 {
		na, nb := d.nodes[a], d.nodes[b]
		dist := na.h/2 + nb.h/2 + stNodeGap + bottomRoom(a) + topRoom(b)
		if na.block != nb.block {
			dist += 8
		}
		for _, e := range d.edges {
			if e.kind == "intra" && e.from == na.id && e.to == nb.id {
				dist = max(dist, na.h/2+nb.h/2+labelH(e)+16)
			}
		}
		if nb.inEdge >= 0 {
			dist = max(dist, labelH(d.edges[nb.inEdge])+10)
		}
		return dist
	}
	targets := func(i int) []float64 {
		var ys []float64
		n := d.nodes[i]
		for _, e := range d.edges {
			if e.kind != "forward" {
				continue
			}
			fromHere := e.from == n.id || n.group >= 0 && e.from == d.groups[n.group].id && d.groups[n.group].members[0] == i
			if fromHere {
				ys = append(ys, d.nodes[nodeIdx[e.to]].y)
			}
		}
		return ys
	}
	for l := layers - 1; l >= 0; l-- {
		for k, i := range order[l] {
			want := math.Inf(-1)
			if ys := targets(i); len(ys) > 0 {
				sum := 0.0
				for _, y := range ys {
					sum += y
				}
				want = sum / float64(len(ys))
			}
			if k == 0 {
				if math.IsInf(want, -1) {
					want = 0
				}
				d.nodes[i].y = want
				continue
			}
			prev := order[l][k-1]
			d.nodes[i].y = max(want, d.nodes[prev].y+minDist(prev, i))
		}
	}

	// Groups' boxes, and the top of everything, then shift it all down
	// below the title.
	groupBox := func(g int) box {
		m := d.groups[g].members
		first, last := d.nodes[m[0]], d.nodes[m[len(m)-1]]
		return box{first.x - stGroupPad, first.y - first.h/2 - stGroupPad - groupTitleH(g), first.x + first.w + stGroupPad, last.y + last.h/2 + stGroupPad}
	}
	blockBox := func(b int) box {
		if g := d.blocks[b].group; g >= 0 {
			return groupBox(g)
		}
		n := d.nodes[d.blocks[b].node]
		return box{n.x, n.y - n.h/2, n.x + n.w, n.y + n.h/2}
	}
	top := math.Inf(1)
	for i, n := range d.nodes {
		top = min(top, n.y-n.h/2-topRoom(i))
		if n.inEdge >= 0 {
			top = min(top, n.y-labelH(d.edges[n.inEdge])-6)
		}
	}
	shift := stMargin - top
	if d.title != "" {
		shift += 28
	}
	for i := range d.nodes {
		d.nodes[i].y += shift
	}
	bottom := 0.0
	for b := range d.blocks {
		bottom = max(bottom, blockBox(b).y1)
	}

	// Edges.
	var labels []box
	lane := bottom + 12
	for i := range d.edges {
		e := &d.edges[i]
		lw, lh := svgdraw.MaxWidth(e.label, 12, false), labelH(*e)
		switch e.kind {
		case "forward":
			l := d.blocks[e.fromB].layer
			gapStart := left[l] + outer[l]
			busX := gapStart + 12 + 10*float64(e.bus)
			var x0, y0 float64
			if g, isGroup := groupIdx[e.from]; isGroup {
				f := d.nodes[d.groups[g].members[0]]
				x0, y0 = groupBox(g).x1, f.y
			} else {
				f := d.nodes[nodeIdx[e.from]]
				x0, y0 = f.x+f.w, f.y
			}
			t := d.nodes[nodeIdx[e.to]]
			x1 := t.x
			if t.group >= 0 {
				x1 = groupBox(t.group).x0
			}
			if y0 == t.y {
				e.path = []float64{x0, y0, x1, t.y}
			} else {
				e.path = []float64{x0, y0, busX, y0, busX, t.y, x1, t.y}
			}
			e.headDX = 1
			lx := gapStart + 12 + 10*float64(max(buses[l]-1, 0)) + 14
			e.labelBox = box{lx, t.y - 4 - lh, lx + lw, t.y - 4}
			if e.labelBox.x1 > x1-4 {
				return nil, e.src.errorf("label too wide for its gap")
			}
		case "intra":
			a, b := d.nodes[nodeIdx[e.from]], d.nodes[nodeIdx[e.to]]
			ax := a.x + 16
			e.path = []float64{ax, a.y + a.h/2, ax, b.y - b.h/2}
			e.headDY = 1
			mid := (a.y + a.h/2 + b.y - b.h/2) / 2
			e.labelBox = box{ax + 10, mid - lh/2, ax + 10 + lw, mid + lh/2}
		case "self":
			bb := blockBox(e.fromB)
			w := bb.x1 - bb.x0
			xa, xb := bb.x0+w*0.3, bb.x0+w*0.7
			e.path = []float64{xa, bb.y0, xa, bb.y0 - stLoopH, xb, bb.y0 - stLoopH, xb, bb.y0}
			e.headDY = 1
			cx := (bb.x0 + bb.x1) / 2
			e.labelBox = box{cx - lw/2, bb.y0 - stLoopH - 4 - lh, cx + lw/2, bb.y0 - stLoopH - 4}
		case "back":
			sb, tb := blockBox(e.fromB), blockBox(e.toB)
			sx, tx := (sb.x0+sb.x1)/2, (tb.x0+tb.x1)/2
			ly := lane + lh + 6
			lane = ly + 10
			e.path = []float64{sx, sb.y1, sx, ly, tx, ly, tx, tb.y1}
			e.headDY = -1
			cx := (sx + tx) / 2
			e.labelBox = box{cx - lw/2, ly - 4 - lh, cx + lw/2, ly - 4}
			if lw > math.Abs(sx-tx)-16 {
				return nil, e.src.errorf("label wider than the stretch under it")
			}
		}
		labels = append(labels, e.labelBox)
	}
	hTotal := max(lane, bottom) + stMargin
	for _, e := range d.edges {
		if e.kind == "self" {
			wTotal = max(wTotal, e.labelBox.x1+stMargin)
		}
	}
	if d.title != "" {
		wTotal = max(wTotal, svgdraw.Width(d.title, 14, true)+2*stMargin)
	}
	if err := d.checkOverlaps(labels); err != nil {
		return nil, err
	}

	var c svgdraw.Canvas
	if d.title != "" {
		c.Text(stMargin, stMargin+14, d.title, 14, true, "start", "#111111")
	}
	for g := range d.groups {
		b := groupBox(g)
		c.Rect(b.x0, b.y0, b.x1-b.x0, b.y1-b.y0, 8, "#f5f7fa", "#8c96a0", "")
		c.Lines(b.x0+8, b.y0+4+12, d.groups[g].lines, 12, true, "start", "#333333")
	}
	for _, n := range d.nodes {
		fill, stroke, dash := "#e8eef7", "#3a4a5c", ""
		if n.start {
			fill, dash = "#ffffff", "5 3"
		}
		c.Rect(n.x, n.y-n.h/2, n.w, n.h, 6, fill, stroke, dash)
		c.Lines(n.x+n.w/2, n.y-n.h/2+6+12, n.lines, 12, true, "middle", "#111111")
	}
	for _, e := range d.edges {
		p := e.path
		ex, ey := p[len(p)-2], p[len(p)-1]
		q := append([]float64(nil), p...)
		q[len(q)-2], q[len(q)-1] = ex-e.headDX*4, ey-e.headDY*4
		c.Line("#1f2d3d", 1.3, "", q...)
		c.Arrowhead(ex, ey, e.headDX, e.headDY, "#1f2d3d")
		b := e.labelBox
		switch e.kind {
		case "self", "back":
			c.Lines((b.x0+b.x1)/2, b.y0+12, e.label, 12, false, "middle", "#111111")
		default:
			c.Lines(b.x0, b.y0+12, e.label, 12, false, "start", "#111111")
		}
	}
	return c.SVG(wTotal, hTotal, d.title), nil
}

// checkOverlaps refuses a layout where a label overlaps a state's box,
// another label or an edge.
func (d *stDiagram) checkOverlaps(labels []box) error {
	var errs []error
	for i, a := range labels {
		for j := i + 1; j < len(labels); j++ {
			if a.overlaps(labels[j]) {
				errs = append(errs, d.edges[i].src.errorf("its label overlaps that of line %d", d.edges[j].src.n))
			}
		}
		for _, n := range d.nodes {
			if a.overlaps(box{n.x, n.y - n.h/2, n.x + n.w, n.y + n.h/2}) {
				errs = append(errs, d.edges[i].src.errorf("its label overlaps state %q", n.id))
			}
		}
		for j, e := range d.edges {
			p := e.path
			for k := 0; k+3 < len(p); k += 2 {
				seg := box{min(p[k], p[k+2]), min(p[k+1], p[k+3]), max(p[k], p[k+2]), max(p[k+1], p[k+3])}
				seg.x0, seg.x1, seg.y0, seg.y1 = seg.x0-1, seg.x1+1, seg.y0-1, seg.y1+1
				if a.overlaps(seg) {
					errs = append(errs, d.edges[i].src.errorf("its label overlaps the edge of line %d", d.edges[j].src.n))
					break
				}
			}
		}
	}
	return errors.Join(errs...)
}

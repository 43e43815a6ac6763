// Package svgdraw writes the SVG of the project's pictures (the design
// diagrams, an election's history): text whose width is
// estimated from fixed tables (no font is read, so the layout is the same
// on every machine), and a writer that formats every number one way.
package svgdraw

import (
	"fmt"
	"math"
	"strconv"
	"strings"
)

// Fonts. The sans-serif widths below are DejaVu Sans's, the widest of the
// families named; a narrower font (Verdana is about as wide, Helvetica and
// Arial are narrower) only leaves more room. Monospaced fonts advance 0.6
// em (DejaVu Sans Mono, Menlo; Consolas 0.55).
const (
	SansFamily = "DejaVu Sans, Verdana, sans-serif"
	MonoFamily = "DejaVu Sans Mono, Menlo, Consolas, monospace"
	LineHeight = 16.0 // for a font size of 12
)

// run is a piece of a line of text: prose, or code (between backticks in
// the sources), which is set in the monospaced font.
type run struct {
	text string
	code bool
}

// runs splits a line at its backticks.
func runs(line string) []run {
	var out []run
	for i, part := range strings.Split(line, "`") {
		if part != "" {
			out = append(out, run{part, i%2 == 1})
		}
	}
	return out
}

// sansWidths and sansBoldWidths hold DejaVu Sans's and DejaVu Sans
// Bold's advance widths of the printable ASCII characters, in em, from
// ' ' (0x20) on, as the fonts' hmtx tables give them.
var sansWidths = [...]float64{
	0.318, 0.401, 0.460, 0.838, 0.636, 0.950, 0.780, 0.275, 0.390, 0.390, 0.500, 0.838, 0.318, 0.361, 0.318, 0.337, // space to /
	0.636, 0.636, 0.636, 0.636, 0.636, 0.636, 0.636, 0.636, 0.636, 0.636, 0.337, 0.337, 0.838, 0.838, 0.838, 0.531, // 0 to ?
	1.000, 0.684, 0.686, 0.698, 0.770, 0.632, 0.575, 0.775, 0.752, 0.295, 0.295, 0.656, 0.557, 0.863, 0.748, 0.787, // @ to O
	0.603, 0.787, 0.695, 0.635, 0.611, 0.732, 0.684, 0.989, 0.685, 0.611, 0.685, 0.390, 0.337, 0.390, 0.838, 0.500, // P to _
	0.500, 0.613, 0.635, 0.550, 0.635, 0.615, 0.352, 0.635, 0.634, 0.278, 0.278, 0.579, 0.278, 0.974, 0.634, 0.612, // ` to o
	0.635, 0.635, 0.411, 0.521, 0.392, 0.634, 0.592, 0.818, 0.592, 0.592, 0.525, 0.636, 0.337, 0.636, 0.838, // p to ~
}

var sansBoldWidths = [...]float64{
	0.348, 0.456, 0.521, 0.838, 0.696, 1.002, 0.872, 0.306, 0.457, 0.457, 0.523, 0.838, 0.380, 0.415, 0.380, 0.365, // space to /
	0.696, 0.696, 0.696, 0.696, 0.696, 0.696, 0.696, 0.696, 0.696, 0.696, 0.400, 0.400, 0.838, 0.838, 0.838, 0.580, // 0 to ?
	1.000, 0.774, 0.762, 0.734, 0.830, 0.683, 0.683, 0.821, 0.837, 0.372, 0.372, 0.775, 0.637, 0.995, 0.837, 0.850, // @ to O
	0.733, 0.850, 0.770, 0.720, 0.682, 0.812, 0.774, 1.103, 0.771, 0.724, 0.725, 0.457, 0.365, 0.457, 0.838, 0.500, // P to _
	0.500, 0.675, 0.716, 0.593, 0.716, 0.678, 0.435, 0.716, 0.712, 0.343, 0.343, 0.665, 0.343, 1.042, 0.712, 0.687, // ` to o
	0.716, 0.716, 0.493, 0.595, 0.478, 0.712, 0.652, 0.924, 0.645, 0.652, 0.582, 0.712, 0.365, 0.712, 0.838, // p to ~
}

// Width estimates how wide a line is at font size size: 3 % more than in
// DejaVu Sans, which leaves room for Verdana, about as wide (its spaces are
// a little wider). Code advances 0.602 em, bold or not; a character
// outside ASCII (→, ≥, …) is taken as 1 em, the widest of those DejaVu
// Sans has.
func Width(line string, size float64, bold bool) float64 {
	table := &sansWidths
	if bold {
		table = &sansBoldWidths
	}
	w := 0.0
	for _, r := range runs(line) {
		for _, c := range r.text {
			switch {
			case r.code:
				w += 0.602
			case c >= ' ' && c <= '~':
				w += table[c-' ']
			default:
				w += 1
			}
		}
	}
	return w * size * 1.03
}

// MaxWidth is the width of the widest of lines.
func MaxWidth(lines []string, size float64, bold bool) float64 {
	w := 0.0
	for _, l := range lines {
		w = max(w, Width(l, size, bold))
	}
	return w
}

// Canvas collects the elements of one SVG picture.
type Canvas struct{ b strings.Builder }

// Num formats a coordinate to a tenth of a pixel, with no trailing zeros.
func Num(v float64) string {
	return strconv.FormatFloat(math.Round(v*10)/10, 'f', -1, 64)
}

// Escape makes s safe in XML text and attributes.
func Escape(s string) string {
	return strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;", `"`, "&quot;").Replace(s)
}

// Printf writes raw SVG, for an element the methods below do not draw.
func (c *Canvas) Printf(format string, args ...any) { fmt.Fprintf(&c.b, format, args...) }

// Rect draws a rectangle; rx rounds its corners; dash, if not empty, is its
// stroke-dasharray.
func (c *Canvas) Rect(x, y, w, h, rx float64, fill, stroke string, dash string) {
	c.Printf(`<rect x="%s" y="%s" width="%s" height="%s"`, Num(x), Num(y), Num(w), Num(h))
	if rx > 0 {
		c.Printf(` rx="%s"`, Num(rx))
	}
	c.Printf(` fill="%s" stroke="%s"`, fill, stroke)
	if dash != "" {
		c.Printf(` stroke-dasharray="%s"`, dash)
	}
	c.Printf("/>\n")
}

// Line draws a polyline through points (x0, y0, x1, y1, ...).
func (c *Canvas) Line(stroke string, w float64, dash string, pts ...float64) {
	var p []string
	for i := 0; i+1 < len(pts); i += 2 {
		p = append(p, Num(pts[i])+","+Num(pts[i+1]))
	}
	c.Printf(`<polyline points="%s" fill="none" stroke="%s" stroke-width="%s"`, strings.Join(p, " "), stroke, Num(w))
	if dash != "" {
		c.Printf(` stroke-dasharray="%s"`, dash)
	}
	c.Printf("/>\n")
}

// Arrowhead draws a filled arrowhead whose tip is at (x, y), pointing
// along (dx, dy), a unit vector on an axis.
func (c *Canvas) Arrowhead(x, y, dx, dy float64, fill string) {
	const length, half = 9, 4.5
	bx, by := x-dx*length, y-dy*length
	c.Printf(`<polygon points="%s,%s %s,%s %s,%s" fill="%s"/>`+"\n",
		Num(x), Num(y), Num(bx-dy*half), Num(by+dx*half), Num(bx+dy*half), Num(by-dx*half), fill)
}

// Text writes one line at baseline y; anchor is start, middle or end.
// Code runs are set in the monospaced font.
func (c *Canvas) Text(x, y float64, line string, size float64, bold bool, anchor, fill string) {
	c.Printf(`<text x="%s" y="%s" font-size="%s"`, Num(x), Num(y), Num(size))
	if anchor != "start" {
		c.Printf(` text-anchor="%s"`, anchor)
	}
	if bold {
		c.Printf(` font-weight="bold"`)
	}
	if fill != "" {
		c.Printf(` fill="%s"`, fill)
	}
	c.Printf(">")
	for _, r := range runs(line) {
		if r.code {
			c.Printf(`<tspan font-family="%s">%s</tspan>`, MonoFamily, Escape(r.text))
		} else {
			c.Printf("<tspan>%s</tspan>", Escape(r.text))
		}
	}
	c.Printf("</text>\n")
}

// Lines writes lines one under the other, the first baseline at y.
func (c *Canvas) Lines(x, y float64, ls []string, size float64, bold bool, anchor, fill string) {
	for i, l := range ls {
		c.Text(x, y+float64(i)*LineHeight*size/12, l, size, bold && i == 0, anchor, fill)
	}
}

// SVG wraps the elements into a document of the given size.
func (c *Canvas) SVG(w, h float64, title string) []byte {
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%s" height="%s" viewBox="0 0 %s %s" font-family="%s" font-size="12" xml:space="preserve">`+"\n",
		Num(w), Num(h), Num(w), Num(h), SansFamily)
	fmt.Fprintf(&b, "<title>%s</title>\n", Escape(strings.ReplaceAll(title, "`", "")))
	fmt.Fprintf(&b, `<rect width="100%%" height="100%%" fill="#ffffff"/>`+"\n")
	b.WriteString(c.b.String())
	b.WriteString("</svg>\n")
	return []byte(b.String())
}

// TextHeight is the height of n lines at font size 12.
func TextHeight(n int) float64 { return float64(n) * LineHeight }

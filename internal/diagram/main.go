// Command diagram draws the protocol's pictures (docs/protocol.md) from
// their sources in docs/diagrams, so that the pictures cannot drift from
// text that is reviewed with the code:
//
//   - NAME.seq, a sequence diagram: participants, messages, notes, loops
//     and the spans of terms, in order, drawn as lifelines with the
//     messages top to bottom; it writes NAME.svg;
//   - NAME.states, a state diagram: states, groups of states and labelled
//     transitions, drawn in layers from left to right; it writes
//     NAME-states.svg.
//
// Each format is described at the top of its file (seq.go, states.go).
// The layout is computed, not tuned: text widths come from fixed tables
// (svg.go), so the output depends only on the source. A layout that would
// overlap (a label wider than the room its arrow has) is refused with an
// error naming the line, rather than drawn.
//
// Run it from the repository's root (scripts/diagrams.sh):
//
//	go run ./internal/diagram
//
// The package's test regenerates every picture and fails if one checked
// into docs/ differs.
package main

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

func main() {
	src := flag.String("src", "docs/diagrams", "the directory of the sources")
	out := flag.String("out", "docs", "the directory the pictures are written to")
	flag.Parse()
	written, err := generate(*src, *out)
	if err != nil {
		fmt.Fprintln(os.Stderr, "diagram:", err)
		os.Exit(1)
	}
	for _, w := range written {
		fmt.Println("wrote", w)
	}
}

// outputName is the picture a source is drawn into, and the kind of
// diagram it holds; "" if the file is no source.
func outputName(src string) (name, kind string) {
	base := filepath.Base(src)
	switch ext := filepath.Ext(base); ext {
	case ".seq":
		return strings.TrimSuffix(base, ext) + ".svg", "sequence"
	case ".states":
		return strings.TrimSuffix(base, ext) + "-states.svg", "states"
	}
	return "", ""
}

// generate draws every source in srcDir into outDir and returns the paths
// it wrote, in order.
func generate(srcDir, outDir string) ([]string, error) {
	entries, err := os.ReadDir(srcDir)
	if err != nil {
		return nil, err
	}
	var names []string
	for _, e := range entries {
		if name, _ := outputName(e.Name()); name != "" && !e.IsDir() {
			names = append(names, e.Name())
		}
	}
	sort.Strings(names)
	if len(names) == 0 {
		return nil, errors.New("no sources (*.seq, *.states) in " + srcDir)
	}
	var written []string
	for _, n := range names {
		src, err := os.ReadFile(filepath.Join(srcDir, n))
		if err != nil {
			return nil, err
		}
		svg, err := render(n, string(src))
		if err != nil {
			return nil, err
		}
		name, _ := outputName(n)
		path := filepath.Join(outDir, name)
		if err := os.WriteFile(path, svg, 0o644); err != nil {
			return nil, err
		}
		written = append(written, path)
	}
	return written, nil
}

// render draws the source called name.
func render(name, src string) ([]byte, error) {
	var (
		svg []byte
		err error
	)
	switch _, kind := outputName(name); kind {
	case "sequence":
		svg, err = drawSequence(src)
	case "states":
		svg, err = drawStates(src)
	default:
		err = errors.New("not a source")
	}
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	return svg, nil
}

// sourceLine is one meaningful line of a source: its number, for errors,
// and its text, trimmed. Blank lines and lines starting with # are
// skipped.
type sourceLine struct {
	n    int
	text string
}

func sourceLines(src string) []sourceLine {
	var out []sourceLine
	for i, l := range strings.Split(src, "\n") {
		l = strings.TrimSpace(l)
		if l == "" || strings.HasPrefix(l, "#") {
			continue
		}
		out = append(out, sourceLine{i + 1, l})
	}
	return out
}

func (l sourceLine) errorf(format string, args ...any) error {
	return fmt.Errorf("line %d: %s", l.n, fmt.Sprintf(format, args...))
}

// quoted parses a run of double-quoted strings ("a" "b"), and returns them
// and what follows them.
func quoted(s string) (strs []string, rest string, err error) {
	s = strings.TrimSpace(s)
	for strings.HasPrefix(s, `"`) {
		end := strings.Index(s[1:], `"`)
		if end < 0 {
			return nil, "", errors.New("unterminated string")
		}
		strs = append(strs, s[1:1+end])
		s = strings.TrimSpace(s[2+end:])
	}
	return strs, s, nil
}

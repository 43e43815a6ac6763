package main

// The SVG itself is written by internal/svgdraw, which the history
// picture of electctl shares; what is left here is the sources' syntax.

import "strings"

// splitLabel splits a label at its "\n"s.
func splitLabel(s string) []string {
	var out []string
	for _, l := range strings.Split(s, `\n`) {
		out = append(out, strings.TrimSpace(l))
	}
	return out
}

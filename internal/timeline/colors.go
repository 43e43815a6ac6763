package timeline

// reasonColors are the bars' fills, by how the term ended: kills and losses
// warm, steps down asked for cool, so that trouble stands out.
var reasonColors = map[string]string{
	Leading:         "#59a14f", // green
	"resigned":      "#4e79a7", // blue
	"demoted":       "#76b7b2", // teal
	"handed-over":   "#a0cbe8", // light blue
	"unhealthy":     "#edc948", // yellow
	"hang-killed":   "#e15759", // red
	"demote-killed": "#b07aa1", // purple
	"lease-expired": "#f28e2b", // orange
	"session-lost":  "#ff9da7", // pink
	"lock-lost":     "#9c755f", // brown
	"lost":          "#79706e", // grey
	"":              "#d4d4d4", // no end recorded: light grey
}

// otherColor fills a bar whose reason this build does not know.
const otherColor = "#bab0ac"

// reasonOrder is the legend's order.
var reasonOrder = []string{Leading, "resigned", "demoted", "handed-over", "unhealthy",
	"hang-killed", "demote-killed", "lease-expired", "session-lost", "lock-lost", "lost", ""}

// ReasonColor is the fill of a bar for a term that ended for reason.
func ReasonColor(reason string) string {
	if c, ok := reasonColors[reason]; ok {
		return c
	}
	return otherColor
}

// reasonLabel is a reason as the legend names it.
func reasonLabel(reason string) string {
	switch reason {
	case "":
		return "no end recorded"
	case Leading:
		return "leading"
	}
	return reason
}

// Colours of what is not a bar.
const (
	gapColor  = "#d62728" // nobody led: the top band's hatching
	gapShade  = "#fbe3e3" // and its shade across the lanes
	ledColor  = "#c7e6c1" // somebody led: the top band
	killColor = "#8b0000" // the cross at a killed term's end
	markColor = "#1f2d3d" // a hand-over's arrow
	inkColor  = "#111111"
	gridColor = "#d0d5db"
	laneColor = "#f5f7fa"
)

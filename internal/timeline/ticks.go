package timeline

import (
	"time"
)

// tickSteps are the steps the time axis's ticks may take.
var tickSteps = []time.Duration{
	time.Millisecond, 2 * time.Millisecond, 5 * time.Millisecond, 10 * time.Millisecond, 20 * time.Millisecond,
	50 * time.Millisecond, 100 * time.Millisecond, 200 * time.Millisecond, 500 * time.Millisecond,
	time.Second, 2 * time.Second, 5 * time.Second, 10 * time.Second, 15 * time.Second, 30 * time.Second,
	time.Minute, 2 * time.Minute, 5 * time.Minute, 10 * time.Minute, 15 * time.Minute, 30 * time.Minute,
	time.Hour, 2 * time.Hour, 3 * time.Hour, 6 * time.Hour, 12 * time.Hour, 24 * time.Hour, 48 * time.Hour, 7 * 24 * time.Hour,
}

// tickFormat is how a tick shows its time at step: milliseconds only when
// the step is shorter than a second, the day only when it is a day or
// more (the tooltips give every term's times whole).
func tickFormat(step time.Duration) string {
	switch {
	case step < time.Second:
		return "15:04:05.000"
	case step >= 24*time.Hour:
		return "Jan 2"
	case step >= time.Hour:
		return "Jan 2 15:04"
	}
	return "15:04:05"
}

// ticks labels the time axis from..to, UTC, at the smallest step whose
// labels leave room between them; a label that would leave the picture
// (0..width) is left out.
func ticks(from, to time.Time, x func(time.Time) float64, x0, y, width float64) []Label {
	perNS := plotWidth / float64(to.Sub(from))
	step := tickSteps[len(tickSteps)-1]
	for _, s := range tickSteps {
		sample := from.UTC().Format(tickFormat(s))
		if float64(s)*perNS >= newLabel(sample, 0, 0, small, false, "middle").Box.W+16 {
			step = s
			break
		}
	}
	var out []Label
	for t := from.UTC().Truncate(step); !t.After(to); t = t.Add(step) {
		if t.Before(from) {
			continue
		}
		lb := newLabel(t.Format(tickFormat(step)), x(t), y, small, false, "middle")
		if lb.Box.X >= 0 && lb.Box.X+lb.Box.W <= width && lb.Box.X >= x0-margin {
			out = append(out, lb)
		}
	}
	return out
}

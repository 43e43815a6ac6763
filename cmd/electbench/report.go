package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"slices"
	"sort"
	"strconv"
	"text/tabwriter"
)

// results are what a comparison writes to -json, and what report reads.
type results struct {
	Server    string        `json:"server"`
	Etcd      []etcdSetting `json:"etcd,omitempty"`
	Timing    timing        `json:"timing"`
	Trials    []trial       `json:"trials"`
	Summaries []summary     `json:"summaries"`
	Verdicts  []verdict     `json:"verdicts"`
	Costs     []steady      `json:"steady_state"`
}

// summary aggregates the trials of one contender and fault.
type summary struct {
	Contender string  `json:"contender"`
	Fault     string  `json:"fault"`
	Runs      int     `json:"runs"`
	NoFail    int     `json:"no_failover"` // runs with no new leader within the limit
	NoLeader  int     `json:"no_leader_before"`
	Missed    int     `json:"trap_missed,omitempty"` // traps no candidate reached
	Outranked int     `json:"outranked,omitempty"`   // runs whose next leader was not the highest priority's
	P50       float64 `json:"failover_p50_s"`        // -1: no failover at all
	P95       float64 `json:"failover_p95_s"`
	Max       float64 `json:"failover_max_s"`
	KnewP50   float64 `json:"old_knew_p50_s"` // -1: the old leader never learned
	Never     int     `json:"old_never_knew"`
}

// quantile is the q-quantile of xs by the nearest-rank method; -1 if xs is
// empty.
func quantile(xs []float64, q float64) float64 {
	if len(xs) == 0 {
		return -1
	}
	s := append([]float64(nil), xs...)
	sort.Float64s(s)
	return s[int(math.Ceil(q*float64(len(s))))-1]
}

// summarize groups trials by contender and fault, in the order they first
// appear.
func summarize(trials []trial) []summary {
	type key struct{ c, f string }
	groups := map[key][]trial{}
	var keys []key
	for _, t := range trials {
		k := key{t.Contender, t.Fault}
		if groups[k] == nil {
			keys = append(keys, k)
		}
		groups[k] = append(groups[k], t)
	}
	var out []summary
	for _, k := range keys {
		s := summary{Contender: k.c, Fault: k.f, Runs: len(groups[k])}
		var fo, knew []float64
		for _, t := range groups[k] {
			switch {
			case t.NoLeader:
				s.NoLeader++
				continue
			case t.Missed:
				s.Missed++
				continue
			}
			if t.Outranked {
				s.Outranked++
			}
			if t.FailoverS < 0 {
				s.NoFail++
			} else {
				fo = append(fo, t.FailoverS)
			}
			if t.KnewS < 0 && learns(t.Fault) {
				s.Never++
			} else if t.KnewS >= 0 {
				knew = append(knew, t.KnewS)
			}
		}
		s.P50, s.P95, s.Max, s.KnewP50 = quantile(fo, 0.5), quantile(fo, 0.95), quantile(fo, 1), quantile(knew, 0.5)
		out = append(out, s)
	}
	return out
}

// secs formats seconds for the table; "-" for none.
func secs(x float64) string {
	switch {
	case x < 0:
		return "-"
	case x < 1:
		return fmt.Sprintf("%.1f ms", x*1000)
	}
	return fmt.Sprintf("%.2f s", x)
}

// printTable writes the failover, checker and steady-state tables; the
// last only if there are costs.
func printTable(w io.Writer, sums []summary, verdicts []verdict, costs []steady) {
	tw := newTable(w, "CONTENDER\tFAULT\tRUNS\tFAILOVER p50\tp95\tMAX\tNO FAILOVER\tOLD KNEW p50\tOLD NEVER KNEW\tNO LEADER BEFORE\tLOWER PRIORITY LED\tTRAP MISSED")
	for _, s := range sums {
		lower := "-"
		if isRanked(s.Contender) {
			lower = strconv.Itoa(s.Outranked)
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\t%s\t%d\t%s\t%d\t%d\t%s\t%d\n", s.Contender, s.Fault, s.Runs, secs(s.P50), secs(s.P95), secs(s.Max), s.NoFail, secs(s.KnewP50), s.Never, s.NoLeader, lower, s.Missed)
	}
	tw.Flush()
	fmt.Fprintln(w)
	tw = newTable(w, "CONTENDER\tTERMS\tWRITES\tSTALE WRITES ACCEPTED\tOVERLAP TOTAL\tWORST\tACKED WRITES LOST\tLINEARIZABLE (OPS)\tVIOLATIONS")
	for _, v := range verdicts {
		lin := "-"
		switch {
		case v.Linearizable != "":
			lin = fmt.Sprintf("%s (%d)", v.Linearizable, v.Operations)
		case isEtcd(v.Contender):
			lin = "n/a" // fenced, but not checked (see check)
		}
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%s\t%s\t%d\t%s\t%d\n", v.Contender, v.Terms, v.Writes, v.Stale, secs(v.OverlapS), secs(v.WorstS), v.Lost, lin, len(v.Violations))
	}
	tw.Flush()
	if len(costs) > 0 {
		fmt.Fprintln(w)
		tw = newTable(w, "CONTENDER\tCANDIDATES\tQUERIES/S\tROUND TRIPS/S\tSERVER REQUESTS/S\tQUERIES/S PER CANDIDATE\tCONNECTIONS PER CANDIDATE\tSERVER CPU\tCANDIDATE CPU MAX")
		etcd := false
		for _, c := range costs {
			// Each row has MySQL's numbers or etcd's: the others are "-".
			queries, trips, requests, perCand := "-", "-", "-", "-"
			if isEtcd(c.Contender) {
				etcd = true
				requests = fmt.Sprintf("%.2f", c.RequestsPerSec)
			} else {
				queries, trips, perCand = fmt.Sprintf("%.1f", c.QueriesPerSec), fmt.Sprintf("%.1f", c.RoundTripsPerSec), fmt.Sprintf("%.2f", c.QueriesPerCand)
			}
			fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\t%s\t%.2f\t%s\t%s\n", c.Contender, c.Candidates, queries, trips, requests, perCand, c.ConnsPerCand, cpu(c.ServerCPU), cpu(c.ProcCPU))
		}
		tw.Flush()
		if etcd {
			fmt.Fprintln(w, "SERVER REQUESTS/S, for etcd: the gRPC messages its nodes received (grpc_server_msg_received_total, summed over the nodes), "+
				"one per request or lease keepalive, as a round trip is for MySQL, over 5 s or a whole keepalive period (a third of the TTL) if longer; "+
				"its connections are the candidates' TCP connections. CPU: percent of one core over the same window, all of etcd's nodes together.")
		}
	}
}

// cpu formats a percentage of CPU for the steady-state table; "-" for
// none (results written before it was measured).
func cpu(pct float64) string {
	if pct == 0 {
		return "-"
	}
	return fmt.Sprintf("%.1f%%", pct)
}

// printEtcd writes how each etcd contender ran.
func printEtcd(out io.Writer, settings []etcdSetting) {
	for _, s := range settings {
		fmt.Fprintf(out, "%s: etcd %s, %d node(s), session TTL %d s as granted (asked %d s)\n", s.Contender, s.Version, s.Nodes, s.TTL, s.AskedTTL)
	}
}

// newTable starts a table on w with its header row; Flush ends it.
func newTable(w io.Writer, header string) *tabwriter.Writer {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, header)
	return tw
}

// chart draws the median failover per fault and contender as horizontal
// bars on a log scale from 1 ms to 100 s, with the p95 as a whisker; runs
// without a failover are drawn to the limit and marked.
func chart(w io.Writer, sums []summary, contenders, faults []string) {
	colors := []string{"#1b9e77", "#7570b3", "#d95f02", "#e7298a", "#66a61e", "#e6ab02"}
	const left, barH, gap, width = 150, 12, 14, 620
	x := func(s float64) float64 { // log scale, 1 ms .. 100 s
		return left + width*(math.Log10(max(s, 0.001))+3)/5
	}
	height := 60 + len(faults)*(len(contenders)*barH+gap) + 20*len(contenders)
	fmt.Fprintf(w, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" font-family="sans-serif" font-size="11">`+"\n", left+width+40, height)
	fmt.Fprintf(w, `<text x="%d" y="16" font-size="13">Time to a new acting leader after a fault (median bar, p95 whisker; log scale)</text>`+"\n", 10)
	for i, label := range []string{"1 ms", "10 ms", "100 ms", "1 s", "10 s", "100 s"} {
		px := left + width*float64(i)/5
		fmt.Fprintf(w, `<line x1="%.0f" y1="28" x2="%.0f" y2="%d" stroke="#ddd"/><text x="%.0f" y="26" text-anchor="middle">%s</text>`+"\n", px, px, height-20*len(contenders)-10, px, label)
	}
	by := map[string]summary{}
	for _, s := range sums {
		by[s.Contender+"/"+s.Fault] = s
	}
	y := 36
	for _, f := range faults {
		fmt.Fprintf(w, `<text x="8" y="%d" font-weight="bold">%s</text>`+"\n", y+barH, f)
		for i, c := range contenders {
			s, ok := by[c+"/"+f]
			if ok && s.P50 < 0 && s.NoFail == 0 {
				fmt.Fprintf(w, `<text x="%d" y="%d" fill="#666">%s: no leader to fault</text>`+"\n", left+4, y+barH-3, c)
				ok = false
			}
			if ok {
				p50, p95, mark := s.P50, s.P95, ""
				if s.NoFail > 0 && s.NoFail*2 >= s.Runs {
					p50, p95, mark = 100, 100, "no failover"
				}
				fmt.Fprintf(w, `<rect x="%d" y="%d" width="%.1f" height="%d" fill="%s"><title>%s %s: %s</title></rect>`+"\n",
					left, y, max(1, x(p50)-left), barH-2, colors[i%len(colors)], c, f, secs(s.P50))
				if p95 > p50 {
					fmt.Fprintf(w, `<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="#333"/>`+"\n", x(p50), y+barH/2, x(p95), y+barH/2)
				}
				if mark != "" {
					fmt.Fprintf(w, `<text x="%.0f" y="%d" text-anchor="end" fill="#fff">%s</text>`+"\n", x(p50)-4, y+barH-3, mark)
				}
			}
			y += barH
		}
		y += gap
	}
	for i, c := range contenders {
		fmt.Fprintf(w, `<rect x="%d" y="%d" width="12" height="10" fill="%s"/><text x="%d" y="%d">%s</text>`+"\n", left, y+i*20, colors[i%len(colors)], left+18, y+i*20+9, c)
	}
	fmt.Fprintln(w, "</svg>")
}

// writeChart writes the chart to path, if one is named.
func writeChart(path string, sums []summary, contenders, faults []string) error {
	if path == "" {
		return nil
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	chart(f, sums, contenders, faults)
	return f.Close()
}

// writeJSON writes v, indented, to path, if one is named.
func writeJSON(path string, v any) error {
	if path == "" {
		return nil
	}
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, b, 0o644)
}

// reportMain merges the JSON results of several runs (say, the slow
// recipe-20s with fewer runs than the others) into one table, chart and
// JSON file.
func reportMain(args []string, out *os.File) error {
	fs := flag.NewFlagSet("electbench report", flag.ContinueOnError)
	svg := fs.String("svg", "", "write the chart as SVG to this file")
	jsonOut := fs.String("json", "", "write the merged results as JSON to this file")
	if err := fs.Parse(args); err != nil {
		return err
	}
	all, contenders, faults, err := mergeResults(fs.Args(), out)
	if err != nil {
		return err
	}
	all.Summaries = summarize(all.Trials)
	fmt.Fprintln(out)
	printTable(out, all.Summaries, all.Verdicts, all.Costs)
	if err := writeChart(*svg, all.Summaries, contenders, faults); err != nil {
		return err
	}
	return writeJSON(*jsonOut, all)
}

// mergeResults reads the JSON results at paths, naming each on out, and
// returns their trials, verdicts and costs together, with the contenders
// and faults in the order they first appear.
func mergeResults(paths []string, out io.Writer) (all results, contenders, faults []string, err error) {
	for _, path := range paths {
		b, err := os.ReadFile(path)
		if err != nil {
			return all, nil, nil, err
		}
		var r results
		if err := json.Unmarshal(b, &r); err != nil {
			return all, nil, nil, fmt.Errorf("%s: %w", path, err)
		}
		fmt.Fprintf(out, "%s: %s; interval %v, lease %v, margin %v\n", path, r.Server, r.Timing.Interval, r.Timing.Lease, r.Timing.Margin)
		printEtcd(out, r.Etcd)
		all.Etcd = append(all.Etcd, r.Etcd...)
		all.Trials = append(all.Trials, r.Trials...)
		all.Verdicts = append(all.Verdicts, r.Verdicts...)
		all.Costs = append(all.Costs, r.Costs...)
		for _, t := range r.Trials {
			if !slices.Contains(contenders, t.Contender) {
				contenders = append(contenders, t.Contender)
			}
			if !slices.Contains(faults, t.Fault) {
				faults = append(faults, t.Fault)
			}
		}
	}
	return all, contenders, faults, nil
}

package electionprom_test

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/sqlelect/election/internal/monitortest"
)

// monitoring is the folder of the rules and the dashboard shipped with the
// project.
var monitoring = monitortest.Dir()

// promtool is Prometheus's, from Debian's prometheus package, which
// scripts/test.sh installs.
func promtool(t *testing.T) string {
	t.Helper()
	path, err := exec.LookPath("promtool")
	if err != nil {
		t.Skip("promtool not found: install Debian's prometheus package (scripts/test.sh does)")
	}
	return path
}

// The rules pass promtool's check, and its unit tests: each alert fires
// where it should and not where it should not.
func TestRules(t *testing.T) {
	bin := promtool(t)
	for _, args := range [][]string{{"check", "rules", "election-rules.yml"}, {"test", "rules", "election-rules.test.yml"}} {
		cmd := exec.Command(bin, args...)
		cmd.Dir = monitoring
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
}

// dashboard is the part of the Grafana dashboard the checks read.
type dashboard struct {
	Panels []struct {
		Title   string
		Targets []struct{ Expr string }
	}
}

func readDashboard(t *testing.T) dashboard {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(monitoring, "election-dashboard.json"))
	if err != nil {
		t.Fatal(err)
	}
	var d dashboard
	if err := json.Unmarshal(raw, &d); err != nil {
		t.Fatalf("the dashboard is not JSON: %v", err)
	}
	return d
}

// Every query of the dashboard is PromQL that Prometheus parses, once
// Grafana has put in its variables: each goes to promtool as a recording
// rule.
func TestDashboardQueriesParse(t *testing.T) {
	bin := promtool(t)
	d := readDashboard(t)
	var rules strings.Builder
	rules.WriteString("groups:\n  - name: dashboard\n    rules:\n")
	n := 0
	for _, p := range d.Panels {
		if p.Title == "" || len(p.Targets) == 0 {
			t.Errorf("a panel without a title or a query: %+v", p)
		}
		for _, target := range p.Targets {
			expr := strings.NewReplacer("$__rate_interval", "5m", "$election", ".*").Replace(target.Expr)
			quoted, _ := json.Marshal(expr) // a JSON string is a YAML one
			rules.WriteString("      - record: dashboard:query" + string(rune('a'+n%26)) + ":" + strings.Repeat("x", n/26+1) + "\n        expr: " + string(quoted) + "\n")
			n++
		}
	}
	file := filepath.Join(t.TempDir(), "dashboard-rules.yml")
	if err := os.WriteFile(file, []byte(rules.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(bin, "check", "rules", file).CombinedOutput(); err != nil {
		t.Fatalf("a dashboard query does not parse: %v\n%s", err, out)
	}
}

// Every metric the rules and the dashboard name is one the adapter exports,
// as a scrape of it shows, with every hook of its Observer called once.
func TestMonitoringNamesExportedMetrics(t *testing.T) {
	reg, m := newMetrics(t)
	monitortest.NamesExported(t, m.Observer(), promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
}

package electionprom_test

import (
	"encoding/json"
	"errors"
	"io"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// monitoring is the folder of the rules and the dashboard shipped with the
// project.
const monitoring = "../monitoring"

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
	o := m.Observer()
	o.TermStarted("e", "a", 1)
	o.TermEnded("e", "a", 1, "resigned")
	o.Failover("e", time.Second)
	o.Renewed("e", time.Millisecond, nil)
	o.Killed("e", "hang-killed", nil)
	o.CampaignFailed("e", errors.New("a campaign failed"))
	o.HealthChecked("e", true, nil)
	o.Preempted("e", "b")
	o.Campaigning("e", "own")
	srv := httptest.NewServer(promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	defer srv.Close()
	resp, err := srv.Client().Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	scrape, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	exported := map[string]bool{}
	for _, line := range strings.Split(string(scrape), "\n") {
		if name, _, ok := strings.Cut(line, "{"); ok && !strings.HasPrefix(line, "#") {
			exported[name] = true
		} else if name, _, ok := strings.Cut(line, " "); ok && !strings.HasPrefix(line, "#") {
			exported[name] = true
		}
	}
	var texts []string
	for _, f := range []string{"election-rules.yml", "election-dashboard.json"} {
		raw, err := os.ReadFile(filepath.Join(monitoring, f))
		if err != nil {
			t.Fatal(err)
		}
		texts = append(texts, string(raw))
	}
	for _, p := range readDashboard(t).Panels {
		for _, target := range p.Targets {
			texts = append(texts, target.Expr)
		}
	}
	// A metric is a name of the adapter's namespace in an expression; a
	// recording rule's (election:...) is not one.
	named := regexp.MustCompile(`\b(election_[a-z_]+|leader_election_master_status)\b`)
	var unknown []string
	for _, text := range texts {
		for _, name := range named.FindAllString(text, -1) {
			if !exported[name] && !slices.Contains(unknown, name) {
				unknown = append(unknown, name)
			}
		}
	}
	if len(unknown) > 0 {
		t.Fatalf("the monitoring files name metrics the adapter does not export: %v\nscrape:\n%s", unknown, scrape)
	}
	if !exported["election_is_leader"] || !exported["election_keepalive_seconds_bucket"] {
		t.Fatalf("the scrape lacks the adapter's metrics:\n%s", scrape)
	}
}

// Package monitortest checks the Prometheus rules and the Grafana dashboard
// of monitoring/ against a metrics adapter (electionprom, and electionotel
// through OpenTelemetry's Prometheus exporter), for those modules' tests.
package monitortest

import (
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sqlelect/election"
)

// NamesExported calls every hook of o once, then scrapes metrics over HTTP,
// and fails t for every metric the rules and the dashboard name that the
// scrape lacks. A recording rule's name (election:...) is not a metric.
func NamesExported(t testing.TB, o *election.Observer, metrics http.Handler) {
	t.Helper()
	o.TermStarted("e", "a", 1)
	o.TermEnded("e", "a", 1, "resigned")
	o.Failover("e", time.Second)
	o.Renewed("e", time.Millisecond, nil)
	o.Killed("e", "hang-killed", nil)
	o.CampaignFailed("e", errors.New("a campaign failed"))
	o.HealthChecked("e", true, nil)
	o.Preempted("e", "b")
	o.Campaigning("e", "own")
	o.Running("e", true, nil)
	o.Running("e", false, errors.New("access denied"))
	srv := httptest.NewServer(metrics)
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
	for _, s := range regexp.MustCompile(`(?m)^([a-zA-Z_:][a-zA-Z0-9_:]*)[{ ]`).FindAllStringSubmatch(string(scrape), -1) {
		exported[s[1]] = true
	}
	named := regexp.MustCompile(`\b(election_[a-z_]+|leader_election_master_status)\b`)
	var unknown []string
	for _, f := range []string{"election-rules.yml", "election-dashboard.json"} {
		raw, err := os.ReadFile(filepath.Join(Dir(), f))
		if err != nil {
			t.Fatal(err)
		}
		for _, name := range named.FindAllString(string(raw), -1) {
			if !exported[name] && !slices.Contains(unknown, name) {
				unknown = append(unknown, name)
			}
		}
	}
	if len(unknown) > 0 || !exported["election_is_leader"] {
		t.Fatalf("the monitoring files name metrics the scrape lacks: %v\nscrape:\n%s", unknown, strings.TrimSpace(string(scrape)))
	}
}

// Dir is monitoring/, found from this file's place in the checkout.
func Dir() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..", "monitoring")
}

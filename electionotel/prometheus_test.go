package electionotel_test

import (
	"errors"
	"io"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"

	"github.com/sqlelect/election/electionotel"
)

// Through OpenTelemetry's Prometheus exporter, the instruments have
// electionprom's names: every metric the rules and the dashboard of
// monitoring/ name is in a scrape, with every Observer hook called once.
func TestPrometheusExporterGivesTheMonitoringNames(t *testing.T) {
	reg := prometheus.NewRegistry()
	exporter, err := otelprom.New(otelprom.WithRegisterer(reg))
	if err != nil {
		t.Fatal(err)
	}
	provider := sdkmetric.NewMeterProvider(sdkmetric.WithReader(exporter))
	defer provider.Shutdown(t.Context())
	m, err := electionotel.New(provider.Meter("github.com/sqlelect/election"))
	if err != nil {
		t.Fatal(err)
	}
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
	sample := regexp.MustCompile(`(?m)^([a-zA-Z_:][a-zA-Z0-9_:]*)[{ ]`)
	for _, s := range sample.FindAllStringSubmatch(string(scrape), -1) {
		exported[s[1]] = true
	}
	named := regexp.MustCompile(`\b(election_[a-z_]+|leader_election_master_status)\b`)
	var unknown []string
	for _, f := range []string{"election-rules.yml", "election-dashboard.json"} {
		raw, err := os.ReadFile(filepath.Join("../monitoring", f))
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
		t.Fatalf("the monitoring files name metrics the exporter does not give: %v\nscrape:\n%s", unknown, strings.TrimSpace(string(scrape)))
	}
}

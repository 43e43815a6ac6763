package electionotel_test

import (
	"context"
	"io"
	"net/http/httptest"
	"regexp"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"

	"github.com/sqlelect/election/electionotel"
	"github.com/sqlelect/election/internal/monitortest"
)

// Through OpenTelemetry's Prometheus exporter, the instruments have
// electionprom's names: every metric the rules and the dashboard of
// monitoring/ name is in a scrape, with every Observer hook called once.
func TestPrometheusExporterGivesTheMonitoringNames(t *testing.T) {
	reg, m := exported(t)
	monitortest.NamesExported(t, m.Observer(), promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
}

// exported returns Metrics read through OpenTelemetry's Prometheus
// exporter, and the registry to scrape.
func exported(t *testing.T) (*prometheus.Registry, *electionotel.Metrics) {
	t.Helper()
	reg := prometheus.NewRegistry()
	exporter, err := otelprom.New(otelprom.WithRegisterer(reg))
	if err != nil {
		t.Fatal(err)
	}
	provider := sdkmetric.NewMeterProvider(sdkmetric.WithReader(exporter))
	t.Cleanup(func() { provider.Shutdown(context.Background()) })
	m, err := electionotel.New(provider.Meter("github.com/sqlelect/election"))
	if err != nil {
		t.Fatal(err)
	}
	return reg, m
}

// An election's first event (Run's start) exports at 0 the counters the
// rules of monitoring/ count with increase(), which misses a counter's
// first event if its series appears at 1.
func TestCountersAtZeroFromTheFirstEvent(t *testing.T) {
	reg, m := exported(t)
	m.Observer().Running("fresh", true, nil)
	ts := httptest.NewServer(promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	defer ts.Close()
	resp, err := ts.Client().Get(ts.URL)
	if err != nil {
		t.Fatal(err)
	}
	scrape, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, series := range []string{
		`election_is_leader\{election="fresh"`,
		`election_transitions_total\{election="fresh",event="started"`,
		`election_failures_total\{election="fresh",kind="campaign"`,
		`election_kills_total\{election="fresh",[^}]*reason="hang-killed"`,
		`election_kills_total\{election="fresh",[^}]*reason="demote-killed"`,
		`election_stopped\{election="fresh"`,
	} {
		if !regexp.MustCompile(`(?m)^` + series + `[^}]*\} 0$`).Match(scrape) {
			t.Errorf("the scrape lacks %s...} 0", series)
		}
	}
	if t.Failed() {
		t.Logf("scrape:\n%s", scrape)
	}
}

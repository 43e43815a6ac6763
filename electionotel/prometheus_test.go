package electionotel_test

import (
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
	monitortest.NamesExported(t, m.Observer(), promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
}

package electionprom_test

import (
	"context"
	"database/sql"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	_ "github.com/go-sql-driver/mysql"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/sqlelect/election"
	"github.com/sqlelect/election/electionprom"
	"github.com/sqlelect/election/internal/mysqltest"
)

// server is the one server of this test binary, started by TestMain.
var server *mysqltest.Server

func TestMain(m *testing.M) {
	if os.Getenv("ELECTIONPROM_CHILD") != "" {
		os.Exit(childMain())
	}
	os.Exit(mysqltest.Main(m, func(s *mysqltest.Server) func() {
		server = s
		return nil
	}))
}

// newElector returns a candidate with the test timing (W = 2s) that reports
// to m.
func newElector(t *testing.T, db *sql.DB, s election.Strategy, name, id string, m *electionprom.Metrics) *election.Elector {
	t.Helper()
	return newElectorWith(t, db, name, election.Config{Strategy: s, Identity: id}, m)
}

// newElectorWith returns a candidate configured as cfg, but with the test
// timing, that reports to m.
func newElectorWith(t *testing.T, db *sql.DB, name string, cfg election.Config, m *electionprom.Metrics) *election.Elector {
	t.Helper()
	cfg.Observer, cfg.Interval, cfg.Lease, cfg.Margin = m.Observer(), 100*time.Millisecond, time.Second, time.Second
	e, err := election.New(db, name, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return e
}

func newMetrics(t *testing.T) (*prometheus.Registry, *electionprom.Metrics) {
	t.Helper()
	reg := prometheus.NewRegistry()
	m, err := electionprom.New(reg)
	if err != nil {
		t.Fatal(err)
	}
	return reg, m
}

func ctxFor(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// value returns the value of the gauge or counter family name whose labels
// are exactly labels (name, value pairs), or a histogram's sample count; 0
// if there is no such series.
func value(t *testing.T, reg prometheus.Gatherer, family string, labels ...string) float64 {
	t.Helper()
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() != family {
			continue
		}
	series:
		for _, m := range f.GetMetric() {
			if len(m.GetLabel())*2 != len(labels) {
				continue
			}
			for i, l := range m.GetLabel() { // sorted by name, as labels must be
				if l.GetName() != labels[2*i] || l.GetValue() != labels[2*i+1] {
					continue series
				}
			}
			switch {
			case m.Gauge != nil:
				return m.GetGauge().GetValue()
			case m.Counter != nil:
				return m.GetCounter().GetValue()
			case m.Histogram != nil:
				return float64(m.GetHistogram().GetSampleCount())
			}
		}
	}
	return 0
}

// eventually fails the test unless cond holds within limit. Term events
// arrive from the term's own goroutine, just after Campaign returns.
func eventually(t *testing.T, limit time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("not within %v: %s", limit, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// A term started, renewed and resigned shows up in every metric it touches.
func TestTermMetrics(t *testing.T) {
	for _, s := range []election.Strategy{election.GetLock, election.LeaseRow} {
		t.Run(s.String(), func(t *testing.T) {
			t.Parallel()
			db := server.Open(t, server.NewDatabase(t))
			reg, m := newMetrics(t)
			const name = "metered"
			e := newElector(t, db, s, name, "a", m)
			term, err := e.Campaign(ctxFor(t, time.Minute))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { term.Resign(context.Background()) })
			eventually(t, 5*time.Second, "is_leader 1", func() bool {
				return value(t, reg, "election_is_leader", "election", name) == 1
			})
			if v := value(t, reg, "leader_election_master_status", "name", name); v != 1 {
				t.Errorf("leader_election_master_status = %v while leading, want 1", v)
			}
			time.Sleep(400 * time.Millisecond)
			if err := term.Resign(ctxFor(t, 10*time.Second)); err != nil {
				t.Fatal(err)
			}
			// Resign returns after TermEnded has run.
			for _, c := range []struct {
				family string
				labels []string
				want   float64
			}{
				{"election_is_leader", []string{"election", name}, 0},
				{"leader_election_master_status", []string{"name", name}, 0},
				{"election_transitions_total", []string{"election", name, "event", "started"}, 1},
				{"election_transitions_total", []string{"election", name, "event", "resigned"}, 1},
				{"election_term_token", []string{"election", name}, float64(term.Token())},
				{"election_failures_total", []string{"election", name, "kind", "keepalive"}, 0},
			} {
				if got := value(t, reg, c.family, c.labels...); got != c.want {
					t.Errorf("%s%v = %v, want %v", c.family, c.labels, got, c.want)
				}
			}
			session := map[election.Strategy]string{election.GetLock: election.SessionOwn, election.LeaseRow: election.SessionPool}[s]
			for _, sess := range []string{election.SessionOwn, election.SessionShared, election.SessionPool} {
				if got, want := value(t, reg, "election_session", "election", name, "session", sess), map[bool]float64{true: 1}[sess == session]; got != want {
					t.Errorf("election_session{session=%q} = %v, want %v", sess, got, want)
				}
			}
			if n := value(t, reg, "election_keepalive_seconds", "election", name); n < 2 {
				t.Errorf("%v keepalives observed in 400ms at a 100ms interval, want at least 2", n)
			}
			if n, err := testutil.GatherAndCount(reg, "election_transitions_total"); err != nil || n != 2 {
				t.Errorf("%d transition series (%v), want 2: started and resigned", n, err)
			}
		})
	}
}

// Two candidates of one election in one process, sharing one Metrics: a
// scrape after a hand-over shows the one leader and both transitions.
func TestScrape(t *testing.T) {
	t.Parallel()
	db := server.Open(t, server.NewDatabase(t))
	reg, m := newMetrics(t)
	ts := httptest.NewServer(promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	t.Cleanup(ts.Close)
	scrape := func() string {
		t.Helper()
		resp, err := ts.Client().Get(ts.URL + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		if err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("GET /metrics: %d, %v", resp.StatusCode, err)
		}
		return string(body)
	}
	const name = "scraped"
	ctx := ctxFor(t, time.Minute)
	a := newElector(t, db, election.GetLock, name, "a", m)
	b := newElector(t, db, election.GetLock, name, "b", m)
	ta, err := a.Campaign(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ta.Resign(context.Background()) })
	type result struct {
		term *election.Term
		err  error
	}
	won := make(chan result, 1)
	go func() {
		term, err := b.Campaign(ctx)
		won <- result{term, err}
	}()
	eventually(t, 5*time.Second, "a leads", func() bool {
		return strings.Contains(scrape(), `election_is_leader{election="scraped"} 1`)
	})
	if err := ta.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	r := <-won
	if r.err != nil {
		t.Fatalf("b's campaign: %v", r.err)
	}
	term := r.term
	t.Cleanup(func() { term.Resign(context.Background()) })
	want := []string{
		`election_is_leader{election="scraped"} 1`,
		`leader_election_master_status{name="scraped"} 1`,
		`election_transitions_total{election="scraped",event="started"} 2`,
		`election_transitions_total{election="scraped",event="resigned"} 1`,
		`election_failover_seconds_count{election="scraped"} 1`, // b's term after a's
		// The text format writes a float64, exact for tokens until 2255.
		`election_term_token{election="scraped"} ` + strconv.FormatFloat(float64(term.Token()), 'g', -1, 64),
	}
	var body string
	eventually(t, 5*time.Second, "b leads", func() bool {
		body = scrape()
		return strings.Contains(body, want[1])
	})
	for _, w := range want {
		if !strings.Contains(body, w) {
			t.Errorf("scrape lacks %s:\n%s", w, body)
		}
	}
	if err := term.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	body = scrape()
	for _, w := range []string{
		`election_is_leader{election="scraped"} 0`,
		`leader_election_master_status{name="scraped"} 0`,
		`election_transitions_total{election="scraped",event="resigned"} 2`,
	} {
		if !strings.Contains(body, w) {
			t.Errorf("scrape after the last resign lacks %s:\n%s", w, body)
		}
	}
}

// A leader whose health check fails HealthFailures (3) times in a row
// resigns: the checks, the verdict and the term's end "unhealthy" are
// counted.
func TestHealthMetrics(t *testing.T) {
	t.Parallel()
	db := server.Open(t, server.NewDatabase(t))
	reg, m := newMetrics(t)
	const name = "checked"
	var failing atomic.Bool
	e := newElectorWith(t, db, name, election.Config{Identity: "a", Health: func(context.Context) error {
		if failing.Load() {
			return errors.New("disk full")
		}
		return nil
	}}, m)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- e.Run(ctx, func(ctx context.Context, _ *election.Term) error { <-ctx.Done(); return nil })
	}()
	t.Cleanup(func() { cancel(); <-done })
	eventually(t, 5*time.Second, "a healthy leader", func() bool {
		return value(t, reg, "election_is_leader", "election", name) == 1 && value(t, reg, "election_healthy", "election", name) == 1
	})
	failing.Store(true)
	eventually(t, 5*time.Second, "the term ended unhealthy", func() bool {
		return value(t, reg, "election_transitions_total", "election", name, "event", "unhealthy") == 1
	})
	for _, c := range []struct {
		family string
		labels []string
		want   float64
	}{
		{"election_healthy", []string{"election", name}, 0},
		{"election_is_leader", []string{"election", name}, 0},
	} {
		if got := value(t, reg, c.family, c.labels...); got != c.want {
			t.Errorf("%s%v = %v, want %v", c.family, c.labels, got, c.want)
		}
	}
	if n := value(t, reg, "election_health_checks_total", "election", name, "result", "passed"); n < 1 {
		t.Errorf("%v passed checks counted, want at least 1", n)
	}
	if n := value(t, reg, "election_health_checks_total", "election", name, "result", "failed"); n < 3 {
		t.Errorf("%v failed checks counted, want at least 3", n)
	}
}

// A leader hands over to a candidate of higher priority that has
// campaigned for PreferAfter: the hand-over it asked for and its term's
// end are counted.
func TestPreferredHandoverMetrics(t *testing.T) {
	t.Parallel()
	db := server.Open(t, server.NewDatabase(t))
	reg, m := newMetrics(t)
	const name = "preferred"
	ctx := ctxFor(t, time.Minute)
	a := newElectorWith(t, db, name, election.Config{Identity: "a", PreferAfter: time.Second}, m)
	b := newElectorWith(t, db, name, election.Config{Identity: "b", Priority: 1}, m)
	ta, err := a.Campaign(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ta.Resign(context.Background()) })
	tb, err := b.Campaign(ctx) // a hands over once b has campaigned for a second
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tb.Resign(context.Background()) })
	eventually(t, 5*time.Second, "a's term ended handed-over, and b's counted", func() bool {
		return value(t, reg, "election_transitions_total", "election", name, "event", "handed-over") == 1 &&
			value(t, reg, "election_transitions_total", "election", name, "event", "started") == 2
	})
	for _, c := range []struct {
		family string
		labels []string
		want   float64
	}{
		{"election_preferred_handovers_total", []string{"election", name}, 1},
		{"election_is_leader", []string{"election", name}, 1}, // b's term
	} {
		if got := value(t, reg, c.family, c.labels...); got != c.want {
			t.Errorf("%s%v = %v, want %v", c.family, c.labels, got, c.want)
		}
	}
}

// A candidate that cannot reach its server counts failed campaigns.
func TestCampaignFailures(t *testing.T) {
	t.Parallel()
	db, err := sql.Open("mysql", "root@tcp(127.0.0.1:1)/x?timeout=1s")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	reg, m := newMetrics(t)
	e := newElector(t, db, election.GetLock, "unreachable", "a", m)
	err = e.Run(ctxFor(t, 1500*time.Millisecond), func(context.Context, *election.Term) error {
		t.Error("led without a server")
		return nil
	})
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Run: %v, want the context's deadline", err)
	}
	if n := value(t, reg, "election_failures_total", "election", "unreachable", "kind", "campaign"); n < 1 {
		t.Fatalf("%v failed campaigns counted, want at least 1", n)
	}
	if v := value(t, reg, "election_stopped", "election", "unreachable"); v != 0 {
		t.Fatalf("election_stopped = %v after Run retried until its context ended, want 0", v)
	}
}

// A campaign that retrying cannot fix (a database that does not exist) is
// counted once: Run returns it instead of retrying, and reports that it
// stopped until it is called again.
func TestRefusedCampaignCountedOnce(t *testing.T) {
	t.Parallel()
	db, err := sql.Open("mysql", server.DSN("no_such_database"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	reg, m := newMetrics(t)
	e := newElector(t, db, election.GetLock, "refused", "a", m)
	err = e.Run(ctxFor(t, time.Minute), func(context.Context, *election.Term) error {
		t.Error("led on a missing database")
		return nil
	})
	if !errors.Is(err, election.ErrAccessDenied) {
		t.Fatalf("Run: %v, want ErrAccessDenied", err)
	}
	if n := value(t, reg, "election_failures_total", "election", "refused", "kind", "campaign"); n != 1 {
		t.Fatalf("%v failed campaigns counted, want 1", n)
	}
	if v := value(t, reg, "election_stopped", "election", "refused"); v != 1 {
		t.Fatalf("election_stopped = %v after Run returned %v, want 1", v, err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	e.Run(ctx, func(context.Context, *election.Term) error { return nil })
	if v := value(t, reg, "election_stopped", "election", "refused"); v != 0 {
		t.Fatalf("election_stopped = %v once Run was called again, want 0", v)
	}
	if v := value(t, reg, "election_running", "election", "refused"); v != 0 {
		t.Fatalf("election_running = %v after Run returned, want 0", v)
	}
}

// New registers all metrics or none.
func TestRegisterTwice(t *testing.T) {
	t.Parallel()
	reg, _ := newMetrics(t)
	_, err := electionprom.New(reg)
	var already prometheus.AlreadyRegisteredError
	if !errors.As(err, &already) {
		t.Fatalf("second New on one registry: %v, want an AlreadyRegisteredError", err)
	}

	// One name taken: New fails and leaves nothing behind, so a collector
	// that clashes with another of its metrics still registers.
	reg = prometheus.NewRegistry()
	reg.MustRegister(prometheus.NewCounter(prometheus.CounterOpts{Name: "election_kills_total", Help: "taken"}))
	if _, err := electionprom.New(reg); err == nil {
		t.Fatal("New registered over a taken name")
	}
	if err := reg.Register(prometheus.NewGauge(prometheus.GaugeOpts{Name: "election_is_leader", Help: "other"})); err != nil {
		t.Fatalf("a failed New left metrics registered: %v", err)
	}
}

// An election's first event (Run's start) exports at 0 the series the rules
// of monitoring/ count with increase(), which misses a counter's first
// event if its series appears at 1.
func TestSeriesAtZeroFromTheFirstEvent(t *testing.T) {
	t.Parallel()
	reg, m := newMetrics(t)
	m.Observer().Running("fresh", true, nil)
	var scrape strings.Builder
	ts := httptest.NewServer(promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	defer ts.Close()
	resp, err := ts.Client().Get(ts.URL)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(&scrape, resp.Body)
	resp.Body.Close()
	for _, line := range []string{
		`election_is_leader{election="fresh"} 0`,
		`election_transitions_total{election="fresh",event="started"} 0`,
		`election_failures_total{election="fresh",kind="campaign"} 0`,
		`election_kills_total{election="fresh",reason="hang-killed"} 0`,
		`election_kills_total{election="fresh",reason="demote-killed"} 0`,
		`election_failover_seconds_count{election="fresh"} 0`,
		`election_keepalive_seconds_count{election="fresh"} 0`,
		`election_running{election="fresh"} 1`,
		`election_stopped{election="fresh"} 0`,
	} {
		if !strings.Contains(scrape.String(), line+"\n") {
			t.Errorf("the scrape lacks %s", line)
		}
	}
	if t.Failed() {
		t.Logf("scrape:\n%s", scrape.String())
	}
}

package electionotel_test

import (
	"context"
	"database/sql"
	"errors"
	"os"
	"sync/atomic"
	"testing"
	"time"

	_ "github.com/go-sql-driver/mysql"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/sqlelect/election"
	"github.com/sqlelect/election/electionotel"
	"github.com/sqlelect/election/internal/mysqltest"
)

// server is the one server of this test binary, started by TestMain.
var server *mysqltest.Server

func TestMain(m *testing.M) {
	os.Exit(mysqltest.Main(m, func(s *mysqltest.Server) func() {
		server = s
		return nil
	}))
}

// newElector returns a candidate with the test timing (W = 2s) that reports
// to m.
func newElector(t *testing.T, db *sql.DB, s election.Strategy, name, id string, m *electionotel.Metrics) *election.Elector {
	t.Helper()
	return newElectorWith(t, db, name, election.Config{Strategy: s, Identity: id}, m)
}

// newElectorWith returns a candidate configured as cfg, but with the test
// timing, that reports to m.
func newElectorWith(t *testing.T, db *sql.DB, name string, cfg election.Config, m *electionotel.Metrics) *election.Elector {
	t.Helper()
	cfg.Observer, cfg.Interval, cfg.Lease, cfg.Margin = m.Observer(), 100*time.Millisecond, time.Second, time.Second
	e, err := election.New(db, name, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return e
}

// newMetrics returns Metrics on a MeterProvider read by the returned
// ManualReader.
func newMetrics(t *testing.T) (*sdkmetric.ManualReader, *electionotel.Metrics) {
	t.Helper()
	reader := sdkmetric.NewManualReader()
	provider := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	t.Cleanup(func() { provider.Shutdown(context.Background()) })
	m, err := electionotel.New(provider.Meter("github.com/sqlelect/election"))
	if err != nil {
		t.Fatal(err)
	}
	return reader, m
}

func ctxFor(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// value returns the value of the int64 gauge or counter name whose
// attributes are exactly attrs (key, value pairs), or a histogram's count; 0
// if there is no such data point.
func value(t *testing.T, r sdkmetric.Reader, name string, attrs ...string) int64 {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := r.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	kvs := make([]attribute.KeyValue, 0, len(attrs)/2)
	for i := 0; i+1 < len(attrs); i += 2 {
		kvs = append(kvs, attribute.String(attrs[i], attrs[i+1]))
	}
	want := attribute.NewSet(kvs...)
	for _, sm := range rm.ScopeMetrics {
		for _, md := range sm.Metrics {
			if md.Name != name {
				continue
			}
			switch d := md.Data.(type) {
			case metricdata.Gauge[int64]:
				for _, p := range d.DataPoints {
					if p.Attributes.Equals(&want) {
						return p.Value
					}
				}
			case metricdata.Sum[int64]:
				for _, p := range d.DataPoints {
					if p.Attributes.Equals(&want) {
						return p.Value
					}
				}
			case metricdata.Histogram[float64]:
				for _, p := range d.DataPoints {
					if p.Attributes.Equals(&want) {
						return int64(p.Count)
					}
				}
			default:
				t.Fatalf("%s: unexpected data %T", name, md.Data)
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

type want struct {
	name  string
	attrs []string
	value int64
}

func check(t *testing.T, r sdkmetric.Reader, when string, ws ...want) {
	t.Helper()
	for _, w := range ws {
		if got := value(t, r, w.name, w.attrs...); got != w.value {
			t.Errorf("%s: %s%v = %v, want %v", when, w.name, w.attrs, got, w.value)
		}
	}
}

// A term started, renewed and resigned shows up in every instrument it
// touches.
func TestTermMetrics(t *testing.T) {
	for _, s := range []election.Strategy{election.GetLock, election.LeaseRow} {
		t.Run(s.String(), func(t *testing.T) {
			t.Parallel()
			db := server.Open(t, server.NewDatabase(t))
			r, m := newMetrics(t)
			const name = "metered"
			e := newElector(t, db, s, name, "a", m)
			term, err := e.Campaign(ctxFor(t, time.Minute))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { term.Resign(context.Background()) })
			eventually(t, 5*time.Second, "is_leader 1", func() bool {
				return value(t, r, "election.is_leader", "election", name) == 1
			})
			session := map[election.Strategy]string{election.GetLock: election.SessionOwn, election.LeaseRow: election.SessionPool}[s]
			check(t, r, "leading",
				want{"election.session", []string{"election", name, "session", session}, 1},
				want{"election.session", []string{"election", name, "session", election.SessionShared}, 0},
				want{"leader_election_master_status", []string{"name", name}, 1},
				want{"election.term_token", []string{"election", name}, int64(term.Token())},
				want{"election.transitions", []string{"election", name, "event", "started"}, 1},
			)
			time.Sleep(400 * time.Millisecond)
			if err := term.Resign(ctxFor(t, 10*time.Second)); err != nil {
				t.Fatal(err)
			}
			// Resign returns after TermEnded has run.
			check(t, r, "resigned",
				want{"election.is_leader", []string{"election", name}, 0},
				want{"leader_election_master_status", []string{"name", name}, 0},
				want{"election.transitions", []string{"election", name, "event", "started"}, 1},
				want{"election.transitions", []string{"election", name, "event", "resigned"}, 1},
				// The token exactly, as an int64: a float64 is exact
				// only to 2^53.
				want{"election.term_token", []string{"election", name}, int64(term.Token())},
				want{"election.failures", []string{"election", name, "kind", "keepalive"}, 0},
			)
			if n := value(t, r, "election.keepalive", "election", name); n < 2 {
				t.Errorf("%v keepalives observed in 400ms at a 100ms interval, want at least 2", n)
			}
		})
	}
}

// Two candidates of one election in one process, sharing one Metrics: after
// a hand-over the process still leads, with the new term's token, and both
// transitions are counted.
func TestHandOver(t *testing.T) {
	t.Parallel()
	db := server.Open(t, server.NewDatabase(t))
	r, m := newMetrics(t)
	const name = "handed"
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
		return value(t, r, "leader_election_master_status", "name", name) == 1
	})
	if err := ta.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	res := <-won
	if res.err != nil {
		t.Fatalf("b's campaign: %v", res.err)
	}
	tb := res.term
	t.Cleanup(func() { tb.Resign(context.Background()) })
	eventually(t, 5*time.Second, "b's term counted", func() bool {
		return value(t, r, "election.transitions", "election", name, "event", "started") == 2
	})
	check(t, r, "b leads",
		want{"election.is_leader", []string{"election", name}, 1},
		want{"leader_election_master_status", []string{"name", name}, 1},
		want{"election.transitions", []string{"election", name, "event", "resigned"}, 1},
		want{"election.term_token", []string{"election", name}, int64(tb.Token())},
	)
	// b's term followed a's: one failover, of at most the time since a's end.
	if n := value(t, r, "election.failover", "election", name); n != 1 {
		t.Errorf("%d failovers recorded, want 1 (b's term after a's)", n)
	}
	if tb.Token() <= ta.Token() {
		t.Errorf("b's token %d is not above a's %d", tb.Token(), ta.Token())
	}
	if err := tb.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	check(t, r, "all resigned",
		want{"election.is_leader", []string{"election", name}, 0},
		want{"leader_election_master_status", []string{"name", name}, 0},
		want{"election.transitions", []string{"election", name, "event", "resigned"}, 2},
	)
}

// A leader whose health check fails HealthFailures (3) times in a row
// resigns: the checks, the verdict and the term's end "unhealthy" are
// counted.
func TestHealthMetrics(t *testing.T) {
	t.Parallel()
	db := server.Open(t, server.NewDatabase(t))
	r, m := newMetrics(t)
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
		return value(t, r, "election.is_leader", "election", name) == 1 && value(t, r, "election.healthy", "election", name) == 1
	})
	failing.Store(true)
	eventually(t, 5*time.Second, "the term ended unhealthy", func() bool {
		return value(t, r, "election.transitions", "election", name, "event", "unhealthy") == 1
	})
	check(t, r, "unhealthy",
		want{"election.healthy", []string{"election", name}, 0},
		want{"election.is_leader", []string{"election", name}, 0},
	)
	if n := value(t, r, "election.health_checks", "election", name, "result", "passed"); n < 1 {
		t.Errorf("%v passed checks counted, want at least 1", n)
	}
	if n := value(t, r, "election.health_checks", "election", name, "result", "failed"); n < 3 {
		t.Errorf("%v failed checks counted, want at least 3", n)
	}
}

// A leader hands over to a candidate of higher priority that has
// campaigned for PreferAfter: the hand-over it asked for and its term's
// end are counted.
func TestPreferredHandoverMetrics(t *testing.T) {
	t.Parallel()
	db := server.Open(t, server.NewDatabase(t))
	r, m := newMetrics(t)
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
		return value(t, r, "election.transitions", "election", name, "event", "handed-over") == 1 &&
			value(t, r, "election.transitions", "election", name, "event", "started") == 2
	})
	check(t, r, "handed over",
		want{"election.preferred_handovers", []string{"election", name}, 1},
		want{"election.is_leader", []string{"election", name}, 1}, // b's term
	)
}

// A candidate that cannot reach its server counts failed campaigns.
func TestCampaignFailures(t *testing.T) {
	t.Parallel()
	db, err := sql.Open("mysql", "root@tcp(127.0.0.1:1)/x?timeout=1s")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	r, m := newMetrics(t)
	e := newElector(t, db, election.GetLock, "unreachable", "a", m)
	err = e.Run(ctxFor(t, 1500*time.Millisecond), func(context.Context, *election.Term) error {
		t.Error("led without a server")
		return nil
	})
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Run: %v, want the context's deadline", err)
	}
	if n := value(t, r, "election.failures", "election", "unreachable", "kind", "campaign"); n < 1 {
		t.Fatalf("%v failed campaigns counted, want at least 1", n)
	}
	if v := value(t, r, "election.stopped", "election", "unreachable"); v != 0 {
		t.Fatalf("election.stopped = %v after Run retried until its context ended, want 0", v)
	}
}

// A Run that returned an error retrying cannot fix (a database that does
// not exist) reports that it stopped.
func TestStoppedRun(t *testing.T) {
	t.Parallel()
	db, err := sql.Open("mysql", server.DSN("no_such_database"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	r, m := newMetrics(t)
	e := newElector(t, db, election.GetLock, "refused", "a", m)
	err = e.Run(ctxFor(t, time.Minute), func(context.Context, *election.Term) error {
		t.Error("led on a missing database")
		return nil
	})
	if !errors.Is(err, election.ErrAccessDenied) {
		t.Fatalf("Run: %v, want ErrAccessDenied", err)
	}
	if v := value(t, r, "election.stopped", "election", "refused"); v != 1 {
		t.Fatalf("election.stopped = %v after Run returned %v, want 1", v, err)
	}
}

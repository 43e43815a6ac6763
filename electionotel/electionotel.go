// Package electionotel exports an Elector's events as OpenTelemetry
// metrics. It is a separate module, so that the election module does not
// depend on OpenTelemetry. It is the counterpart of electionprom: through
// OpenTelemetry's Prometheus exporter its metrics get electionprom's names.
//
// Create the instruments once per process and give every Elector the same
// Observer:
//
//	m, err := electionotel.New(otel.Meter("github.com/sqlelect/election"))
//	...
//	e, err := election.New(db, "billing-cron", election.Config{Observer: m.Observer()})
//
// Every instrument but the last has the attribute election, the election's
// name:
//
//	election.is_leader                 gauge, 1 while this process leads the election, else 0
//	election.term_token                int64 gauge, fencing token of the current or last term led here
//	election.transitions{event}        counter, terms started ("started") and ended, by reason
//	                                   (resigned, demoted, handed-over, unhealthy, lease-expired, ...)
//	election.keepalive (s)             histogram, latency of the leader's keepalives, failed ones included
//	election.failover (s)              histogram, how long the election had no leader when this
//	                                   process began a term, at most (see Observer.Failover)
//	election.failures{kind}            counter, failed keepalives ("keepalive"), campaigns under
//	                                   Run ("campaign") and kills of stuck leaders ("kill")
//	election.kills{reason}             counter, sessions of stuck leaders killed (hang-killed, demote-killed)
//	election.health_checks{result}     counter, health checks Run made (Config.Health), "passed" or "failed"
//	election.healthy                   gauge, 1 while this process's candidate counts as healthy, else 0
//	                                   (the last check's verdict, see Observer.HealthChecked)
//	election.preferred_handovers       counter, hand-overs this process's leader asked for to a
//	                                   candidate of higher priority (Config.PreferAfter)
//	election.session{session}          gauge, 1 for how this process's candidate reaches the server
//	                                   ("own", "shared" or "pool", as Candidate.Session), 0 for
//	                                   the others
//	election.running                   gauge, 1 while Run runs here (see Observer.Running), else 0
//	election.stopped                   gauge, 1 after Run returned an error retrying cannot fix
//	                                   (access denied, the schema, ...), until Run is called
//	                                   again, else 0
//	leader_election_master_status      gauge, as election.is_leader but with the attribute name
//	                                   for the election: the metric (and label) client-go's leader
//	                                   election exports, which existing dashboards read
package electionotel

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/sqlelect/election"
)

// Metrics holds the instruments that an Observer updates. One Metrics
// serves any number of Electors and elections in a process.
type Metrics struct {
	isLeader     metric.Int64Gauge
	masterStatus metric.Int64Gauge
	token        metric.Int64Gauge
	transitions  metric.Int64Counter
	keepalive    metric.Float64Histogram
	failover     metric.Float64Histogram
	failures     metric.Int64Counter
	kills        metric.Int64Counter
	healthChecks metric.Int64Counter
	healthy      metric.Int64Gauge
	preferred    metric.Int64Counter
	session      metric.Int64Gauge
	running      metric.Int64Gauge
	stopped      metric.Int64Gauge

	// terms counts the terms held here per election. Two Electors of one
	// election in a process overlap briefly at a hand-over (the new term
	// may start before the old one's TermEnded runs), so is_leader is set
	// from this count rather than from the last event.
	mu    sync.Mutex
	terms map[string]int
	runs  map[string]int // Runs under way per election, as terms
}

// New creates the instruments with meter (for example
// otel.Meter("github.com/sqlelect/election"), or a MeterProvider's Meter).
// It returns an error joining the meter's if any instrument could not be
// created.
func New(meter metric.Meter) (*Metrics, error) {
	m := &Metrics{terms: map[string]int{}, runs: map[string]int{}}
	// 0.5ms to about 4s: a loopback round trip up to a keepalive that runs
	// into a default lease (electionprom's buckets).
	buckets := make([]float64, 14)
	for i := range buckets {
		buckets[i] = 0.0005 * math.Pow(2, float64(i))
	}
	// 1ms to about 65s: a resignation or a killed process up to a dead
	// host's lease and margin (electionprom's buckets).
	gaps := make([]float64, 17)
	for i := range gaps {
		gaps[i] = 0.001 * math.Pow(2, float64(i))
	}
	var errs [14]error
	m.isLeader, errs[0] = meter.Int64Gauge("election.is_leader",
		metric.WithDescription("1 while this process leads the election, else 0."))
	m.masterStatus, errs[1] = meter.Int64Gauge("leader_election_master_status",
		metric.WithDescription("1 while this process leads the election (attribute name), else 0; client-go's name."))
	m.token, errs[2] = meter.Int64Gauge("election.term_token",
		metric.WithDescription("Fencing token of the current or last term this process led."))
	m.transitions, errs[3] = meter.Int64Counter("election.transitions",
		metric.WithDescription(`Terms this process started (event="started") and ended, by why they ended.`))
	m.keepalive, errs[4] = meter.Float64Histogram("election.keepalive",
		metric.WithUnit("s"),
		metric.WithDescription("Latency of the leader's keepalives, failed ones included."),
		metric.WithExplicitBucketBoundaries(buckets...))
	m.failures, errs[5] = meter.Int64Counter("election.failures",
		metric.WithDescription(`Failed keepalives (kind="keepalive"), campaigns under Run (kind="campaign") and kills of stuck leaders (kind="kill").`))
	m.kills, errs[6] = meter.Int64Counter("election.kills",
		metric.WithDescription("Sessions of stuck or disobedient leaders this process killed, by reason."))
	m.failover, errs[7] = meter.Float64Histogram("election.failover",
		metric.WithUnit("s"),
		metric.WithDescription("How long the election had no leader when this process began a term, at most: since the last term's end, or its last renewal if it crashed."),
		metric.WithExplicitBucketBoundaries(gaps...))
	m.healthChecks, errs[8] = meter.Int64Counter("election.health_checks",
		metric.WithDescription(`Health checks Run made (Config.Health), by result ("passed", "failed").`))
	m.healthy, errs[9] = meter.Int64Gauge("election.healthy",
		metric.WithDescription("1 while this process's candidate counts as healthy (a check has passed, and fewer than HealthFailures have failed since), else 0."))
	m.preferred, errs[10] = meter.Int64Counter("election.preferred_handovers",
		metric.WithDescription("Hand-overs this process's leader asked for to a candidate of higher priority (Config.PreferAfter)."))
	m.session, errs[11] = meter.Int64Gauge("election.session",
		metric.WithDescription(`1 for how this process's candidate reaches the server ("own", "shared" or "pool", as Candidate.Session), 0 for the others.`))
	m.running, errs[12] = meter.Int64Gauge("election.running",
		metric.WithDescription("1 while Run runs in this process, else 0."))
	m.stopped, errs[13] = meter.Int64Gauge("election.stopped",
		metric.WithDescription("1 after Run returned an error retrying cannot fix (access denied, the schema, ...), until Run is called again, else 0."))
	if err := errors.Join(errs[:]...); err != nil {
		return nil, fmt.Errorf("electionotel: creating instruments: %w", err)
	}
	return m, nil
}

// Observer returns an Observer that updates the metrics; put it in
// election.Config.Observer. Its functions only update in-memory values and
// never block on I/O.
func (m *Metrics) Observer() *election.Observer {
	ctx := context.Background()
	return &election.Observer{
		TermStarted: func(name, _ string, token uint64) {
			m.known(name)
			m.leading(name, 1)
			m.token.Record(ctx, int64(token), attrs(name))
			m.transitions.Add(ctx, 1, attrs(name, "event", "started"))
		},
		TermEnded: func(name, _ string, _ uint64, reason string) {
			m.known(name)
			m.leading(name, -1)
			m.transitions.Add(ctx, 1, attrs(name, "event", reason))
		},
		Failover: func(name string, leaderless time.Duration) {
			m.known(name)
			m.failover.Record(ctx, leaderless.Seconds(), attrs(name))
		},
		Renewed: func(name string, latency time.Duration, err error) {
			m.known(name)
			m.keepalive.Record(ctx, latency.Seconds(), attrs(name))
			if err != nil {
				m.failures.Add(ctx, 1, attrs(name, "kind", "keepalive"))
			}
		},
		Killed: func(name, reason string, err error) {
			m.known(name)
			if err != nil {
				m.failures.Add(ctx, 1, attrs(name, "kind", "kill"))
				return
			}
			m.kills.Add(ctx, 1, attrs(name, "reason", reason))
		},
		CampaignFailed: func(name string, _ error) {
			m.known(name)
			m.failures.Add(ctx, 1, attrs(name, "kind", "campaign"))
		},
		HealthChecked: func(name string, healthy bool, err error) {
			m.known(name)
			result, v := "passed", int64(0)
			if err != nil {
				result = "failed"
			}
			if healthy {
				v = 1
			}
			m.healthChecks.Add(ctx, 1, attrs(name, "result", result))
			m.healthy.Record(ctx, v, attrs(name))
		},
		Preempted: func(name, _ string) {
			m.known(name)
			m.preferred.Add(ctx, 1, attrs(name))
		},
		Campaigning: func(name, session string) {
			m.known(name)
			for _, s := range []string{election.SessionOwn, election.SessionShared, election.SessionPool} {
				var v int64
				if s == session {
					v = 1
				}
				m.session.Record(ctx, v, attrs(name, "session", s))
			}
		},
		Running: func(name string, running bool, err error) {
			m.known(name)
			m.mu.Lock()
			defer m.mu.Unlock()
			var stopped int64
			if running {
				m.runs[name]++
			} else {
				m.runs[name]--
				if err != nil {
					stopped = 1
				}
			}
			m.running.Record(ctx, int64(min(m.runs[name], 1)), attrs(name))
			if running || err != nil {
				m.stopped.Record(ctx, stopped, attrs(name))
			}
		},
	}
}

// known records, at an election's first event, 0 for the counters the rules
// of monitoring/ read and for is_leader: Prometheus's increase() counts from
// a series' first sample, so a counter that appeared at 1 would hide its
// first event. A histogram has no such 0 (an instrument exports a point
// only once recorded): its first observation goes uncounted there.
func (m *Metrics) known(name string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.terms[name]; ok {
		return
	}
	m.terms[name] = 0
	ctx := context.Background()
	m.isLeader.Record(ctx, 0, attrs(name))
	m.masterStatus.Record(ctx, 0, metric.WithAttributes(attribute.String("name", name)))
	m.transitions.Add(ctx, 0, attrs(name, "event", "started"))
	for _, kind := range []string{"keepalive", "campaign", "kill"} {
		m.failures.Add(ctx, 0, attrs(name, "kind", kind))
	}
	for _, reason := range []string{"hang-killed", "demote-killed"} {
		m.kills.Add(ctx, 0, attrs(name, "reason", reason))
	}
	for _, result := range []string{"passed", "failed"} {
		m.healthChecks.Add(ctx, 0, attrs(name, "result", result))
	}
	m.preferred.Add(ctx, 0, attrs(name))
	m.running.Record(ctx, 0, attrs(name))
	m.stopped.Record(ctx, 0, attrs(name))
}

// leading adds delta to the terms held for election name and sets
// is_leader and leader_election_master_status to match. The lock also
// orders the recordings, so the last one recorded is the current count's.
func (m *Metrics) leading(name string, delta int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	n := m.terms[name] + delta
	m.terms[name] = n
	var v int64
	if n > 0 {
		v = 1
	}
	ctx := context.Background()
	m.isLeader.Record(ctx, v, attrs(name))
	m.masterStatus.Record(ctx, v, metric.WithAttributes(attribute.String("name", name)))
}

// attrs returns the attribute election=name and the key, value pairs kv.
func attrs(name string, kv ...string) metric.MeasurementOption {
	set := make([]attribute.KeyValue, 0, 1+len(kv)/2)
	set = append(set, attribute.String("election", name))
	for i := 0; i+1 < len(kv); i += 2 {
		set = append(set, attribute.String(kv[i], kv[i+1]))
	}
	return metric.WithAttributes(set...)
}

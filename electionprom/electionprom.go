// Package electionprom exports an Elector's events as Prometheus metrics.
// It is a separate module, so that the election module does not depend on
// Prometheus.
//
// Register the metrics once per process and give every Elector the same
// Observer:
//
//	m, err := electionprom.New(prometheus.DefaultRegisterer)
//	...
//	e, err := election.New(db, "billing-cron", election.Config{Observer: m.Observer()})
//
// Every metric is labelled with the election's name (label election):
//
//	election_is_leader                    1 while this process leads the election, else 0
//	election_term_token                   fencing token of the current or last term led here
//	election_transitions_total{event}     terms started ("started") and ended, by reason
//	                                      (resigned, demoted, handed-over, unhealthy, lease-expired, ...)
//	election_keepalive_seconds            latency of the leader's keepalives, failed ones included
//	election_failover_seconds             how long the election had no leader when this process
//	                                      began a term, at most (see Observer.Failover)
//	election_failures_total{kind}         failed keepalives ("keepalive"), campaigns under
//	                                      Run ("campaign") and kills of stuck leaders ("kill")
//	election_kills_total{reason}          sessions of stuck leaders killed (hang-killed, demote-killed)
//	election_health_checks_total{result}  health checks Run made (Config.Health), "passed" or "failed"
//	election_healthy                      1 while this process's candidate counts as healthy, else 0
//	                                      (the last check's verdict, see Observer.HealthChecked)
//	election_preferred_handovers_total    hand-overs this process's leader asked for to a candidate
//	                                      of higher priority (Config.PreferAfter)
//	election_session{session}             1 for how this process's candidate reaches the server
//	                                      ("own", "shared" or "pool", as Candidate.Session), 0 for
//	                                      the others
//	election_running                      1 while Run runs here (see Observer.Running), else 0
//	election_stopped                      1 after Run returned an error retrying cannot fix (access
//	                                      denied, the schema, ...), until Run is called again, else 0
//
// and, labelled name rather than election, the metric client-go's leader
// election exports, which existing dashboards read:
//
//	leader_election_master_status{name}   1 while this process leads the election, else 0
package electionprom

import (
	"fmt"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sqlelect/election"
)

// Metrics holds the collectors that an Observer updates. One Metrics serves
// any number of Electors and elections in a process.
type Metrics struct {
	isLeader     *prometheus.GaugeVec
	masterStatus *prometheus.GaugeVec
	token        *prometheus.GaugeVec
	transitions  *prometheus.CounterVec
	keepalive    *prometheus.HistogramVec
	failover     *prometheus.HistogramVec
	failures     *prometheus.CounterVec
	kills        *prometheus.CounterVec
	healthChecks *prometheus.CounterVec
	healthy      *prometheus.GaugeVec
	preferred    *prometheus.CounterVec
	session      *prometheus.GaugeVec
	running      *prometheus.GaugeVec
	stopped      *prometheus.GaugeVec

	// terms counts the terms held here per election, from its first event
	// on. Two Electors of one election in a process overlap briefly at a
	// hand-over (the new term may start before the old one's TermEnded
	// runs), so is_leader is set from this count rather than from the last
	// event.
	mu    sync.Mutex
	terms map[string]int
	runs  map[string]int // Runs under way per election, as terms
}

// New creates the metrics and registers them with reg (for example
// prometheus.DefaultRegisterer, or a prometheus.NewRegistry()). Either all
// are registered or none: registering twice with the same reg returns an
// error wrapping the registry's (a prometheus.AlreadyRegisteredError).
func New(reg prometheus.Registerer) (*Metrics, error) {
	const ns = "election"
	m := &Metrics{
		isLeader: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: ns, Name: "is_leader",
			Help: "1 while this process leads the election, else 0.",
		}, []string{"election"}),
		masterStatus: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "leader_election_master_status",
			Help: "1 while this process leads the election (label name), else 0; client-go's metric.",
		}, []string{"name"}),
		token: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: ns, Name: "term_token",
			Help: "Fencing token of the current or last term this process led.",
		}, []string{"election"}),
		transitions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: ns, Name: "transitions_total",
			Help: `Terms this process started (event="started") and ended, by why they ended.`,
		}, []string{"election", "event"}),
		keepalive: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: ns, Name: "keepalive_seconds",
			Help: "Latency of the leader's keepalives, failed ones included.",
			// 0.5ms to about 4s: a loopback round trip up to a keepalive
			// that runs into a default lease.
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 14),
		}, []string{"election"}),
		failover: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: ns, Name: "failover_seconds",
			Help: "How long the election had no leader when this process began a term, at most: since the last term's end, or its last renewal if it crashed.",
			// 1ms to about 65s: a resignation or a killed process up to a
			// dead host's lease and margin.
			Buckets: prometheus.ExponentialBuckets(0.001, 2, 17),
		}, []string{"election"}),
		failures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: ns, Name: "failures_total",
			Help: `Failed keepalives (kind="keepalive"), campaigns under Run (kind="campaign") and kills of stuck leaders (kind="kill").`,
		}, []string{"election", "kind"}),
		kills: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: ns, Name: "kills_total",
			Help: "Sessions of stuck or disobedient leaders this process killed, by reason.",
		}, []string{"election", "reason"}),
		healthChecks: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: ns, Name: "health_checks_total",
			Help: `Health checks Run made (Config.Health), by result ("passed", "failed").`,
		}, []string{"election", "result"}),
		healthy: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: ns, Name: "healthy",
			Help: "1 while this process's candidate counts as healthy (a check has passed, and fewer than HealthFailures have failed since), else 0.",
		}, []string{"election"}),
		preferred: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: ns, Name: "preferred_handovers_total",
			Help: "Hand-overs this process's leader asked for to a candidate of higher priority (Config.PreferAfter).",
		}, []string{"election"}),
		session: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: ns, Name: "session",
			Help: `1 for how this process's candidate reaches the server ("own", "shared" or "pool", as Candidate.Session), 0 for the others.`,
		}, []string{"election", "session"}),
		running: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: ns, Name: "running",
			Help: "1 while Run runs in this process, else 0.",
		}, []string{"election"}),
		stopped: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: ns, Name: "stopped",
			Help: "1 after Run returned an error retrying cannot fix (access denied, the schema, ...), until Run is called again, else 0.",
		}, []string{"election"}),
		terms: map[string]int{},
		runs:  map[string]int{},
	}
	all := collectors{m.isLeader, m.masterStatus, m.token, m.transitions, m.keepalive, m.failover, m.failures, m.kills,
		m.healthChecks, m.healthy, m.preferred, m.session, m.running, m.stopped}
	if err := reg.Register(all); err != nil {
		return nil, fmt.Errorf("electionprom: registering metrics: %w", err)
	}
	return m, nil
}

// Observer returns an Observer that updates the metrics; put it in
// election.Config.Observer. Its functions only update in-memory values and
// never block on I/O.
func (m *Metrics) Observer() *election.Observer {
	return &election.Observer{
		TermStarted: func(name, _ string, token uint64) {
			m.known(name)
			m.leading(name, 1)
			m.token.WithLabelValues(name).Set(float64(token))
			m.transitions.WithLabelValues(name, "started").Inc()
		},
		TermEnded: func(name, _ string, _ uint64, reason string) {
			m.known(name)
			m.leading(name, -1)
			m.transitions.WithLabelValues(name, reason).Inc()
		},
		Failover: func(name string, leaderless time.Duration) {
			m.known(name)
			m.failover.WithLabelValues(name).Observe(leaderless.Seconds())
		},
		Renewed: func(name string, latency time.Duration, err error) {
			m.known(name)
			m.keepalive.WithLabelValues(name).Observe(latency.Seconds())
			if err != nil {
				m.failures.WithLabelValues(name, "keepalive").Inc()
			}
		},
		Killed: func(name, reason string, err error) {
			m.known(name)
			if err != nil {
				m.failures.WithLabelValues(name, "kill").Inc()
				return
			}
			m.kills.WithLabelValues(name, reason).Inc()
		},
		CampaignFailed: func(name string, _ error) {
			m.known(name)
			m.failures.WithLabelValues(name, "campaign").Inc()
		},
		HealthChecked: func(name string, healthy bool, err error) {
			m.known(name)
			result, v := "passed", 0.0
			if err != nil {
				result = "failed"
			}
			if healthy {
				v = 1
			}
			m.healthChecks.WithLabelValues(name, result).Inc()
			m.healthy.WithLabelValues(name).Set(v)
		},
		Preempted: func(name, _ string) {
			m.known(name)
			m.preferred.WithLabelValues(name).Inc()
		},
		Campaigning: func(name, session string) {
			m.known(name)
			for _, s := range []string{election.SessionOwn, election.SessionShared, election.SessionPool} {
				v := 0.0
				if s == session {
					v = 1
				}
				m.session.WithLabelValues(name, s).Set(v)
			}
		},
		Running: func(name string, running bool, err error) {
			m.known(name)
			m.mu.Lock()
			defer m.mu.Unlock()
			stopped := 0.0
			if running {
				m.runs[name]++
			} else {
				m.runs[name]--
				if err != nil {
					stopped = 1
				}
			}
			m.running.WithLabelValues(name).Set(float64(min(m.runs[name], 1)))
			if running || err != nil {
				m.stopped.WithLabelValues(name).Set(stopped)
			}
		},
	}
}

// known exports, at an election's first event, the series the rules of
// monitoring/ read at 0: Prometheus's increase() counts from a series'
// first sample, so a counter that appeared at 1 would hide its first event
// ("Avoid missing metrics", Prometheus's instrumentation practices).
func (m *Metrics) known(name string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.terms[name]; ok {
		return
	}
	m.terms[name] = 0
	m.isLeader.WithLabelValues(name)
	m.masterStatus.WithLabelValues(name)
	m.transitions.WithLabelValues(name, "started")
	m.keepalive.WithLabelValues(name)
	m.failover.WithLabelValues(name)
	for _, kind := range []string{"keepalive", "campaign", "kill"} {
		m.failures.WithLabelValues(name, kind)
	}
	for _, reason := range []string{"hang-killed", "demote-killed"} {
		m.kills.WithLabelValues(name, reason)
	}
	for _, result := range []string{"passed", "failed"} {
		m.healthChecks.WithLabelValues(name, result)
	}
	m.preferred.WithLabelValues(name)
	m.running.WithLabelValues(name)
	m.stopped.WithLabelValues(name)
}

// leading adds delta to the terms held for election name and sets
// is_leader and leader_election_master_status to match.
func (m *Metrics) leading(name string, delta int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	n := m.terms[name] + delta
	m.terms[name] = n
	v := 0.0
	if n > 0 {
		v = 1
	}
	m.isLeader.WithLabelValues(name).Set(v)
	m.masterStatus.WithLabelValues(name).Set(v)
}

// collectors registers several collectors as one, so that New registers
// all of them or none.
type collectors []prometheus.Collector

func (cs collectors) Describe(ch chan<- *prometheus.Desc) {
	for _, c := range cs {
		c.Describe(ch)
	}
}

func (cs collectors) Collect(ch chan<- prometheus.Metric) {
	for _, c := range cs {
		c.Collect(ch)
	}
}

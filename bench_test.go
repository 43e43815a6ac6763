package election_test

import (
	"context"
	"database/sql"
	"fmt"
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/sqlelect/election"
	"github.com/sqlelect/election/internal/faultproxy"
)

// BenchmarkFailover measures, for each strategy, the time from a fault to
// the moment the next candidate's term starts, with the test timing
// (Interval and CheckInterval 100ms, Lease 1s, Margin 1s, so wait_timeout
// 2s). Run it as
//
//	go test -run '^$' -bench Failover -benchtime 20x
//
// Reported: the median and the largest failover, in milliseconds, and for
// the blackhole the time the cut-off leader took to know it lost.
func BenchmarkFailover(b *testing.B) {
	for _, s := range strategies {
		b.Run(s.String()+"/resign", func(b *testing.B) {
			benchInProcess(b, s, false, func(old *election.Term, _ *election.Operator, _ *faultproxy.Proxy) func() {
				return func() { old.Resign(context.Background()) }
			})
		})
		if s == election.GetLock { // a lease holds no session to kill
			b.Run(s.String()+"/kill-connection", func(b *testing.B) {
				admin := server.Open(b, "")
				benchInProcess(b, s, false, func(_ *election.Term, ops *election.Operator, _ *faultproxy.Proxy) func() {
					rec, err := ops.Leader(context.Background())
					if err != nil {
						b.Fatal(err)
					}
					return func() {
						if _, err := admin.Exec(fmt.Sprint("KILL CONNECTION ", rec.ConnID)); err != nil {
							b.Fatal(err)
						}
					}
				})
			})
		}
		b.Run(s.String()+"/blackhole", func(b *testing.B) {
			benchInProcess(b, s, true, func(_ *election.Term, _ *election.Operator, p *faultproxy.Proxy) func() {
				return p.Blackhole
			})
		})
		b.Run(s.String()+"/sigkill-process", func(b *testing.B) {
			_, g := writingGroup(b, s, "bench-sigkill", 3)
			leader := g.Next(is("start"), 30*time.Second)
			var took []time.Duration
			for i := range b.N {
				g.Next(isFrom("write", leader.ID), 10*time.Second)
				killed := time.Now()
				g.signal(leader.ID, syscall.SIGKILL)
				next := g.Next(is("start"), 30*time.Second)
				took = append(took, time.Unix(0, next.At).Sub(killed))
				g.start(leader.ID + "-" + string(rune('a'+i%26)))
				leader = next
			}
			report(b, "failover", took)
		})
	}
}

// benchInProcess has two in-process candidates, the first one leading
// (through a fault proxy when viaProxy is set); prepare returns the fault,
// which is timed until the second one leads.
func benchInProcess(b *testing.B, s election.Strategy, proxied bool, prepare func(*election.Term, *election.Operator, *faultproxy.Proxy) func()) {
	var took, knew []time.Duration
	for range b.N {
		dbName := server.NewDatabase(b)
		leaderDB := server.Open(b, dbName)
		var proxy *faultproxy.Proxy
		if proxied {
			leaderDB, proxy = viaProxy(b, dbName)
		}
		ctx := ctxFor(b, time.Minute)
		a := newElector(b, s, leaderDB, "bench", "a")
		next := newElector(b, s, server.Open(b, dbName), "bench", "b")
		old := await(b, campaign(ctx, a), 10*time.Second).term
		rb := campaign(ctx, next)
		time.Sleep(50 * time.Millisecond) // b blocks in GET_LOCK
		fault := prepare(old, newOperator(b, leaderDB, "bench"), proxy)
		ended := make(chan time.Time, 1)
		go func() { <-old.Done(); ended <- time.Now() }()
		start := time.Now()
		fault()
		r := await(b, rb, 30*time.Second)
		took = append(took, r.at.Sub(start))
		if proxy != nil {
			knew = append(knew, (<-ended).Sub(start))
			proxy.Restore()
		}
		resignAll(b, r.term, old)
	}
	report(b, "failover", took)
	if len(knew) > 0 {
		report(b, "old-knew", knew)
	}
}

func report(b *testing.B, what string, ds []time.Duration) {
	slices.Sort(ds)
	ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
	b.ReportMetric(ms(ds[len(ds)/2]), what+"-p50-ms")
	b.ReportMetric(ms(ds[len(ds)-1]), what+"-max-ms")
	b.ReportMetric(0, "ns/op")
}

// BenchmarkSteadyState measures what an idle election costs the server:
// statements per second with one leader and two waiting candidates, from the
// server's Questions counter over 5 seconds, with the default timing
// (Interval and CheckInterval 1s, Lease 5s). Run it alone:
//
//	go test -run '^$' -bench SteadyState -benchtime 1x
func BenchmarkSteadyState(b *testing.B) {
	for _, s := range strategies {
		b.Run(s.String(), func(b *testing.B) {
			db, _ := newDB(b)
			admin := server.Open(b, "")
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan struct{}, 3)
			for _, id := range []string{"a", "b", "c"} {
				e, err := election.New(db, "steady", election.Config{Strategy: s, Identity: id})
				if err != nil {
					b.Fatal(err)
				}
				go func() {
					e.Run(ctx, func(ctx context.Context, _ *election.Term) error { <-ctx.Done(); return nil })
					done <- struct{}{}
				}()
			}
			defer func() { cancel(); <-done; <-done; <-done }()
			time.Sleep(3 * time.Second) // everyone campaigning
			for range b.N {
				before := counters(b, admin)
				time.Sleep(5 * time.Second)
				// Two statements are the measurement's own.
				d := counters(b, admin).minus(before)
				b.ReportMetric((d.questions-2)/5, "queries/s")
				b.ReportMetric((d.roundTrips()-2)/5, "round-trips/s")
			}
			b.ReportMetric(0, "ns/op")
		})
	}
}

// BenchmarkFenced measures what fencing adds to a transaction of one INSERT:
// time per transaction, statements sent to the server (its Questions
// counter, which also counts the leader's keepalives: a few per second) and
// round trips (statements plus prepares: the INSERT has an argument, so it
// is a PREPARE and an EXECUTE), unfenced against Term.Fenced. The fenced
// run also reports both as ratios to the unfenced run just before it. Run
// it as
//
//	go test -run '^$' -bench Fenced -benchtime 2000x .
func BenchmarkFenced(b *testing.B) {
	db, _ := newDB(b)
	createWrites(b, db)
	admin := server.Open(b, "")
	ctx := context.Background()
	term, err := newElector(b, election.Auto, db, "fenced-bench", "a").Campaign(ctx)
	if err != nil {
		b.Fatal(err)
	}
	defer term.Resign(ctx)
	insert := func(tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, "INSERT INTO writes (token, holder) VALUES (?, 'a')", term.Token())
		return err
	}
	var plain struct{ ns, roundTrips float64 } // per op, of the latest unfenced run
	for _, c := range []struct {
		name string
		run  func() error
	}{
		{"unfenced", func() error {
			tx, err := db.BeginTx(ctx, nil)
			if err != nil {
				return err
			}
			if err := insert(tx); err != nil {
				tx.Rollback()
				return err
			}
			return tx.Commit()
		}},
		{"fenced", func() error { return term.Fenced(ctx, insert) }},
	} {
		b.Run(c.name, func(b *testing.B) {
			before := counters(b, admin)
			b.ResetTimer()
			for range b.N {
				if err := c.run(); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			// Less the one SHOW STATUS of the measurement.
			d := counters(b, admin).minus(before)
			ns := float64(b.Elapsed().Nanoseconds()) / float64(b.N)
			roundTrips := (d.roundTrips() - 1) / float64(b.N)
			if d.questions > 0 { // TiDB keeps no Questions counter
				b.ReportMetric((d.questions-1)/float64(b.N), "statements/op")
				b.ReportMetric(roundTrips, "round-trips/op")
			}
			if c.name == "unfenced" {
				plain.ns, plain.roundTrips = ns, roundTrips
			} else if plain.ns > 0 {
				if d.questions > 0 {
					b.ReportMetric(roundTrips/plain.roundTrips, "round-trips-ratio")
				}
				b.ReportMetric(ns/plain.ns, "time-ratio")
			}
		})
	}
}

// serverCounters are the server's counts of what clients sent it.
type serverCounters struct {
	questions float64 // statements: COM_QUERY and COM_STMT_EXECUTE
	prepares  float64 // COM_STMT_PREPARE, a round trip of its own
}

// roundTrips is statements plus prepares: each waits for the server.
func (c serverCounters) roundTrips() float64 { return c.questions + c.prepares }

func (c serverCounters) minus(o serverCounters) serverCounters {
	return serverCounters{c.questions - o.questions, c.prepares - o.prepares}
}

// counters reads the server's global counters.
func counters(b *testing.B, admin *sql.DB) serverCounters {
	rows, err := admin.Query("SHOW GLOBAL STATUS WHERE Variable_name IN ('Questions', 'Com_stmt_prepare')")
	if err != nil {
		b.Fatal(err)
	}
	defer rows.Close()
	var c serverCounters
	for rows.Next() {
		var name string
		var n float64
		if err := rows.Scan(&name, &n); err != nil {
			b.Fatal(err)
		}
		if name == "Questions" {
			c.questions = n
		} else {
			c.prepares = n
		}
	}
	return c
}

// BenchmarkCampaign counts what one campaign and its resignation send to
// the server, from the server's own counters: statements, and round trips
// (statements plus prepares; with the driver's default DSN a statement with
// arguments is a PREPARE and an EXECUTE). One candidate, nobody else: the
// pinned session's setup, GET_LOCK, the term start, and the release.
//
//	go test -run '^$' -bench Campaign -benchtime 50x
func BenchmarkCampaign(b *testing.B) {
	for _, s := range strategies {
		b.Run(s.String(), func(b *testing.B) {
			db, _ := newDB(b)
			admin := server.Open(b, "")
			cfg := election.Config{Strategy: s, Identity: "a", Interval: time.Hour, Lease: 2 * time.Hour, CheckInterval: 100 * time.Millisecond}
			e, err := election.New(db, "campaign", cfg)
			if err != nil {
				b.Fatal(err)
			}
			ctx := context.Background()
			resignAll(b, await(b, campaign(ctx, e), 10*time.Second).term) // tables, platform
			before := counters(b, admin)
			b.ResetTimer()
			for range b.N {
				t, err := e.Campaign(ctx)
				if err != nil {
					b.Fatal(err)
				}
				t.Resign(ctx)
			}
			b.StopTimer()
			d := counters(b, admin).minus(before)
			// Less the one SHOW STATUS of the measurement.
			b.ReportMetric((d.questions-1)/float64(b.N), "statements/op")
			b.ReportMetric((d.roundTrips()-1)/float64(b.N), "round-trips/op")
		})
	}
}

// BenchmarkWakeUp profiles what the first statements after a GET_LOCK
// wake-up cost, the path from a leader's end to its successor's term: a
// waiter blocks in GET_LOCK until another session releases the lock, then
// sends a trivial SELECT and a one-row UPDATE, as a term start's read and
// claim follow the wake; the same two statements in a busy loop are the
// baseline. Reported: medians in microseconds of the wake (release to
// GET_LOCK's return), of each statement after it, and of each in the loop.
//
//	go test -run '^$' -bench WakeUp -benchtime 200x .
func BenchmarkWakeUp(b *testing.B) {
	dbName := server.NewDatabase(b)
	db := server.Open(b, dbName)
	ctx := context.Background()
	if _, err := db.Exec("CREATE TABLE wake (id INT PRIMARY KEY, n BIGINT NOT NULL)"); err != nil {
		b.Fatal(err)
	}
	if _, err := db.Exec("INSERT INTO wake VALUES (1, 0)"); err != nil {
		b.Fatal(err)
	}
	conn := func() *sql.Conn {
		c, err := db.Conn(ctx)
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { c.Close() })
		return c
	}
	holder, waiter := conn(), conn()
	exec := func(c *sql.Conn, query string) time.Duration {
		t0 := time.Now()
		if _, err := c.ExecContext(ctx, query); err != nil {
			b.Fatal(err)
		}
		return time.Since(t0)
	}
	const lock = "SELECT GET_LOCK('wake', 10)"
	var wake, selectAfter, updateAfter, selectHot, updateHot []time.Duration
	for range b.N {
		exec(holder, lock)
		woke := make(chan time.Time, 1)
		go func() {
			exec(waiter, lock)
			woke <- time.Now()
		}()
		time.Sleep(20 * time.Millisecond) // the waiter blocks, and idles
		released := time.Now()
		exec(holder, "DO RELEASE_LOCK('wake')")
		wake = append(wake, (<-woke).Sub(released))
		selectAfter = append(selectAfter, exec(waiter, "SELECT 1"))
		updateAfter = append(updateAfter, exec(waiter, "UPDATE wake SET n = n + 1 WHERE id = 1"))
		exec(waiter, "DO RELEASE_LOCK('wake')")
		selectHot = append(selectHot, exec(waiter, "SELECT 1"))
		updateHot = append(updateHot, exec(waiter, "UPDATE wake SET n = n + 1 WHERE id = 1"))
	}
	for _, m := range []struct {
		name string
		ds   []time.Duration
	}{{"wake", wake}, {"select-after-wake", selectAfter}, {"update-after-select", updateAfter}, {"select-hot", selectHot}, {"update-hot", updateHot}} {
		slices.Sort(m.ds)
		b.ReportMetric(float64(m.ds[len(m.ds)/2].Microseconds()), m.name+"-p50-µs")
	}
	b.ReportMetric(0, "ns/op")
}

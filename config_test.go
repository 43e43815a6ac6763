package election_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sqlelect/election"
)

// New and NewOperator refuse bad input with ErrInvalidConfig naming it,
// and, as they do no I/O, write nothing: no table is made, whether the
// input is refused or not.
func TestNewRejectsBadInput(t *testing.T) {
	t.Parallel()
	db, dsn := newDB(t)
	one := openDSN(t, dsn)
	one.SetMaxOpenConns(1)
	cases := []struct {
		name     string
		db       *sql.DB
		election string
		cfg      election.Config
		want     string // in the message
	}{
		{"nil db", nil, "x", election.Config{}, "db is nil"},
		{"empty name", db, "", election.Config{}, "name is empty"},
		{"name not UTF-8", db, "a\xffb", election.Config{}, "not valid UTF-8"},
		{"name too long", db, strings.Repeat("n", 70000), election.Config{}, "limit is 65535"},
		{"negative interval", db, "x", election.Config{Interval: -time.Second}, "Interval"},
		{"lease not twice the interval", db, "x", election.Config{Interval: time.Second, Lease: 1500 * time.Millisecond}, "at least 2×Interval"},
		{"negative margin", db, "x", election.Config{Margin: -1}, "Margin"},
		{"negative check interval", db, "x", election.Config{CheckInterval: -1}, "CheckInterval"},
		{"lease beyond wait_timeout", db, "x", election.Config{Lease: 400 * 24 * time.Hour}, "wait_timeout"},
		{"bad table prefix", db, "x", election.Config{TablePrefix: "bad-prefix"}, "TablePrefix"},
		{"identity too long", db, "x", election.Config{Identity: strings.Repeat("i", 256)}, "Identity"},
		{"identity of 256 characters", db, "x", election.Config{Identity: strings.Repeat("é", 256)}, "limit is 255"},
		{"identity with a trailing space", db, "x", election.Config{Identity: "host-a "}, "ends in a space"},
		{"identity with an escape sequence", db, "x", election.Config{Identity: "host-a\x1b[2K\rhost-z"}, "control, format or invisible"},
		{"identity with a bidi override", db, "x", election.Config{Identity: "host-\u202ea"}, "control, format or invisible"},
		{"identity not UTF-8", db, "x", election.Config{Identity: "a\xffb"}, "not valid UTF-8"},
		{"name with a control character", db, "a\rb", election.Config{}, "control, format or invisible"},
		{"name of 65536 bytes", db, strings.Repeat("n", 65536), election.Config{}, "limit is 65535"},
		{"interval that overflows 2×Interval", db, "x", election.Config{Interval: 1 << 62}, "Interval"},
		{"largest interval", db, "x", election.Config{Interval: math.MaxInt64}, "Interval"},
		{"lease whose wait_timeout overflows", db, "x", election.Config{Lease: math.MaxInt64 - 500*time.Millisecond, Margin: time.Second}, "Lease"},
		{"largest margin", db, "x", election.Config{Margin: math.MaxInt64}, "Margin"},
		{"largest check interval", db, "x", election.Config{CheckInterval: math.MaxInt64}, "CheckInterval"},
		{"check interval longer than the lease", db, "x", election.Config{CheckInterval: 6 * time.Second}, "CheckInterval"},
		{"identity with an invisible filler", db, "x", election.Config{Identity: "host-a\u3164"}, "control, format or invisible"},
		{"identity with a blank braille pattern", db, "x", election.Config{Identity: "host-a\u2800"}, "control, format or invisible"},
		{"lease and margin beyond a year together", db, "x", election.Config{Lease: 200 * 24 * time.Hour, Margin: 200 * 24 * time.Hour}, "wait_timeout"},
		{"negative history limit", db, "x", election.Config{HistoryLimit: -1}, "HistoryLimit"},
		{"value too long", db, "x", election.Config{Value: strings.Repeat("v", 1025)}, "1025 bytes"},
		{"value with an escape", db, "x", election.Config{Value: "http://a\x1b[2J"}, "not printable"},
		{"version too long", db, "x", election.Config{Version: strings.Repeat("1", 65)}, "Version"},
		{"PreferAfter below the lease", db, "x", election.Config{Lease: 5 * time.Second, PreferAfter: time.Second}, "PreferAfter"},
		{"negative PreferAfter", db, "x", election.Config{PreferAfter: -time.Second}, "PreferAfter"},
		{"negative HealthFailures", db, "x", election.Config{HealthFailures: -1}, "HealthFailures"},
		{"unknown strategy", db, "x", election.Config{Strategy: election.LeaseRow + 1}, "Strategy"},
		{"pool of one connection", one, "x", election.Config{}, "SetMaxOpenConns(2)"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := election.New(tc.db, tc.election, tc.cfg)
			if !errors.Is(err, election.ErrInvalidConfig) {
				t.Fatalf("got %v, want ErrInvalidConfig", err)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %q does not mention %q", err, tc.want)
			}
			if tc.db == one {
				return // an Operator pins no session
			}
			if _, err := election.NewOperator(tc.db, tc.election, tc.cfg); !errors.Is(err, election.ErrInvalidConfig) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("NewOperator: %v, want ErrInvalidConfig mentioning %q", err, tc.want)
			}
		})
	}
	valid := []struct {
		election string
		cfg      election.Config
	}{
		{"a name of any printable UTF-8: ünïcödé ✓", election.Config{}},
		{strings.Repeat("n", 65535), election.Config{}},
		{"x", election.Config{Identity: strings.Repeat("é", 255)}}, // 510 bytes: characters count
		{"x", election.Config{Identity: " host-a"}},
		{"trailing space in a name is kept apart by the hash ", election.Config{}},
		{"x", election.Config{Lease: 300 * 24 * time.Hour, Interval: time.Hour}},
	}
	for _, v := range valid {
		if _, err := election.New(db, v.election, v.cfg); err != nil {
			t.Fatalf("valid input refused: %v", err)
		}
	}
	assertWroteNothing(t, db, nil, "New and NewOperator")
}

// A pool bounded to one connection after New, which New refuses: the
// next campaign refuses it the same way, and a fenced transaction of a
// term already begun returns the error at once, instead of waiting for
// the connection the candidate holds, for the whole term.
func TestPoolBoundedToOneAfterNew(t *testing.T) {
	t.Parallel()
	db, _ := newDB(t)
	ctx := ctxFor(t, time.Minute)
	e := newElector(t, election.Auto, db, "one-connection", "a")
	term, err := e.Campaign(ctx)
	if err != nil {
		t.Fatal(err)
	}
	db.SetMaxOpenConns(1)
	err = term.Fenced(ctx, func(tx *sql.Tx) error { return nil })
	if !errors.Is(err, election.ErrInvalidConfig) || !strings.Contains(err.Error(), "SetMaxOpenConns(2)") {
		t.Fatalf("Fenced on a pool bounded to one connection: %v, want ErrInvalidConfig naming SetMaxOpenConns(2)", err)
	}
	if err := term.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := e.Campaign(ctx); !errors.Is(err, election.ErrInvalidConfig) {
		t.Fatalf("Campaign on a pool bounded to one connection: %v, want ErrInvalidConfig", err)
	}
}

func TestDSNWithoutDatabase(t *testing.T) {
	t.Parallel()
	e := newElector(t, election.GetLock, server.Open(t, ""), "nodb", "a")
	_, err := e.Campaign(ctxFor(t, 10*time.Second))
	if !errors.Is(err, election.ErrInvalidConfig) || !strings.Contains(err.Error(), "names no database") {
		t.Fatalf("campaign without a database: %v", err)
	}
}

func TestUnreachableServer(t *testing.T) {
	t.Parallel()
	db := openDSN(t, "root@tcp(127.0.0.1:1)/nowhere?timeout=1s")
	e := newElector(t, election.GetLock, db, "unreachable", "a")
	_, err := e.Campaign(ctxFor(t, 10*time.Second))
	if err == nil || !strings.Contains(err.Error(), "reaching the server") || !strings.Contains(err.Error(), "connection refused") {
		t.Fatalf("campaign against no server: %v", err)
	}
	// Run keeps trying (the server may come back) until its context ends.
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	err = e.Run(ctx, func(context.Context, *election.Term) error { t.Error("led without a server"); return nil })
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Run against no server returned %v", err)
	}
}

// A login the server refuses does not heal by retrying: Run returns
// ErrAccessDenied, naming the fix, after one campaign instead of retrying
// forever; the Observer saw that one failure, HealthHandler answers 503, and
// an Operator gets the same error. (An unreachable server is retried:
// TestUnreachableServer.)
func TestRefusedLoginEndsRun(t *testing.T) {
	t.Parallel()
	dbName := server.NewDatabase(t)
	app, stranger := "app_"+dbName, "stranger_"+dbName
	openAsUser(t, dbName, app, "GRANT ALL ON `"+dbName+"`.* TO %s")
	openAsUser(t, dbName, stranger, "GRANT USAGE ON *.* TO %s") // no privilege on any database
	wrongPassword, notTheirs := server.Config(dbName), server.Config(dbName)
	wrongPassword.User, wrongPassword.Passwd = app, "wrong"
	notTheirs.User, notTheirs.Passwd = stranger, "pw"
	for _, tc := range []struct{ name, dsn, fix string }{
		{"wrong password", wrongPassword.FormatDSN(), "user and password"},
		{"database of another user", notTheirs.FormatDSN(), "grant the DSN's user privileges on its database"},
		{"no such database", server.DSN(dbName + "_missing"), "create the database"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			forEachStrategy(t, func(t *testing.T, s election.Strategy) {
				var (
					mu     sync.Mutex
					failed []error
				)
				cfg := fast
				cfg.Strategy, cfg.Identity = s, "a"
				var ran []string
				cfg.Observer = &election.Observer{CampaignFailed: func(_ string, err error) {
					mu.Lock()
					failed = append(failed, err)
					mu.Unlock()
				}, Running: func(_ string, running bool, err error) {
					mu.Lock()
					ran = append(ran, fmt.Sprint(running, " ", errors.Is(err, election.ErrAccessDenied)))
					mu.Unlock()
				}}
				db := openDSN(t, tc.dsn)
				e := newElectorWith(t, db, "refused", cfg)
				ctx := ctxFor(t, time.Minute) // a guard only: Run must return by itself
				err := e.Run(ctx, func(context.Context, *election.Term) error { t.Error("led with a refused login"); return nil })
				if !errors.Is(err, election.ErrAccessDenied) || ctx.Err() != nil || !strings.Contains(err.Error(), tc.fix) {
					t.Fatalf("Run returned %v (context: %v), want ErrAccessDenied naming the fix %q", err, ctx.Err(), tc.fix)
				}
				mu.Lock()
				if len(failed) != 1 || !errors.Is(failed[0], election.ErrAccessDenied) {
					t.Errorf("the Observer saw the failed campaigns %v, want the one Run returned", failed)
				}
				if got := strings.Join(ran, ", "); got != "true false, false true" {
					t.Errorf("Observer.Running saw (running, access denied) %s, want Run's start, then its end with the error", got)
				}
				mu.Unlock()
				if code, body := status(e.HealthHandler()); code != http.StatusServiceUnavailable || !strings.Contains(body, "refused the login") {
					t.Errorf("health after Run returned: %d %s", code, body)
				}
				if _, err := newOperatorWith(t, db, "refused", fast).Leader(ctx); !errors.Is(err, election.ErrAccessDenied) {
					t.Errorf("Operator.Leader: %v, want ErrAccessDenied", err)
				}
			})
		})
	}
}

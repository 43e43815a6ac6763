package election_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sqlelect/election"
)

func TestMissingPrivilegeNamesTheDDL(t *testing.T) {
	t.Parallel()
	dbName := server.NewDatabase(t)
	db := openAsUser(t, dbName, "ro_"+dbName, "GRANT SELECT, INSERT, UPDATE, DELETE ON `"+dbName+"`.* TO %s")
	e := newElector(t, election.Auto, db, "no-create", "a")
	_, err := e.Campaign(ctxFor(t, 10*time.Second))
	if !errors.Is(err, election.ErrSchema) || !strings.Contains(err.Error(), "CREATE TABLE IF NOT EXISTS `election_record`") {
		t.Fatalf("campaign without CREATE privilege: %v", err)
	}
	assertWroteNothing(t, server.Open(t, dbName), nil, "the campaign without CREATE privilege")
	// Once a DBA has created the tables, the same user campaigns.
	if err := election.CreateSchema(ctxFor(t, 10*time.Second), server.Open(t, dbName), ""); err != nil {
		t.Fatal(err)
	}
	term, err := e.Campaign(ctxFor(t, 10*time.Second))
	if err != nil {
		t.Fatalf("campaign on tables a DBA created: %v", err)
	}
	resignAll(t, term)
}

// With SkipCreateTables, missing tables (all, or some) are reported with
// the DDL, and the campaign creates none and writes no row.
func TestSkipCreateTablesReportsMissingTables(t *testing.T) {
	t.Parallel()
	db, _ := newDB(t)
	cfg := fast
	cfg.SkipCreateTables = true
	e := newElectorWith(t, db, "skip", cfg)
	_, err := e.Campaign(ctxFor(t, 10*time.Second))
	if !errors.Is(err, election.ErrSchema) || !strings.Contains(err.Error(), "doesn't exist") || !strings.Contains(err.Error(), "CREATE TABLE") ||
		!strings.HasPrefix(err.Error(), "election: checking the tables: tables missing or not usable: ") {
		t.Fatalf("campaign without tables: %v", err)
	}
	assertWroteNothing(t, db, nil, "the campaign without tables")
	ddl, err := election.SchemaDDL("")
	if err != nil {
		t.Fatal(err)
	}
	stmts := strings.Split(strings.TrimSpace(ddl), ";")
	if _, err := db.Exec(stmts[0]); err != nil { // the record table only
		t.Fatal(err)
	}
	_, err = e.Campaign(ctxFor(t, 10*time.Second))
	if !errors.Is(err, election.ErrSchema) || !strings.Contains(err.Error(), "election_epoch' doesn't exist") {
		t.Fatalf("campaign with the record table only: %v", err)
	}
	assertWroteNothing(t, db, map[string]int{"election_record": 0}, "the campaign with the record table only")
	for _, stmt := range stmts {
		if strings.TrimSpace(stmt) != "" {
			if _, err := db.Exec(stmt); err != nil {
				t.Fatalf("DDL from SchemaDDL: %v", err)
			}
		}
	}
	term, err := e.Campaign(ctxFor(t, 10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	resignAll(t, term)
}

// A user that may read the tables but not update them is told which grant
// is missing, not handed the DDL of tables that exist.
func TestMissingGrantOnExistingTables(t *testing.T) {
	t.Parallel()
	db, _ := newDB(t)
	dbName := dbNameOf(t, db)
	ctx := ctxFor(t, time.Minute)
	await(t, campaign(ctx, newElector(t, election.Auto, db, "grants", "a")), 10*time.Second)
	reader := openAsUser(t, dbName, "sel_"+dbName, "GRANT SELECT ON `"+dbName+"`.* TO %s")
	_, err := newOperator(t, reader, "grants").Demote(ctx)
	msg := fmt.Sprint(err)
	denied := strings.Contains(msg, "UPDATE command denied") || strings.Contains(msg, "privilege check for 'Update' fail") // TiDB's
	if !errors.Is(err, election.ErrSchema) || !denied ||
		!strings.Contains(msg, "UPDATE on `election_record`, `election_term` and `election_lease`; readers") || strings.Contains(msg, "CREATE TABLE") ||
		!strings.Contains(msg, `set Config.TablePrefix, electctl --prefix: this one is "election"`) {
		t.Fatalf("demote by a SELECT-only user: %v", err)
	}
	if rec, err := newOperator(t, db, "grants").Leader(ctx); err != nil || rec.DemotedAgo != 0 {
		t.Fatalf("a refused demotion changed the record: %+v %v", rec, err)
	}
}

// A newcomer's wrong TablePrefix, for a user who may not create tables:
// Run returns ErrSchema naming the prefix, and logs no warning about a
// candidate row it never wrote (which read as a missing DELETE grant).
func TestWrongTablePrefixIsNamed(t *testing.T) {
	t.Parallel()
	dbName := server.NewDatabase(t)
	admin := server.Open(t, dbName)
	if err := election.CreateSchema(ctxFor(t, 10*time.Second), admin, ""); err != nil {
		t.Fatal(err)
	}
	before := contents(t, admin)
	db := openAsUser(t, dbName, "pfx_"+dbName, "GRANT SELECT, INSERT, UPDATE, DELETE ON `"+dbName+"`.* TO %s")
	var logs lockedBuffer
	cfg := fast
	cfg.TablePrefix = "elect"
	cfg.Logger = slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	e := newElectorWith(t, db, "prefix", cfg)
	err := e.Run(ctxFor(t, 10*time.Second), func(ctx context.Context, _ *election.Term) error { <-ctx.Done(); return nil })
	if !errors.Is(err, election.ErrSchema) || !strings.Contains(err.Error(), `set Config.TablePrefix, electctl --prefix: this one is "elect"`) {
		t.Fatalf("Run with a prefix that names no tables: %v", err)
	}
	assertWroteNothing(t, admin, before, "Run with a prefix that names no tables")
	if strings.Contains(logs.String(), "could not remove") {
		t.Fatalf("Run logged a cleanup failure for a row it never wrote:\n%s", logs.String())
	}
}

// lockedBuffer is a log destination safe for concurrent writers.
type lockedBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// The grants that docs/operations.md ("Set-up for DBAs") gives candidates,
// readers and operators who steer are enough for every call it lists for
// them: users are created from its block, word for word but for the
// database and user names.
func TestDocumentedGrantsAreEnough(t *testing.T) {
	t.Parallel()
	doc, err := os.ReadFile("docs/operations.md")
	if err != nil {
		t.Fatal(err)
	}
	_, setup, ok := strings.Cut(string(doc), "## Set-up for DBAs")
	if !ok {
		t.Fatal(`docs/operations.md has no section "## Set-up for DBAs"`)
	}
	_, block, _ := strings.Cut(setup, "```sql\n")
	block, _, _ = strings.Cut(block, "```")
	admin, _ := newDB(t)
	dbName := dbNameOf(t, admin)
	ctx := ctxFor(t, time.Minute)
	if err := election.CreateSchema(ctx, admin, ""); err != nil { // the app user may not CREATE
		t.Fatal(err)
	}
	createWrites(t, admin)
	grants := map[string][]string{}
	for _, line := range strings.Split(block, "\n") {
		if !strings.HasPrefix(line, "GRANT ") {
			continue
		}
		line, _, _ = strings.Cut(line, "--")
		line = strings.TrimSuffix(strings.TrimSpace(line), ";")
		_, account, _ := strings.Cut(line, " TO ")
		role := strings.Trim(strings.TrimSuffix(account, "@'%'"), "'")
		grant := strings.ReplaceAll(line, " ON app.", " ON `"+dbName+"`.")
		grants[role] = append(grants[role], strings.ReplaceAll(grant, account, "%s"))
	}
	if len(grants) != 3 {
		t.Fatalf("docs/operations.md grants to %d roles, want app, viewer and operator: %q", len(grants), grants)
	}
	as := func(role string, extra ...string) *sql.DB {
		if len(grants[role]) == 0 {
			t.Fatalf("docs/operations.md grants nothing to %q", role)
		}
		return openAsUser(t, dbName, role+"_"+dbName, append(grants[role], extra...)...)
	}
	app := as("app", "GRANT SELECT, INSERT ON `"+dbName+"`.writes TO %s")
	viewer, operator := as("viewer"), as("operator")

	// Candidates: Run with fenced writes, Campaign, TryRun, and their rows
	// removed when they stop.
	a, b := newElectorWith(t, app, "grants", fast), newElectorWith(t, app, "grants", func() election.Config { c := fast; c.Identity = "b"; return c }())
	led := make(chan uint64, 10)
	runInBackground(t, ctx, a, func(ctx context.Context, term *election.Term) error {
		if err := fencedWrite(ctx, term, "a"); err != nil {
			t.Errorf("fenced write as the documented app user: %v", err)
		}
		led <- term.Token()
		<-ctx.Done()
		return nil
	})
	first := <-led
	bWaits := campaign(ctx, b)

	// Readers.
	ops := newOperator(t, viewer, "grants")
	waitFor(t, "b to campaign", 10*time.Second, func() bool {
		cands, err := ops.Candidates(ctx)
		if err != nil {
			t.Fatalf("Candidates as the documented viewer: %v", err)
		}
		return len(cands) == 2
	})
	if rec, err := ops.Leader(ctx); err != nil || rec.Token != first {
		t.Fatalf("Leader as the documented viewer: %+v %v", rec, err)
	}
	if token, err := ops.Token(ctx); err != nil || token != first {
		t.Fatalf("Token as the documented viewer: %d %v", token, err)
	}
	if hist, err := ops.History(ctx, 0); err != nil || len(hist) == 0 {
		t.Fatalf("History as the documented viewer: %v %v", hist, err)
	}
	if recs, err := election.Elections(ctx, viewer, ""); err != nil || len(recs) != 1 {
		t.Fatalf("Elections as the documented viewer: %v %v", recs, err)
	}
	wctx, stop := context.WithCancel(ctx)
	if ev := <-ops.Watch(wctx); !ev.Leading || ev.Token != first {
		t.Fatalf("Watch as the documented viewer: %+v", ev)
	}
	stop()

	// Operators who steer: a hand-over to b, then a demotion.
	steer := newOperator(t, operator, "grants")
	if _, err := steer.Handover(ctx, "b"); err != nil {
		t.Fatalf("Handover as the documented operator: %v", err)
	}
	termB := await(t, bWaits, 10*time.Second).term
	if _, err := steer.Demote(ctx); err != nil {
		t.Fatalf("Demote as the documented operator: %v", err)
	}
	<-termB.Done()
	termB.Resign(ctx)
	if next := <-led; next <= termB.Token() {
		t.Fatalf("after the demotion, a leads with token %d, not above b's %d", next, termB.Token())
	}
	if err := b.TryRun(ctx, 0, func(context.Context, *election.Term) error { return nil }); !errors.Is(err, election.ErrHeld) {
		t.Fatalf("TryRun as the documented app user while a leads: %v, want ErrHeld", err)
	}
}

// Tables made by the first release lack the term table's server column,
// tables made before the lock-delay was carried over the record's
// delay_until, and tables made before the leader policies their value,
// priority, version, healthy and waiting_since columns: a candidate adds
// them on first use and records the server; with SkipCreateTables, or for
// a user without ALTER, the error gives the statements, and nothing is
// written.
func TestTablesOfAnEarlierVersion(t *testing.T) {
	t.Parallel()
	dbName := server.NewDatabase(t)
	admin := server.Open(t, dbName)
	ctx := ctxFor(t, time.Minute)
	policies := []string{"ALTER TABLE election_record DROP COLUMN value, DROP COLUMN value_epoch",
		"ALTER TABLE election_candidate DROP COLUMN value, DROP COLUMN priority, DROP COLUMN version, DROP COLUMN healthy, DROP COLUMN waiting_since"}
	const alterPolicies = "ALTER TABLE `election_candidate` ADD COLUMN waiting_since"
	old := func() {
		t.Helper()
		for _, stmt := range []string{"DROP TABLE IF EXISTS election_record, election_epoch, election_candidate, election_term"} {
			if _, err := admin.ExecContext(ctx, stmt); err != nil {
				t.Fatal(err)
			}
		}
		if err := election.CreateSchema(ctx, admin, ""); err != nil {
			t.Fatal(err)
		}
		for _, stmt := range append([]string{"ALTER TABLE election_term DROP COLUMN server", "ALTER TABLE election_record DROP COLUMN delay_until"}, policies...) {
			if _, err := admin.ExecContext(ctx, stmt); err != nil {
				t.Fatal(err)
			}
		}
	}
	const alter = "ALTER TABLE `election_term` ADD COLUMN server"
	const alterRecord = "ALTER TABLE `election_record` ADD COLUMN delay_until"

	old()
	before := contents(t, admin)
	skip := fast
	skip.SkipCreateTables = true
	if _, err := newElectorWith(t, admin, "old", skip).Campaign(ctx); !errors.Is(err, election.ErrSchema) || !strings.Contains(err.Error(), alter) ||
		!strings.Contains(err.Error(), alterRecord) || !strings.Contains(err.Error(), alterPolicies) {
		t.Errorf("campaign with SkipCreateTables on old tables: %v", err)
	}
	user := openAsUser(t, dbName, "old_"+dbName, "GRANT SELECT, INSERT, UPDATE, DELETE ON `"+dbName+"`.* TO %s")
	if _, err := newElectorWith(t, user, "old", fast).Campaign(ctx); !errors.Is(err, election.ErrSchema) || !strings.Contains(err.Error(), alter) ||
		!strings.Contains(err.Error(), "ALTER command denied") {
		t.Errorf("campaign by a user without ALTER on old tables: %v", err)
	}
	assertWroteNothing(t, admin, before, "the refused campaigns")

	// The ALTER does not wait (NOWAIT): a session of the refused campaigns
	// that the server has not yet ended may still hold the table, and then
	// the next campaign tries again, as Run's would.
	e := newElectorWith(t, admin, "old", fast)
	term, err := e.Campaign(ctx)
	for try := 0; err != nil && strings.Contains(err.Error(), "an open transaction holds the table") && try < 20; try++ {
		time.Sleep(100 * time.Millisecond)
		term, err = e.Campaign(ctx)
	}
	if err != nil {
		t.Fatalf("campaign on old tables by a user who may alter them: %v", err)
	}
	resignAll(t, term)
	var want string
	admin.QueryRowContext(ctx, "SELECT CONCAT(@@hostname, ':', @@port, '/', @@server_id)").Scan(&want)
	hist, err := newOperator(t, admin, "old").History(ctx, 1)
	if err != nil || len(hist) != 1 || hist[0].Server != want || want == "" {
		t.Errorf("history on upgraded tables: %+v, %v; want the server %q", hist, err, want)
	}
	for _, read := range []string{"SELECT delay_until, value, value_epoch, lease_id FROM election_record LIMIT 0", "SELECT value, priority, version, healthy, waiting_since, session, lease_aware_at, by_earlier FROM election_candidate LIMIT 0"} {
		if _, err := admin.ExecContext(ctx, read); err != nil {
			t.Errorf("the added columns after the upgrade: %v", err)
		}
	}

	// Tables of the release before this one lack the policies' columns
	// alone: the fix lists only their statements, which a DBA can paste
	// as they are. (A candidate of a new process: a pool's candidates
	// check the tables once.)
	for _, stmt := range policies {
		if _, err := admin.ExecContext(ctx, stmt); err != nil {
			t.Fatal(err)
		}
	}
	before = contents(t, admin)
	_, err = newElectorWith(t, server.Open(t, dbName), "old", skip).Campaign(ctx)
	if msg := fmt.Sprint(err); !errors.Is(err, election.ErrSchema) || !strings.Contains(msg, alterPolicies) || strings.Contains(msg, alter) ||
		strings.Contains(msg, alterRecord) || strings.Count(msg, "ALTER TABLE") != 7 {
		t.Errorf("campaign with SkipCreateTables on tables that lack the policies' columns alone: %v, want their seven ALTERs only", err)
	}
	assertWroteNothing(t, admin, before, "the refused campaign")
}

// An upgrade that meets an open transaction that read the record (an
// operator's session with autocommit off, say) does not wait for it: every
// statement on the record, the running leader's keepalives among them,
// would queue behind a waiting ALTER, and the leader, whose lease is a
// second here, would lose its term. Its error says why; once the
// transaction is over, the next campaign upgrades.
func TestUpgradeBehindATransactionDoesNotStallTheLeader(t *testing.T) {
	t.Parallel()
	dbName := server.NewDatabase(t)
	admin := server.Open(t, dbName)
	ctx := ctxFor(t, time.Minute)
	// The leader: a candidate of the earlier version, whose statements
	// never name the new column.
	leader := await(t, campaign(ctx, newElector(t, election.GetLock, admin, "queued", "leader")), 10*time.Second).term
	if _, err := admin.ExecContext(ctx, "ALTER TABLE election_record DROP COLUMN delay_until"); err != nil {
		t.Fatal(err)
	}
	tx, err := admin.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	if _, err := tx.ExecContext(ctx, "SELECT COUNT(*) FROM election_record"); err != nil {
		t.Fatal(err)
	}
	// New candidates, each of a new process (a pool of its own: a pool's
	// candidates check the tables once), try the upgrade, again and again,
	// for twice the leader's lease.
	for end := time.Now().Add(2 * fast.Lease); time.Now().Before(end); {
		_, err := newElector(t, election.GetLock, server.Open(t, dbName), "queued", "new").Campaign(ctx)
		if err == nil || !strings.Contains(err.Error(), "an open transaction holds the table") || !strings.Contains(err.Error(), "ADD COLUMN delay_until") {
			t.Fatalf("campaign whose upgrade meets an open transaction: %v, want the transaction named, with the statement", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err := leader.Err(); err != nil {
		t.Fatalf("the leader's term ended while candidates tried the upgrade: %v", err)
	}
	tx.Rollback()
	resignAll(t, leader)
	resignAll(t, await(t, campaign(ctx, newElector(t, election.GetLock, server.Open(t, dbName), "queued", "new")), 10*time.Second).term)
}

// SchemaDDL, CreateSchema and Elections refuse a prefix that is no table
// name with ErrInvalidConfig, and create nothing.
func TestBadTablePrefixRefused(t *testing.T) {
	t.Parallel()
	db, _ := newDB(t)
	ctx := ctxFor(t, time.Minute)
	const bad = "bad-prefix"
	_, ddlErr := election.SchemaDDL(bad)
	_, listErr := election.Elections(ctx, db, bad)
	for what, err := range map[string]error{
		"SchemaDDL":    ddlErr,
		"CreateSchema": election.CreateSchema(ctx, db, bad),
		"Elections":    listErr,
	} {
		if !errors.Is(err, election.ErrInvalidConfig) || !strings.Contains(err.Error(), "TablePrefix") {
			t.Errorf("%s with prefix %q: %v, want ErrInvalidConfig naming TablePrefix", what, bad, err)
		}
	}
	assertWroteNothing(t, db, nil, "CreateSchema with a bad prefix")
}

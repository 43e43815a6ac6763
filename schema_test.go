package election_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/sqlelect/election"
)

func TestMissingPrivilegeNamesTheDDL(t *testing.T) {
	t.Parallel()
	dbName := server.NewDatabase(t)
	db := openAsUser(t, dbName, "ro_"+dbName, "GRANT SELECT, INSERT, UPDATE, DELETE ON `"+dbName+"`.* TO %s")
	e := newElector(t, election.GetLock, db, "no-create", "a")
	_, err := e.Campaign(ctxFor(t, 10*time.Second))
	if !errors.Is(err, election.ErrSchema) || !strings.Contains(err.Error(), "CREATE TABLE IF NOT EXISTS `election_record`") {
		t.Fatalf("campaign without CREATE privilege: %v", err)
	}
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

func TestSkipCreateTablesReportsMissingTables(t *testing.T) {
	t.Parallel()
	db, _ := newDB(t)
	cfg := fast
	cfg.SkipCreateTables = true
	e := newElectorWith(t, db, "skip", cfg)
	_, err := e.Campaign(ctxFor(t, 10*time.Second))
	if !errors.Is(err, election.ErrSchema) || !strings.Contains(err.Error(), "doesn't exist") || !strings.Contains(err.Error(), "CREATE TABLE") {
		t.Fatalf("campaign without tables: %v", err)
	}
	ddl, err := election.SchemaDDL("")
	if err != nil {
		t.Fatal(err)
	}
	for _, stmt := range strings.Split(strings.TrimSpace(ddl), ";") {
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
	await(t, campaign(ctx, newElector(t, election.GetLock, db, "grants", "a")), 10*time.Second)
	reader := openAsUser(t, dbName, "sel_"+dbName, "GRANT SELECT ON `"+dbName+"`.* TO %s")
	_, err := newOperator(t, reader, "grants").Demote(ctx)
	msg := fmt.Sprint(err)
	if !errors.Is(err, election.ErrSchema) || !strings.Contains(msg, "UPDATE command denied") ||
		!strings.Contains(msg, "UPDATE on `election_record`") || strings.Contains(msg, "CREATE TABLE") {
		t.Fatalf("demote by a SELECT-only user: %v", err)
	}
}

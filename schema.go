package election

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/go-sql-driver/mysql"
)

// DefaultTablePrefix starts the names of the tables the package uses:
// election_record, election_epoch, election_candidate, election_term and
// election_lease.
const DefaultTablePrefix = "election"

// maxNameBytes is what the record's TEXT column holds.
const maxNameBytes = 65535

var prefixPattern = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]{0,40}$`)

// tables names the tables of one prefix.
type tables struct {
	record    string // the keepalive row: holder, renewals, state, requests
	epoch     string // the fencing row: only term starts write it
	candidate string // one heartbeat row per candidate
	term      string // the history of terms
	lease     string // one keepalive row per shared session, for all its terms
}

func tablesFor(prefix string) tables {
	return tables{record: prefix + "_record", epoch: prefix + "_epoch", candidate: prefix + "_candidate", term: prefix + "_term", lease: prefix + "_lease"}
}

func (t tables) all() []string { return []string{t.record, t.epoch, t.candidate, t.term, t.lease} }

func validatePrefix(prefix string) error {
	if !prefixPattern.MatchString(prefix) {
		return fmt.Errorf("%w: TablePrefix %q must be 1 to 41 ASCII letters, digits or underscores, not starting with a digit", ErrInvalidConfig, prefix)
	}
	return nil
}

func validateName(name string) error {
	switch {
	case name == "":
		return fmt.Errorf("%w: the election name is empty: give each election a stable name such as \"billing-cron\"", ErrInvalidConfig)
	case !utf8.ValidString(name):
		return fmt.Errorf("%w: the election name %q is not valid UTF-8", ErrInvalidConfig, name)
	case len(name) > maxNameBytes:
		return fmt.Errorf("%w: the election name is %d bytes long; the limit is %d", ErrInvalidConfig, len(name), maxNameBytes)
	case !printable(name):
		return fmt.Errorf("%w: the election name %q holds control, format or invisible characters, which would garble what operators read; use printable characters", ErrInvalidConfig, name)
	}
	return nil
}

// SchemaDDL returns the CREATE TABLE statements for the tables with the given
// prefix (empty means DefaultTablePrefix), for DBAs who create them by hand
// and run electors with Config.SkipCreateTables.
func SchemaDDL(prefix string) (string, error) {
	if prefix == "" {
		prefix = DefaultTablePrefix
	}
	if err := validatePrefix(prefix); err != nil {
		return "", err
	}
	return strings.Join(ddl(tablesFor(prefix)), ";\n\n") + ";\n", nil
}

func ddl(t tables) []string {
	// The epoch lives apart from the record: fenced transactions hold a
	// shared lock on it, which must never block the leader's keepalives.
	return []string{
		"CREATE TABLE IF NOT EXISTS `" + t.record + "` (\n" +
			"  lock_name      VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,\n" +
			"  name           TEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,\n" +
			"  strategy       VARCHAR(16) CHARACTER SET ascii NOT NULL,\n" +
			"  state          VARCHAR(16) CHARACTER SET ascii NOT NULL,\n" +
			"  epoch          BIGINT UNSIGNED NOT NULL,\n" +
			"  holder         VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,\n" +
			"  host           VARCHAR(255) CHARACTER SET utf8mb4 NOT NULL,\n" +
			"  pid            INT NOT NULL,\n" +
			"  conn_id        BIGINT UNSIGNED NOT NULL,\n" +
			"  lease_us       BIGINT NOT NULL,\n" +
			"  since          DATETIME(6) NOT NULL,\n" +
			"  renewed_at     DATETIME(6) NOT NULL,\n" +
			"  ended_at       DATETIME(6) NULL,\n" +
			"  demote_epoch   BIGINT UNSIGNED NULL,\n" +
			"  demote_at      DATETIME(6) NULL,\n" +
			"  handover_to    VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NULL,\n" +
			"  handover_until DATETIME(6) NULL,\n" +
			"  " + delayColumn + ",\n" +
			"  " + valueColumn + ",\n" +
			"  " + valueEpochColumn + ",\n" +
			"  " + leaseColumn + ",\n" +
			"  " + topColumn + ",\n" +
			"  PRIMARY KEY (lock_name)\n" +
			") ENGINE=InnoDB",
		"CREATE TABLE IF NOT EXISTS `" + t.epoch + "` (\n" +
			"  lock_name      VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,\n" +
			"  epoch          BIGINT UNSIGNED NOT NULL,\n" +
			"  PRIMARY KEY (lock_name)\n" +
			") ENGINE=InnoDB",
		"CREATE TABLE IF NOT EXISTS `" + t.candidate + "` (\n" +
			"  lock_name      VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,\n" +
			"  identity       VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,\n" +
			"  strategy       VARCHAR(16) CHARACTER SET ascii NOT NULL,\n" +
			"  host           VARCHAR(255) CHARACTER SET utf8mb4 NOT NULL,\n" +
			"  pid            INT NOT NULL,\n" +
			"  since          DATETIME(6) NOT NULL,\n" +
			"  seen_at        DATETIME(6) NOT NULL,\n" +
			"  expiry_us      BIGINT NOT NULL,\n" +
			"  " + valueColumn + ",\n" +
			"  " + priorityColumn + ",\n" +
			"  " + versionColumn + ",\n" +
			"  " + healthyColumn + ",\n" +
			"  " + waitingColumn + ",\n" +
			"  " + sessionColumn + ",\n" +
			"  " + leaseAwareColumn + ",\n" +
			"  " + earlierColumn + ",\n" +
			"  PRIMARY KEY (lock_name, identity),\n" +
			"  " + earlierIndex + "\n" +
			") ENGINE=InnoDB",
		"CREATE TABLE IF NOT EXISTS `" + t.term + "` (\n" +
			"  lock_name      VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,\n" +
			"  epoch          BIGINT UNSIGNED NOT NULL,\n" +
			"  holder         VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,\n" +
			"  host           VARCHAR(255) CHARACTER SET utf8mb4 NOT NULL,\n" +
			"  pid            INT NOT NULL,\n" +
			"  " + serverColumn + ",\n" +
			"  started_at     DATETIME(6) NOT NULL,\n" +
			"  ended_at       DATETIME(6) NULL,\n" +
			"  reason         VARCHAR(32) CHARACTER SET ascii NULL,\n" +
			"  " + lastedColumn + ",\n" +
			"  PRIMARY KEY (lock_name, epoch)\n" +
			") ENGINE=InnoDB",
		// A shared session's terms are renewed through this row, in one
		// statement whatever their number; a demotion or an end of any of
		// them counts here too, so that neither the keepalive nor the
		// waiters need read their records to find it (docs/protocol.md,
		// "Shared sessions").
		"CREATE TABLE IF NOT EXISTS `" + t.lease + "` (\n" +
			"  lease_id       BIGINT UNSIGNED NOT NULL,\n" +
			"  renewed_at     DATETIME(6) NOT NULL,\n" +
			"  changes        BIGINT UNSIGNED NOT NULL DEFAULT 0,\n" +
			"  PRIMARY KEY (lease_id)\n" +
			") ENGINE=InnoDB",
	}
}

// CreateSchema creates the tables with the given prefix (empty means
// DefaultTablePrefix) if they do not exist. Electors call it on first use
// unless Config.SkipCreateTables is set.
func CreateSchema(ctx context.Context, db *sql.DB, prefix string) error {
	if prefix == "" {
		prefix = DefaultTablePrefix
	}
	if err := validatePrefix(prefix); err != nil {
		return err
	}
	return createSchema(ctx, db, tablesFor(prefix))
}

// The columns added after the first release; a candidate adds them to
// tables made before them (upgrade):
//   - serverColumn, the term table's: the database server that granted the
//     term (see TermRecord.Server);
//   - delayColumn, the record's: when the lock-delay owed after a forced end
//     is over, on the database clock; every term until then owes it too
//     (docs/protocol.md, "Campaign");
//   - valueColumn, the record's and the candidate's: the value the leader
//     proclaims (Config.Value), and valueEpochColumn, the record's: the
//     term that wrote it;
//   - priorityColumn, versionColumn, healthyColumn and waitingColumn, the
//     candidate's: its Priority and Version, its health (NULL when it runs
//     no check) and when its campaign began (Config.PreferAfter);
//   - lastedColumn, the term table's: how long the term lasted by its
//     leader's own clock (TermRecord.Lasted);
//   - sessionColumn, the candidate's: how it reaches the server
//     (Candidate.Session);
//   - leaseColumn, the record's: the lease row of the shared session that
//     holds the term, which renews it (NULL for a session of its own and
//     for LeaseRow);
//   - leaseAwareColumn, the candidate's: seen_at again, written beside it
//     by every statement of a version that judges a term by its lease
//     (seenNow), so that a row an earlier version wrote last, whose
//     candidate reads only the record's own renewal, shows: earlierColumn,
//     computed by the server, and indexed, so that finding those rows
//     (earlierReaders) reads them alone, whatever the number of the others.
const (
	serverColumn     = "server         VARCHAR(255) CHARACTER SET utf8mb4 NULL"
	delayColumn      = "delay_until    DATETIME(6) NULL"
	valueColumn      = "value          VARCHAR(1024) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NULL"
	priorityColumn   = "priority       INT NOT NULL DEFAULT 0"
	versionColumn    = "version        VARCHAR(64) CHARACTER SET utf8mb4 NULL"
	healthyColumn    = "healthy        BOOLEAN NULL"
	waitingColumn    = "waiting_since  DATETIME(6) NULL"
	valueEpochColumn = "value_epoch    BIGINT UNSIGNED NULL"
	lastedColumn     = "lasted_us      BIGINT NULL"
	// SESSION is a keyword but not reserved, so the name needs no quotes:
	// MySQL 8.4 (sql/sql_yacc.yy: ident_keywords_ambiguous_4_system_variables,
	// barred only as a SET target), MariaDB's reserved-words list, TiDB's
	// keywords.md; tested on MariaDB, Galera and TiDB (docs/mysql-8.4.md).
	sessionColumn    = "session        VARCHAR(16) CHARACTER SET ascii NULL"
	leaseColumn      = "lease_id       BIGINT UNSIGNED NULL"
	leaseAwareColumn = "lease_aware_at DATETIME(6) NULL"
	topColumn        = "top_priority   INT NULL"
	// A virtual column and an index on it: MySQL 8.4 "Secondary Indexes and
	// Generated Columns" ("InnoDB supports secondary indexes on virtual
	// generated columns"), "ALTER TABLE and Generated Columns"; tested on
	// MariaDB, Galera and TiDB (docs/mysql-8.4.md).
	earlierColumn = "by_earlier     BOOLEAN AS (NOT (lease_aware_at <=> seen_at)) VIRTUAL"
	earlierIndex  = "INDEX by_earlier (by_earlier)"
)

// column is one added column: its table, its name, and the statement that
// adds it.
type column struct{ table, name, alter string }

// added lists the added columns in the order they were added.
func (t tables) added() []column {
	return []column{
		{t.term, "server", "ALTER TABLE `" + t.term + "` ADD COLUMN " + serverColumn + " AFTER pid"},
		{t.record, "delay_until", "ALTER TABLE `" + t.record + "` ADD COLUMN " + delayColumn + " AFTER handover_until"},
		{t.record, "value", "ALTER TABLE `" + t.record + "` ADD COLUMN " + valueColumn + " AFTER delay_until"},
		{t.record, "value_epoch", "ALTER TABLE `" + t.record + "` ADD COLUMN " + valueEpochColumn + " AFTER value"},
		{t.candidate, "value", "ALTER TABLE `" + t.candidate + "` ADD COLUMN " + valueColumn + " AFTER expiry_us"},
		{t.candidate, "priority", "ALTER TABLE `" + t.candidate + "` ADD COLUMN " + priorityColumn + " AFTER value"},
		{t.candidate, "version", "ALTER TABLE `" + t.candidate + "` ADD COLUMN " + versionColumn + " AFTER priority"},
		{t.candidate, "healthy", "ALTER TABLE `" + t.candidate + "` ADD COLUMN " + healthyColumn + " AFTER version"},
		{t.candidate, "waiting_since", "ALTER TABLE `" + t.candidate + "` ADD COLUMN " + waitingColumn + " AFTER healthy"},
		{t.term, "lasted_us", "ALTER TABLE `" + t.term + "` ADD COLUMN " + lastedColumn + " AFTER reason"},
		{t.candidate, "session", "ALTER TABLE `" + t.candidate + "` ADD COLUMN " + sessionColumn + " AFTER waiting_since"},
		{t.record, "lease_id", "ALTER TABLE `" + t.record + "` ADD COLUMN " + leaseColumn + " AFTER value_epoch"},
		{t.candidate, "lease_aware_at", "ALTER TABLE `" + t.candidate + "` ADD COLUMN " + leaseAwareColumn + " AFTER session, ADD COLUMN " + earlierColumn +
			" AFTER lease_aware_at, ADD " + earlierIndex},
		{t.record, "top_priority", "ALTER TABLE `" + t.record + "` ADD COLUMN " + topColumn + " AFTER lease_id"},
	}
}

// alters is the statements that add cols, for an error's fix.
func alters(cols []column) string {
	var stmts []string
	for _, c := range cols {
		stmts = append(stmts, c.alter)
	}
	return strings.Join(stmts, ";\n") + ";"
}

func createSchema(ctx context.Context, db *sql.DB, t tables) error {
	for _, stmt := range ddl(t) {
		if _, err := write(ctx, db, stmt); err != nil {
			// CREATE ... IF NOT EXISTS needs the CREATE privilege even when
			// the table exists: tables a DBA made are fine without it.
			if _, check := missingColumns(ctx, db, t); !denied(err) || check != nil {
				return during("creating the tables", schemaError(t, err))
			}
			break
		}
	}
	missing, err := missingColumns(ctx, db, t)
	if err != nil {
		return err
	}
	return addColumns(ctx, db, t, missing)
}

// addColumns adds the columns that tables of an earlier version lack. An
// ALTER waits for its table's metadata lock behind any open transaction
// that read the table, and every later statement on the table queues behind
// the ALTER, a leader's keepalives among them. So it does not wait:
// lock_wait_timeout = 0 is NOWAIT on MariaDB; MySQL raises it to its least,
// a second. Given up, the next campaign tries again.
func addColumns(ctx context.Context, db *sql.DB, t tables, missing []column) error {
	if len(missing) == 0 {
		return nil
	}
	conn, err := db.Conn(ctx)
	if err != nil {
		return during("adding the columns of this version", refusal(err))
	}
	defer drop(conn) // not back to the pool with that lock_wait_timeout
	if _, err := conn.ExecContext(ctx, "SET SESSION lock_wait_timeout = 0"); err != nil {
		return during("adding the columns of this version", refusal(err))
	}
	for i, c := range missing {
		_, err := conn.ExecContext(ctx, c.alter)
		var me *mysql.MySQLError
		switch {
		case err == nil, isDuplicateColumn(err): // another candidate added it meanwhile
			continue
		case denied(err):
			err = fmt.Errorf("%w: %w; the tables were made by an earlier version of this library and the elector's user may not add the columns this one needs: run this as a user with ALTER privilege:\n%s", ErrSchema, err, alters(missing[i:]))
		case errors.As(err, &me) && me.Number == 1205:
			// Not ErrSchema, which Run does not retry: the transaction
			// will end.
			err = fmt.Errorf("%w; an open transaction holds the table: the next campaign tries again; or run this as a user with ALTER privilege once it has ended:\n%s", err, alters(missing[i:]))
		default:
			err = schemaError(t, err)
		}
		return during("adding the column "+c.name+" to `"+c.table+"`", err)
	}
	return nil
}

// checkSchema verifies that the tables exist, with every column, and can
// be read.
func checkSchema(ctx context.Context, db *sql.DB, t tables) error {
	missing, err := missingColumns(ctx, db, t)
	if err == nil && len(missing) > 0 {
		err = fmt.Errorf("%w: the tables were made by an earlier version of this library and lack its columns; a candidate adds them on first use, unless Config.SkipCreateTables is set; or run this as a user with ALTER privilege:\n%s", ErrSchema, alters(missing))
	}
	return err
}

// missingColumns returns the added columns that the tables lack; an error
// if a table is missing or cannot be read.
func missingColumns(ctx context.Context, db *sql.DB, t tables) ([]column, error) {
	for _, name := range t.all() {
		if _, err := db.ExecContext(ctx, "SELECT 1 FROM `"+name+"` LIMIT 0"); err != nil {
			return nil, during("checking the tables", schemaError(t, err))
		}
	}
	// A table's added columns in one read; one by one only if it lacks any.
	var missing []column
	for _, name := range t.all() {
		var cols []column
		var names []string
		for _, c := range t.added() {
			if c.table == name {
				cols, names = append(cols, c), append(names, c.name)
			}
		}
		if len(cols) == 0 {
			continue
		}
		_, err := db.ExecContext(ctx, "SELECT "+strings.Join(names, ", ")+" FROM `"+name+"` LIMIT 0")
		if !isOld(err) {
			if err != nil {
				return nil, during("checking the tables", schemaError(t, err))
			}
			continue
		}
		for _, c := range cols {
			_, err := db.ExecContext(ctx, "SELECT "+c.name+" FROM `"+c.table+"` LIMIT 0")
			switch {
			case isOld(err):
				missing = append(missing, c)
			case err != nil:
				return nil, during("checking the tables", schemaError(t, err))
			}
		}
	}
	return missing, nil
}

// isOld: tables made before one of the added columns was.
func isOld(err error) bool {
	var me *mysql.MySQLError
	return errors.As(err, &me) && me.Number == 1054 // unknown column
}

// isDuplicateColumn: another candidate has upgraded the tables meanwhile.
func isDuplicateColumn(err error) bool {
	var me *mysql.MySQLError
	return errors.As(err, &me) && me.Number == 1060
}

func schemaError(t tables, err error) error {
	var me *mysql.MySQLError
	if err = refusal(err); errors.Is(err, ErrAccessDenied) || !errors.As(err, &me) {
		return err // a refused login says nothing of the tables
	}
	// A prefix that names no tables looks the same as tables not created
	// yet, or not granted.
	prefix := fmt.Sprintf(" (if the tables have another prefix, set Config.TablePrefix, electctl --prefix: this one is %q)", strings.TrimSuffix(t.record, "_record"))
	fix := "\nrun this as a user with CREATE privilege:\n" + strings.Join(ddl(t), ";\n") + ";"
	switch {
	case strings.Contains(me.Message, "allowed only with dual"):
		// vtgate's refusal of a locking function beside a table (Vitess's
		// go/vt/vtgate/semantics/errors.go, LockOnlyWithDualError; not
		// tested here), when its advertised version does not say Vitess
		// (vtgate's --mysql_server_version), so that detection missed it.
		return fmt.Errorf("%w: %w; the server is Vitess's vtgate, which allows locking functions only in a SELECT without tables, "+
			"and both strategies read IS_USED_LOCK beside their tables: connect the candidates to the keyspace's primary MySQL directly", ErrUnsupported, err)
	case denied(err):
		if !strings.HasPrefix(me.Message, "CREATE") && !strings.Contains(me.Message, "'Create'") {
			// The tables exist; a grant on them is missing.
			// The server says "denied", not "doesn't exist", to a user
			// with no grant on a table, so the prefix may be wrong too.
			return fmt.Errorf("%w: %w; grant the user what the message names%s: %s", ErrSchema, err, prefix, grants(t))
		}
		return fmt.Errorf("%w: %w; the elector's user may not create the tables: create them first%s%s", ErrSchema, err, prefix, fix)
	case me.Number == 1054: // no such column: tables made by an earlier version
		return fmt.Errorf("%w: %w; the tables were made by an earlier version of this library: a candidate adds the columns on first use, unless Config.SkipCreateTables is set; or run these as a user with ALTER privilege (one that fails with error 1060, duplicate column, is done already):\n%s", ErrSchema, err, alters(t.added()))
	case me.Number == 1146: // no such table
		return fmt.Errorf("%w: %w; create the tables (or leave Config.SkipCreateTables unset)%s%s", ErrSchema, err, prefix, fix)
	case me.Number == 1046: // no database selected
		return fmt.Errorf("%w: %w; the DSN must name a database, as in user:pass@tcp(host:3306)/dbname", ErrInvalidConfig, err)
	}
	return err
}

// grants lists the privileges each role needs on the tables t.
func grants(t tables) string {
	return "candidates need SELECT, INSERT, UPDATE on `" + t.record + "` and `" + t.epoch + "` and SELECT, INSERT, UPDATE, DELETE on `" +
		t.candidate + "`, `" + t.term + "` and `" + t.lease + "`; operators that demote or hand over need SELECT on all five and UPDATE on `" + t.record +
		"`, `" + t.term + "` and `" + t.lease + "`; readers need SELECT (docs/operations.md, \"Set-up for DBAs\")"
}

// lockName derives the server-wide GET_LOCK name of an election. Lock names
// share one namespace per server and MySQL 5.7+ limits them to 64
// characters, so the name carries a hash of database, prefix and election
// name (which keeps apart elections that differ only in case or length) and
// a readable ASCII head for operators. The record keeps the real name.
func lockName(database, prefix, name string) string {
	sum := sha256.Sum256([]byte(database + "\x00" + prefix + "\x00" + name))
	var head strings.Builder
	for _, r := range name {
		if head.Len() == 40 {
			break
		}
		if r < 0x80 && (r == '-' || r == '_' || r == '.' || r == ':' || r >= '0' && r <= '9' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z') {
			head.WriteRune(r)
		} else {
			head.WriteByte('_')
		}
	}
	return head.String() + "/" + hex.EncodeToString(sum[:8])
}

// printable reports whether every rune of s is a visible letter, mark,
// number, punctuation, symbol or space: no control, format or private-use
// character (an ESC sequence, a bidi override) that could spoof a
// terminal, and none of the graphic characters that show nothing (Hangul
// fillers, variation selectors, the blank braille pattern), which would
// make "a\u3164" look like "a".
func printable(s string) bool {
	for _, r := range s {
		if !unicode.IsGraphic(r) || r == '\u2800' ||
			unicode.In(r, unicode.Other_Default_Ignorable_Code_Point, unicode.Variation_Selector) {
			return false
		}
	}
	return true
}

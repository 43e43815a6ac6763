package election

// The statements that serve many elections at once: those of a shared
// GetLock session (shared.go), which tries the locks of all its waiting
// candidates and renews all its terms; those of a process's LeaseRow
// candidates (leaseshare.go), which renew all their leases and read all
// the records they wait for; and a batch of term starts (starter), which
// read, claim and check many records in a statement each. shared.go,
// leaseshare.go and start.go decide what to send; see docs/protocol.md,
// "Shared sessions".

import (
	"context"
	"database/sql"
	"strings"
	"time"
)

// batchRead is a predecessor read in a batch (readPredecessors): of the
// election of lock, which has an epoch row if epochExists.
type batchRead struct {
	p           predecessor
	lock        string
	epochExists bool
}

// readPredecessors reads on conn, in one statement, the last terms of the
// elections of starts (distinct ones that share the tables), as read does
// each, and vouches for each read; an election without a record has no
// row. The starts' identities decide whether a hand-over is pending to
// another candidate.
func readPredecessors(ctx context.Context, conn *sql.Conn, starts []termStart) ([]batchRead, error) {
	tbl := starts[0].st.tbl
	byLock := make(map[string]termStart, len(starts))
	names := make([][]string, len(starts))
	for i, s := range starts {
		byLock[s.lock] = s
		names[i] = []string{lockLiteral(s.lock), binLiteral(s.st.cfg.Identity)}
	}
	sent := time.Now()
	reads, err := collect(ctx, conn, tbl, "record", "SELECT "+predecessorColumns(tbl, "r.lock_name", "x.identity")+", x.lock_name, e.lock_name IS NOT NULL "+
		"FROM "+derived([]string{"lock_name", "identity"}, names)+" x JOIN `"+tbl.record+"` r ON r.lock_name = x.lock_name "+
		"LEFT JOIN `"+tbl.epoch+"` e ON e.lock_name = r.lock_name", func(rows *sql.Rows) (r batchRead, err error) {
		r.p.exists = true
		return r, rows.Scan(append(r.p.fields(), &r.lock, &r.epochExists)...)
	})
	if err != nil {
		return nil, err
	}
	recv := time.Now()
	for i := range reads {
		r := &reads[i]
		byLock[r.lock].st.vouch(&r.p.rec, reading{r.p.rec.nowUS, sent, recv})
	}
	return reads, nil
}

// batchClaim is a claim in a batch (claimBatched): the start s's, after p
// at claimed, with the lock-delay delay.
type batchClaim struct {
	s       termStart
	p       predecessor
	claimed uint64
	delay   time.Duration
}

// claimBatched makes claims on conn, of distinct elections that share the
// tables, each a compare-and-set on its read that bumps its epoch row, as
// claim's are, in one multi-table UPDATE joined to the claims. It returns
// the server's error as it is, for the caller to tell a lost race from a
// failure.
func claimBatched(ctx context.Context, conn *sql.Conn, claims []batchClaim) error {
	rows := make([][]string, len(claims))
	for i, c := range claims {
		v := c.s.values(c.p, c.claimed, c.delay)
		for _, col := range v.columns() {
			rows[i] = append(rows[i], *col.value)
		}
	}
	var (
		x    claimValues
		cols []string
	)
	for _, c := range x.columns() {
		*c.value, cols = "x."+c.name, append(cols, c.name)
	}
	s := claims[0].s
	tbl := s.st.tbl
	_, err := conn.ExecContext(ctx, s.set(x, "JOIN `"+tbl.epoch+"` e ON e.lock_name = r.lock_name JOIN "+derived(cols, rows)+" x ON x.lock_name = r.lock_name")+
		", e.epoch = "+bumped("e.epoch", x.epoch)+s.unchanged(x))
	return err
}

// landing is a record as a batch's claims left it (readLandings): the
// election of lock, its record naming session at epoch claimed, and its
// epoch row at token.
type landing struct {
	lock                    string
	session, claimed, token uint64
}

// readLandings reads on conn, in one statement, the records of the
// elections of locks and their epoch rows, which tell whose claim landed
// and its token.
func readLandings(ctx context.Context, conn *sql.Conn, tbl tables, locks []string) ([]landing, error) {
	return collect(ctx, conn, tbl, "record", "SELECT r.lock_name, r.conn_id, r.epoch, e.epoch FROM `"+tbl.record+"` r "+
		"JOIN `"+tbl.epoch+"` e ON e.lock_name = r.lock_name WHERE r.lock_name IN ("+literals(locks)+")", func(rows *sql.Rows) (l landing, err error) {
		return l, rows.Scan(&l.lock, &l.session, &l.claimed, &l.token)
	})
}

// derived is a derived table of rows (SQL values) with columns cols, in
// a syntax every server reads (a table value constructor's differs between
// MariaDB and MySQL). Joined to a multi-table UPDATE as claimBatched does, it
// runs on MariaDB, Galera and TiDB here; MySQL 8 allows it by its manual
// ("UPDATE Statement": a multiple-table UPDATE may read a derived table
// that does not read the updated tables; not tested here).
func derived(cols []string, rows [][]string) string {
	var b strings.Builder
	b.WriteString("(")
	for i, row := range rows {
		if i > 0 {
			b.WriteString(" UNION ALL ")
		}
		b.WriteString("SELECT ")
		for j, v := range row {
			if j > 0 {
				b.WriteString(", ")
			}
			b.WriteString(v)
			if i == 0 {
				b.WriteString(" AS " + cols[j])
			}
		}
	}
	b.WriteString(")")
	return b.String()
}

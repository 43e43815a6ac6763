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
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// sessionID reads the id of session q, by which IS_USED_LOCK names the
// holder of a lock.
func sessionID(ctx context.Context, q querier) (id uint64, err error) {
	err = q.QueryRowContext(ctx, "SELECT CONNECTION_ID()").Scan(&id)
	return id, err
}

// tryLock tries the lock named by the SQL expression name, unless a
// session holds it: MariaDB's GET_LOCK searches the user locks the calling
// session holds, one by one, so a session that holds 10,000 locks spent
// 50-150 µs on each try of a lock held elsewhere, against 8 µs for one
// that holds none, and 4 µs on IS_USED_LOCK, a lookup by name (MariaDB
// 10.11, measured here; docs/benchmarks.md, "3 processes × 10,000
// elections": the idle server's CPU fell from 185% to 49% of a core). A
// lock this session holds already is not taken again: a shared session
// never relies on GET_LOCK being re-entrant.
func tryLock(name string) string {
	return "IF(IS_USED_LOCK(" + name + ") IS NULL, GET_LOCK(" + name + ", 0), 0)"
}

// tryLocks tries each of locks on conn, in one statement, and returns
// whether each was taken. One session holds many user locks on MariaDB
// 10.0.2+ (tested here) and MySQL 5.7.5+ (MySQL manual, "Locking
// Functions"; not tested here); a wait of 0 never meets MySQL's user-lock
// deadlock error (3058), which only a waiting GET_LOCK can raise. A
// failure leaves the session in doubt, for its caller to end: the server
// may have taken some of the locks, which no one would free (GET_LOCK
// counts a session's takes of a lock, one release undoes one).
func tryLocks(ctx context.Context, conn *sql.Conn, locks []string) ([]bool, error) {
	if len(locks) == 0 {
		return nil, nil
	}
	tries := make([]string, len(locks))
	for i, l := range locks {
		tries[i] = text(tryLock("?"), l, l)
	}
	vals := make([]sql.NullInt64, len(locks))
	dst := make([]any, len(locks))
	for i := range vals {
		dst[i] = &vals[i]
	}
	if err := conn.QueryRowContext(ctx, "SELECT "+strings.Join(tries, ", ")).Scan(dst...); err != nil {
		return nil, err
	}
	got := make([]bool, len(locks))
	for i, v := range vals {
		got[i] = v.Int64 == 1
	}
	return got, nil
}

// tryRead tries the locks of the elections of locks on conn, as tryLocks
// does, and reads their records in t, with the lease row of each term a
// shared session holds, in one statement, and calls each with every row.
// A failure leaves the session in doubt, as one of tryLocks does.
func tryRead(ctx context.Context, conn *sql.Conn, t tables, locks []string, each func(lock string, got bool, rec Record, r reading, l leaseState)) error {
	names := literals(locks)
	sent := time.Now()
	rows, err := conn.QueryContext(ctx, "SELECT r.lock_name, "+tryLock("r.lock_name")+", "+recordColumns("r.lock_name")+
		", l.lease_id, "+utcMicros("l.renewed_at")+", l.changes FROM "+t.recordWithLease()+" WHERE r.lock_name IN ("+names+")")
	if err != nil {
		return err
	}
	defer rows.Close()
	recv := time.Now()
	for rows.Next() {
		var (
			lock    string
			got     sql.NullInt64
			rec     Record
			id      sql.NullInt64
			renewed sql.NullInt64
			changes sql.NullInt64
		)
		if err := rows.Scan(append(append([]any{&lock, &got}, rec.fields()...), &id, &renewed, &changes)...); err != nil {
			return err
		}
		l := leaseState{id: uint64(id.Int64), renewedUS: renewed.Int64, changes: uint64(changes.Int64)}
		each(lock, got.Int64 == 1, rec, reading{rec.nowUS, sent, recv}, l)
	}
	return rows.Err()
}

// heldTerm is a term a batched renewal renews: its election's lock, its
// token, and the session (GetLock) or lease id (LeaseRow) its record
// names.
type heldTerm struct {
	lock          string
	token, holder uint64
}

// renewShared renews the terms held, on shared session conn (whose id is
// session, the holder of each), and returns each one's outcome, in their
// order.
func renewShared(ctx context.Context, conn *sql.Conn, tbl tables, session uint64, held []heldTerm) ([]error, error) {
	locks := make([]string, len(held))
	epochs := make([]string, len(held))
	byLock := make(map[string]int, len(held))
	for i, h := range held {
		locks[i], epochs[i], byLock[h.lock] = literal(h.lock), literal(h.token), i
	}
	results := make([]error, len(held))
	// The pairs need not be matched: a record that names this session,
	// whose lock this session holds, names the term its candidate started
	// last on it, which is the one it holds (one candidate per election on
	// a session); the epochs only narrow the match further.
	res, err := conn.ExecContext(ctx, text("UPDATE `"+tbl.record+"` r LEFT JOIN `"+tbl.candidate+"` c ON c.lock_name = r.lock_name AND c.identity = r.holder "+
		"SET r.renewed_at = UTC_TIMESTAMP(6), "+seenNow("c.")+" "+
		"WHERE r.conn_id = ? AND NOT (r.demote_epoch <=> r.epoch) AND IS_USED_LOCK(r.lock_name) = CONNECTION_ID() AND ", session)+
		"r.lock_name IN ("+strings.Join(locks, ", ")+") AND r.epoch IN ("+strings.Join(epochs, ", ")+")")
	if err != nil {
		return nil, err
	}
	if n, err := res.RowsAffected(); err == nil && n == int64(2*len(held)) {
		return results, nil // every record, and each one's candidate row, matched
	}
	for i := range held {
		results[i] = fmt.Errorf("%w: the keepalive matched no record", ErrLockLost)
	}
	rows, err := conn.QueryContext(ctx, text("SELECT r.lock_name, IS_USED_LOCK(r.lock_name), r.epoch, r.conn_id = ?, r.demote_epoch <=> r.epoch, r.handover_to "+
		"FROM `"+tbl.record+"` r WHERE r.lock_name IN ("+strings.Join(locks, ", ")+")", session))
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	for rows.Next() {
		var (
			lock          string
			owner         sql.NullInt64
			epoch         uint64
			ours, demoted bool
			handTo        sql.NullString
		)
		if err := rows.Scan(&lock, &owner, &epoch, &ours, &demoted, &handTo); err != nil {
			return nil, err
		}
		switch i := byLock[lock]; {
		case !owner.Valid || uint64(owner.Int64) != session:
			results[i] = fmt.Errorf("%w: IS_USED_LOCK is %v, this session is %d", ErrLockLost, owner.Int64, session)
		case !ours || epoch != held[i].token:
			results[i] = fmt.Errorf("%w: the record names another term", ErrLockLost)
		case demoted:
			results[i] = demotion(handTo)
		default:
			// Renewed: what made the record match cannot have come back
			// between the two statements.
			results[i] = nil
		}
	}
	return results, rows.Err()
}

// The lease row of a shared session: its terms' records name it
// (lease_id), and the record's reads take the renewal from it while it is
// later than the record's own (recordWithLease). The session renews it
// with one statement whatever the number of its terms. Every change of a
// term on it counts in it (changes): a demotion (store.request) and the
// release of a term's lock (countChange), so that the renewal reads the
// terms' records, and the waiters of those elections read them (poll),
// only when that count has moved. Only the session itself renews it, and
// it holds the lease's lock (leaseLock) for as long as it lives: a fresh
// lease says the session ran a statement, so it was alive, not blocked,
// and held every lock it had taken; a free lease lock says it is gone.

// leaseLock is the named lock the session of lease id holds: lease ids
// are random, so it names one session whatever the tables' prefix.
func leaseLock(id uint64) string { return leaseLockHead + strconv.FormatUint(id, 10) }

const leaseLockHead = "election-lease/"

// openLease writes a new lease row on the session conn, takes its lock,
// and returns its id. Rows older than a day, left by sessions that ended
// without deleting theirs, go first: a live one is renewed every Interval,
// and one deleted all the same is written again by its next renewal
// (leaseChanges).
func openLease(ctx context.Context, conn *sql.Conn, tbl tables) (uint64, error) {
	if _, err := conn.ExecContext(ctx, "DELETE FROM `"+tbl.lease+"` WHERE renewed_at < UTC_TIMESTAMP(6) - INTERVAL 1 DAY"); err != nil {
		return 0, err
	}
	id := randomID()
	var got sql.NullInt64
	if err := conn.QueryRowContext(ctx, text("SELECT GET_LOCK(?, 0)", leaseLock(id))).Scan(&got); err != nil {
		return 0, err
	}
	if got.Int64 != 1 {
		return 0, fmt.Errorf("the lease lock %s is taken", leaseLock(id))
	}
	_, err := conn.ExecContext(ctx, text("INSERT INTO `"+tbl.lease+"` (lease_id, renewed_at, changes) VALUES (?, UTC_TIMESTAMP(6), 0)", id))
	return id, err
}

// renewLease renews lease id on its session conn if no change has counted
// in it since the count was changes, and reports whether it did.
func renewLease(ctx context.Context, conn *sql.Conn, tbl tables, id, changes uint64) (bool, error) {
	res, err := conn.ExecContext(ctx, text("UPDATE `"+tbl.lease+"` SET renewed_at = UTC_TIMESTAMP(6) WHERE lease_id = ? AND changes = ?", id, changes))
	if err != nil {
		return false, err
	}
	n, err := res.RowsAffected()
	return n == 1, err
}

// leaseChanges reads the changes counted in lease id, on its session conn,
// writing the row again if it is gone.
func leaseChanges(ctx context.Context, conn *sql.Conn, tbl tables, id uint64) (uint64, error) {
	var n uint64
	err := conn.QueryRowContext(ctx, text("SELECT changes FROM `"+tbl.lease+"` WHERE lease_id = ?", id)).Scan(&n)
	if errors.Is(err, sql.ErrNoRows) {
		_, err = conn.ExecContext(ctx, text("INSERT INTO `"+tbl.lease+"` (lease_id, renewed_at, changes) VALUES (?, UTC_TIMESTAMP(6), 0)", id))
	}
	return n, err
}

// countChange counts, in lease id, on its session conn, that a lock of a
// term on it was freed, and reports whether the row was there to count it.
func countChange(ctx context.Context, conn *sql.Conn, tbl tables, id uint64) (bool, error) {
	res, err := conn.ExecContext(ctx, text("UPDATE `"+tbl.lease+"` SET changes = changes + 1 WHERE lease_id = ?", id))
	if err != nil {
		return false, err
	}
	n, err := res.RowsAffected()
	return n == 1, err
}

// leaseState is a lease row as a waiter reads it: its id (0 for none),
// its own renewal (µs on the database clock), the changes counted in it,
// and, from readLeases, whether its session still holds its lock.
type leaseState struct {
	id        uint64
	renewedUS int64
	changes   uint64
	held      bool
}

// readLeases reads the leases ids, on conn; a lease that is gone is not in
// the map.
func readLeases(ctx context.Context, conn *sql.Conn, tbl tables, ids []uint64) (map[uint64]leaseState, error) {
	list := make([]string, len(ids))
	for i, id := range ids {
		list[i] = literal(id)
	}
	rows, err := conn.QueryContext(ctx, "SELECT lease_id, "+utcMicros("renewed_at")+", changes, IS_USED_LOCK(CONCAT("+literal(leaseLockHead)+", lease_id)) IS NOT NULL FROM `"+tbl.lease+"` WHERE lease_id IN ("+strings.Join(list, ", ")+")")
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	leases := make(map[uint64]leaseState, len(ids))
	for rows.Next() {
		var l leaseState
		if err := rows.Scan(&l.id, &l.renewedUS, &l.changes, &l.held); err != nil {
			return nil, err
		}
		leases[l.id] = l
	}
	return leases, rows.Err()
}

// closeLease deletes lease id, once its session holds no term; the
// session is dropped next, which frees the lease's lock.
func closeLease(ctx context.Context, conn *sql.Conn, tbl tables, id uint64) error {
	_, err := conn.ExecContext(ctx, text("DELETE FROM `"+tbl.lease+"` WHERE lease_id = ?", id))
	return err
}

// releaseHeld frees lock, held by session q, and fails if q did not hold
// it.
func releaseHeld(ctx context.Context, q querier, lock string) error {
	var released sql.NullInt64
	if err := q.QueryRowContext(ctx, text("SELECT RELEASE_LOCK(?)", lock)).Scan(&released); err != nil {
		return err
	}
	if released.Int64 != 1 {
		return errors.New("RELEASE_LOCK: this session did not hold the lock")
	}
	return nil
}

// renewLeases renews the leases held, through the pool db, and returns
// each one's outcome, in their order.
func renewLeases(ctx context.Context, db *sql.DB, tbl tables, held []heldTerm) ([]error, error) {
	locks, epochs, ids := make([]string, len(held)), make([]string, len(held)), make([]string, len(held))
	for i, h := range held {
		locks[i], epochs[i], ids[i] = literal(h.lock), literal(h.token), literal(h.holder)
	}
	results := make([]error, len(held))
	// The records alone: the holders' candidate rows are stamped with the
	// waiters' (poll), so that no lock on a candidate row (another
	// process's candidate joining, which deletes dead rows beside it) can
	// hold a renewal up.
	res, err := write(ctx, db, "UPDATE `"+tbl.record+"` r SET r.renewed_at = UTC_TIMESTAMP(6) WHERE r.state = "+literal(stateLeading)+
		" AND NOT (r.demote_epoch <=> r.epoch) AND r.lock_name IN ("+strings.Join(locks, ", ")+") AND r.epoch IN ("+strings.Join(epochs, ", ")+
		") AND r.conn_id IN ("+strings.Join(ids, ", ")+")")
	if err != nil {
		return nil, err
	}
	if n, err := res.RowsAffected(); err == nil && n == int64(len(held)) {
		return results, nil
	}
	byLock := map[string][]int{}
	for i, h := range held {
		byLock[h.lock] = append(byLock[h.lock], i)
		results[i] = fmt.Errorf("%w: the record names another term", ErrLockLost)
	}
	got, err := db.QueryContext(ctx, "SELECT r.lock_name, r.epoch, r.conn_id, r.state = "+literal(stateLeading)+", r.demote_epoch <=> r.epoch, r.handover_to "+
		"FROM `"+tbl.record+"` r WHERE r.lock_name IN ("+strings.Join(locks, ", ")+")")
	if err != nil {
		return nil, err
	}
	defer got.Close()
	for got.Next() {
		var (
			lock             string
			epoch, id        uint64
			leading, demoted bool
			handTo           sql.NullString
		)
		if err := got.Scan(&lock, &epoch, &id, &leading, &demoted, &handTo); err != nil {
			return nil, err
		}
		for _, i := range byLock[lock] {
			switch {
			case epoch != held[i].token || id != held[i].holder || !leading:
			case demoted:
				results[i] = demotion(handTo)
			default:
				results[i] = nil // renewed: nothing that made it match can come back
			}
		}
	}
	return results, got.Err()
}

// earlierReaders returns the elections with a candidate row an earlier
// version wrote last (seenNow): its candidate judges a term by its
// record's own renewal, not its lease. The index holds those rows apart:
// the statement reads them alone.
func earlierReaders(ctx context.Context, conn *sql.Conn, t tables) (map[string]bool, error) {
	// No DISTINCT: it would build a temporary table at each read, for the
	// few rows there may be.
	rows, err := conn.QueryContext(ctx, "SELECT lock_name FROM `"+t.candidate+"` WHERE by_earlier = TRUE")
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	found := map[string]bool{}
	for rows.Next() {
		var lock string
		if err := rows.Scan(&lock); err != nil {
			return nil, err
		}
		found[lock] = true
	}
	return found, rows.Err()
}

// beatCandidates stamps the candidate rows in t of identity in the
// elections of locks, through the pool db, in one statement; it fails
// unless it stamped one for each.
func beatCandidates(ctx context.Context, db *sql.DB, t tables, identity string, locks []string) error {
	res, err := write(ctx, db, text("UPDATE `"+t.candidate+"` SET "+seenNow("")+" WHERE identity = ? AND lock_name IN (", identity)+
		literals(locks)+")")
	if err == nil {
		if n, err2 := res.RowsAffected(); err2 != nil || n != int64(len(locks)) {
			err = fmt.Errorf("stamped %d of %d rows", n, len(locks))
		}
	}
	return err
}

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
// another candidate; whether one of a higher priority waits is read
// apart, for the starts whose records say one may (store.rank).
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
		"FROM "+derived([]string{"lock_name", "identity"}, names)+" x JOIN ("+tbl.recordWithLease()+") ON r.lock_name = x.lock_name "+
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
	for i := range reads {
		r := &reads[i]
		if err := byLock[r.lock].st.rank(ctx, conn, r.lock, &r.p); err != nil {
			return nil, err
		}
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

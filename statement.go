package election

// How the store's statements are sent: as text with their arguments
// inlined as literals (one round trip each), through the pool or on a
// session in hand, and what becomes of a session after a failure. The
// statements themselves are the store's: store.go, claim.go, batch.go,
// schema.go and platform.go.

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"
)

// text writes args into query in place of its ? placeholders, as literals,
// so that the statement goes to the server as one COM_QUERY: with the
// driver's default DSN (interpolateParams off) a statement with arguments
// costs a PREPARE and an EXECUTE, two round trips, and a prepared statement
// on the server for each session. Strings made only of letters, digits and
// -_.:/@ (lock names, identities as most are) go as plain quoted literals,
// in any ASCII-compatible connection charset; any other string goes as a
// hex literal with a charset introducer, which no sql_mode or charset can
// misread. Placeholders inside quoted parts of query are left alone.
func text(query string, args ...any) string {
	var b strings.Builder
	b.Grow(len(query) + 16*len(args))
	var quote byte
	n := 0
	for i := 0; i < len(query); i++ {
		c := query[i]
		switch {
		case quote != 0:
			if c == quote {
				quote = 0
			}
		case c == '\'' || c == '"' || c == '`':
			quote = c
		case c == '?':
			if n == len(args) {
				panic(fmt.Sprintf("election: statement has more placeholders than its %d arguments: %s", len(args), query))
			}
			b.WriteString(literal(args[n]))
			n++
			continue
		}
		b.WriteByte(c)
	}
	if n != len(args) {
		panic(fmt.Sprintf("election: statement has %d placeholders for %d arguments: %s", n, len(args), query))
	}
	return b.String()
}

// literal writes one argument as SQL.
func literal(v any) string {
	switch v := v.(type) {
	case nil:
		return "NULL"
	case string:
		if plain(v) {
			return "'" + v + "'"
		}
		return "_utf8mb4 X'" + hex.EncodeToString([]byte(v)) + "'"
	case int:
		return strconv.Itoa(v)
	case int64:
		return strconv.FormatInt(v, 10)
	case uint64:
		return strconv.FormatUint(v, 10)
	case float64:
		return strconv.FormatFloat(v, 'f', -1, 64)
	case bool:
		if v {
			return "TRUE"
		}
		return "FALSE"
	}
	panic(fmt.Sprintf("election: no SQL literal for %T", v))
}

// plain reports whether s needs no escaping in a quoted literal, under any
// sql_mode and ASCII-compatible charset.
func plain(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.IndexByte("-_.:/@ ", c) >= 0) {
			return false
		}
	}
	return true
}

// drop closes a session for good. Conn.Close would return it to the pool
// with whatever it has (the short wait_timeout); driver.ErrBadConn from Raw
// makes database/sql close the underlying connection instead.
func drop(conn *sql.Conn) {
	conn.Raw(func(any) error { return driver.ErrBadConn })
	conn.Close()
}

// literals joins ss as SQL string literals.
func literals(ss []string) string {
	q := make([]string, len(ss))
	for i, s := range ss {
		q[i] = literal(s)
	}
	return strings.Join(q, ", ")
}

// querier is what both the pool and a pinned session offer.
type querier interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

package election_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/sqlelect/election"
	"github.com/sqlelect/election/internal/mysqltest"
)

func TestFenceHandler(t *testing.T) {
	t.Parallel()
	var f election.Fence
	var mu sync.Mutex
	var written []string
	store := f.Handler(func(r *http.Request) string { return r.URL.Path }, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		written = append(written, r.URL.Path+"@"+r.Header.Get(election.TokenHeader))
		mu.Unlock()
	}))
	send := func(path, token string) int {
		req := httptest.NewRequest("PUT", path, nil)
		if token != "" {
			req.Header.Set(election.TokenHeader, token)
		}
		rr := httptest.NewRecorder()
		store.ServeHTTP(rr, req)
		return rr.Code
	}
	for _, tc := range []struct {
		path, token string
		want        int
	}{
		{"/a", "5", 200}, {"/a", "6", 200}, {"/a", "6", 200}, {"/a", "5", 409},
		{"/b", "1", 200}, // resources are fenced apart
		{"/a", "", 400}, {"/a", "x", 400},
	} {
		if got := send(tc.path, tc.token); got != tc.want {
			t.Fatalf("PUT %s with token %q: %d, want %d", tc.path, tc.token, got, tc.want)
		}
	}
	twice := httptest.NewRequest("PUT", "/a", nil)
	twice.Header.Add(election.TokenHeader, "1")
	twice.Header.Add(election.TokenHeader, "9")
	rr := httptest.NewRecorder()
	store.ServeHTTP(rr, twice)
	if rr.Code != http.StatusBadRequest {
		t.Fatalf("PUT with two tokens: %d, want 400", rr.Code)
	}
	if strings.Join(written, " ") != "/a@5 /a@6 /a@6 /b@1" {
		t.Fatalf("written: %v", written)
	}
}

// A leader that stops in the middle of a fenced transaction (paused, or cut
// off) holds the shared lock on the epoch row that the next term must bump.
// The transaction's session has the short wait_timeout, so the server ends
// it and the next candidate leads; the stuck write never commits.
func TestStuckFencedTransactionDoesNotBlockTheElection(t *testing.T) {
	forEachStrategy(t, func(t *testing.T, s election.Strategy) {
		db, _ := newDB(t)
		createWrites(t, db)
		admin := server.Open(t, "")
		ctx := ctxFor(t, time.Minute)
		a := newElector(t, s, db, "stuck-tx", "a")
		b := newElector(t, s, server.Open(t, dbNameOf(t, db)), "stuck-tx", "b")
		ta := await(t, campaign(ctx, a), 10*time.Second).term
		inside, hold := make(chan struct{}), make(chan struct{})
		done := make(chan error, 1)
		go func() {
			done <- ta.Fenced(ctx, func(tx *sql.Tx) error {
				if _, err := tx.ExecContext(ctx, "INSERT INTO writes (token, holder) VALUES (?, 'stuck')", ta.Token()); err != nil {
					return err
				}
				close(inside)
				<-hold // the leader stops here, its transaction open
				return nil
			})
		}()
		<-inside
		released := false
		t.Cleanup(func() {
			if !released {
				close(hold)
				<-done
			}
		})
		// The leader loses the election: its session is killed (GetLock) or
		// its record is taken over once its lease lapses (LeaseRow).
		if s == election.GetLock {
			rec, err := newOperator(t, db, "stuck-tx").Leader(ctx)
			if err != nil {
				t.Fatal(err)
			}
			admin.Exec(fmt.Sprint("KILL CONNECTION ", rec.ConnID))
		} else {
			ta.Resign(ctx)
		}
		// b's claim waits on the epoch row until the stopped leader's
		// transaction ends: the end of its term rolls it back (FencedTx
		// cancels it), at Resign under LeaseRow and at the keepalive that
		// finds the session killed under GetLock. A server that frees the
		// row later than b's try waits (TiDB once did, when the row waited
		// for the server's idle timeout) makes that try give up, with
		// ErrLeaseExpired or a deadline, and b campaigns again, as Run would.
		var tb *election.Term
		var err error
		for tries := 0; tb == nil; tries++ {
			if tb, err = b.Campaign(ctx); err != nil && (tries == 3 || !errors.Is(err, election.ErrLeaseExpired) && !errors.Is(err, context.DeadlineExceeded)) {
				t.Fatal(err)
			}
			if err != nil {
				t.Logf("campaign %d: %v", tries, err)
			}
		}
		defer tb.Resign(context.Background())
		assertTokenAfter(t, tb.Token(), ta.Token())
		// The stopped leader goes on: its term is over, so its transaction
		// is not committed, and says fenced.
		released = true
		close(hold)
		err = <-done
		t.Logf("%v", err)
		var stale *election.StaleTokenError
		if !errors.Is(err, election.ErrFenced) || !errors.As(err, &stale) {
			t.Errorf("the stopped leader's fenced transaction: %v, want a StaleTokenError", err)
		}
		if writesBy(db, "stuck") != 0 {
			t.Fatal("the stuck leader's write committed")
		}
	})
}

// FencedTx runs fn with the options given: a read-only fenced transaction
// reads under the token, the server refuses its writes, and once a newer
// term exists it is refused like any fenced transaction.
func TestFencedTxOptions(t *testing.T) {
	forEachStrategy(t, func(t *testing.T, s election.Strategy) {
		db, _ := newDB(t)
		createWrites(t, db)
		ctx := ctxFor(t, time.Minute)
		ta := await(t, campaign(ctx, newElector(t, s, db, "tx-options", "a")), 10*time.Second).term
		if err := fencedWrite(ctx, ta, "a"); err != nil {
			t.Fatal(err)
		}
		readOnly := &sql.TxOptions{ReadOnly: true}
		if onTiDB {
			// TiDB refuses a READ ONLY transaction (error 1235) unless
			// tidb_enable_noop_functions makes it a no-op.
			err := ta.FencedTx(ctx, readOnly, func(*sql.Tx) error { t.Error("ran in a refused transaction"); return nil })
			var me *mysql.MySQLError
			if !errors.As(err, &me) || me.Number != 1235 {
				t.Fatalf("a read-only fenced transaction on TiDB: %v, want error 1235", err)
			}
			readOnly = nil
		}
		read := func(term *election.Term) (int, error) {
			var n int
			err := term.FencedTx(ctx, readOnly, func(tx *sql.Tx) error {
				return tx.QueryRowContext(ctx, "SELECT COUNT(*) FROM writes").Scan(&n)
			})
			return n, err
		}
		if n, err := read(ta); err != nil || n != 1 {
			t.Fatalf("a read-only fenced read: %d rows, %v", n, err)
		}
		if readOnly != nil {
			err := ta.FencedTx(ctx, readOnly, func(tx *sql.Tx) error {
				_, err := tx.ExecContext(ctx, "INSERT INTO writes (token, holder) VALUES (?, 'read-only')", ta.Token())
				return err
			})
			if err == nil || writesBy(db, "read-only") != 0 {
				t.Fatalf("a write in a read-only fenced transaction: %v, %d rows", err, writesBy(db, "read-only"))
			}
		}
		if err := ta.FencedTx(ctx, &sql.TxOptions{Isolation: sql.LevelReadCommitted}, func(tx *sql.Tx) error {
			_, err := tx.ExecContext(ctx, "INSERT INTO writes (token, holder) VALUES (?, 'read-committed')", ta.Token())
			return err
		}); err != nil || writesBy(db, "read-committed") != 1 {
			t.Fatalf("a read-committed fenced write: %v", err)
		}
		resignAll(t, ta)
		await(t, campaign(ctx, newElector(t, s, db, "tx-options", "b")), 10*time.Second)
		if _, err := read(ta); !errors.Is(err, election.ErrFenced) {
			t.Fatalf("a read-only fenced read of an old term: %v, want ErrFenced", err)
		}
	})
}

// fenceServer serves a store behind f.Handler on a real HTTP server, with
// one resource per path. The store answers 401 without an X-Auth header,
// waits for hold with an X-Hold header, and records what it wrote; left
// receives the X-Id of every request whose handler has returned.
func fenceServer(t *testing.T, f *election.Fence, hold <-chan struct{}) (srv *httptest.Server, written func() []string, left <-chan string) {
	t.Helper()
	var mu sync.Mutex
	var rows []string
	store := f.Handler(func(r *http.Request) string { return r.URL.Path }, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("X-Auth") == "" {
			http.Error(w, "who are you?", http.StatusUnauthorized)
			return
		}
		if r.Header.Get("X-Hold") != "" {
			<-hold
		}
		body, _ := io.ReadAll(r.Body)
		mu.Lock()
		rows = append(rows, r.URL.Path+"@"+r.Header.Get(election.TokenHeader)+"="+string(body))
		mu.Unlock()
	}))
	served := make(chan string, 100)
	srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		store.ServeHTTP(w, r)
		served <- r.Header.Get("X-Id")
	}))
	t.Cleanup(srv.Close)
	return srv, func() []string {
		mu.Lock()
		defer mu.Unlock()
		return append([]string(nil), rows...)
	}, served
}

// put sends one write to the fenced store and returns its status code.
func put(t *testing.T, ctx context.Context, srv *httptest.Server, path, token, body string, header ...string) int {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, "PUT", srv.URL+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set(election.TokenHeader, token)
	req.Header.Set("X-Auth", "yes")
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatalf("PUT %s: %v", path, err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

// A token no term ever held (a bug, or a forgery: tokens are not secrets)
// must not lock the real leader out: with Issued, the fence refuses it.
func TestFenceRefusesUnissuedTokens(t *testing.T) {
	t.Parallel()
	db, _ := newDB(t)
	ctx := ctxFor(t, time.Minute)
	a := newElector(t, election.GetLock, db, "issued", "a")
	ta := await(t, campaign(ctx, a), 10*time.Second).term
	ops := newOperator(t, db, "issued")
	f := &election.Fence{Issued: ops.Token}
	srv, written, _ := fenceServer(t, f, nil)
	if code := put(t, ctx, srv, "/r", "18446744073709551615", "forged"); code != http.StatusForbidden {
		t.Fatalf("write with a token never issued: %d, want 403", code)
	}
	if err := f.Check(ctx, "/r", ta.Token()+1); !errors.Is(err, election.ErrUnissuedToken) {
		t.Fatalf("Check of the next, unissued token: %v", err)
	}
	if code := put(t, ctx, srv, "/r", fmt.Sprint(ta.Token()), "real"); code != http.StatusOK {
		t.Fatalf("the leader's write after a forged one: %d, want 200", code)
	}
	resignAll(t, ta)
	tb := await(t, campaign(ctx, a), 10*time.Second).term
	defer resignAll(t, tb)
	if code := put(t, ctx, srv, "/r", fmt.Sprint(tb.Token()), "next"); code != http.StatusOK {
		t.Fatalf("the next term's write (a token newer than the fence knew): %d, want 200", code)
	}
	if code := put(t, ctx, srv, "/r", fmt.Sprint(ta.Token()), "late"); code != http.StatusConflict {
		t.Fatalf("the old term's write: %d, want 409", code)
	}
	if got := strings.Join(written(), " "); got != fmt.Sprintf("/r@%d=real /r@%d=next", ta.Token(), tb.Token()) {
		t.Fatalf("written: %s", got)
	}
}

// A token counts only for a write the store admitted: a request the
// wrapped handler refuses raises nothing.
func TestFenceCountsOnlyAdmittedWrites(t *testing.T) {
	t.Parallel()
	var f election.Fence
	srv, written, _ := fenceServer(t, &f, nil)
	ctx := ctxFor(t, time.Minute)
	req, _ := http.NewRequestWithContext(ctx, "PUT", srv.URL+"/r", strings.NewReader("x"))
	req.Header.Set(election.TokenHeader, "99") // no X-Auth: the store refuses it
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("unauthorized write: %d", resp.StatusCode)
	}
	if code := put(t, ctx, srv, "/r", "6", "leader"); code != http.StatusOK {
		t.Fatalf("the leader's write after a refused higher token: %d, want 200", code)
	}
	if got := strings.Join(written(), " "); got != "/r@6=leader" {
		t.Fatalf("written: %s", got)
	}
}

// A client that sends a valid token and then trickles its body delays only
// itself; a request that waits for its resource gives up when its context
// ends.
func TestFenceSlowClientsDoNotBlockOthers(t *testing.T) {
	t.Parallel()
	var f election.Fence
	hold := make(chan struct{})
	srv, written, left := fenceServer(t, &f, hold)
	release := sync.OnceFunc(func() { close(hold) })
	t.Cleanup(release) // before the server closes, even when the test fails
	ctx := ctxFor(t, time.Minute)
	// A slow client: headers, a token, and a body that never ends.
	conn, err := net.Dial("tcp", srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fmt.Fprintf(conn, "PUT /r HTTP/1.1\r\nHost: x\r\n%s: 5\r\nX-Auth: yes\r\nContent-Length: 1000\r\n\r\nfirst bytes", election.TokenHeader)
	time.Sleep(100 * time.Millisecond) // the server reads its headers
	quick, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if code := put(t, quick, srv, "/r", "5", "x"); code != http.StatusOK {
		t.Fatalf("write behind a slow client: %d", code)
	}

	// A write that holds /r inside the store, and one that waits behind it
	// and is cancelled: the waiting one must leave while the first still
	// holds /r, and write nothing.
	<-left // the quick write's; the slow client's leaves when its connection closes
	first := make(chan int, 1)
	go func() { first <- put(t, ctx, srv, "/r", "5", "held", "X-Hold", "1", "X-Id", "first") }()
	time.Sleep(100 * time.Millisecond)
	waiting, stop := context.WithCancel(ctx)
	second := make(chan error, 1)
	go func() {
		req, _ := http.NewRequestWithContext(waiting, "PUT", srv.URL+"/r", strings.NewReader("cancelled"))
		req.Header.Set(election.TokenHeader, "5")
		req.Header.Set("X-Auth", "yes")
		req.Header.Set("X-Id", "second")
		_, err := srv.Client().Do(req)
		second <- err
	}()
	time.Sleep(100 * time.Millisecond)
	stop()
	if err := <-second; !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled write: %v", err)
	}
	select {
	case id := <-left:
		if id != "second" {
			t.Fatalf("request %q left first, want the cancelled one", id)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the cancelled request still waits for the resource")
	}
	release()
	if code := <-first; code != http.StatusOK {
		t.Fatalf("held write: %d", code)
	}
	for _, w := range written() {
		if strings.HasSuffix(w, "=cancelled") {
			t.Fatalf("the cancelled request wrote: %v", written())
		}
	}
}

// Handler buffers a body before it waits, so it bounds it.
func TestFenceBodyLimit(t *testing.T) {
	t.Parallel()
	f := election.Fence{MaxBody: 10}
	srv, written, _ := fenceServer(t, &f, nil)
	ctx := ctxFor(t, time.Minute)
	if code := put(t, ctx, srv, "/r", "1", strings.Repeat("x", 11)); code != http.StatusRequestEntityTooLarge {
		t.Fatalf("body over MaxBody: %d, want 413", code)
	}
	if code := put(t, ctx, srv, "/r", "1", strings.Repeat("x", 10)); code != http.StatusOK {
		t.Fatalf("body of MaxBody: %d, want 200", code)
	}
	if got := written(); len(got) != 1 {
		t.Fatalf("written: %v", got)
	}
}

// Whatever resource names and tokens clients send, the fence's memory stays
// bounded, and what it refuses stays right after it folds.
func TestFenceMemoryIsBounded(t *testing.T) {
	var f election.Fence
	store := f.Handler(func(r *http.Request) string { return r.URL.Path }, http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	send := func(path string, token uint64) int {
		req := httptest.NewRequest("PUT", path, nil)
		req.Header.Set(election.TokenHeader, fmt.Sprint(token))
		rr := httptest.NewRecorder()
		store.ServeHTTP(rr, req)
		return rr.Code
	}
	heap := func() uint64 {
		runtime.GC()
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		return m.HeapAlloc
	}
	before := heap()
	for i := range 200_000 {
		send(fmt.Sprintf("/zero/%d", i), 0) // admitted, raises nothing
	}
	for i := range 200_000 {
		send(fmt.Sprintf("/seven/%d", i), 7)
	}
	if grew := int64(heap()) - int64(before); grew > 32<<20 {
		t.Fatalf("400,000 writes to distinct resources kept %d MiB", grew>>20)
	}
	// A resource name cut from a long request line keeps only itself.
	short := f.Handler(func(r *http.Request) string { return strings.SplitN(r.RequestURI, "?", 2)[0] }, http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	pad := strings.Repeat("p", 256<<10)
	before = heap()
	for i := range 100 {
		req := httptest.NewRequest("PUT", fmt.Sprintf("/long/%d?pad=%s", i, pad), nil)
		req.Header.Set(election.TokenHeader, "8")
		short.ServeHTTP(httptest.NewRecorder(), req)
	}
	if grew := int64(heap()) - int64(before); grew > 8<<20 {
		t.Fatalf("100 short names cut from 256 KiB request lines kept %d MiB", grew>>20)
	}
	for _, tc := range []struct {
		path  string
		token uint64
		want  int
	}{
		{"/seven/1", 6, 409}, {"/seven/199999", 6, 409}, // remembered, or folded into the floor
		{"/new", 6, 409}, {"/new", 7, 200}, {"/new", 8, 200}, {"/new", 7, 409},
	} {
		if got := send(tc.path, tc.token); got != tc.want {
			t.Fatalf("PUT %s with token %d: %d, want %d", tc.path, tc.token, got, tc.want)
		}
	}
}

// A write the store made counts even when the store then redirects or
// panics: only a 4xx says the request was refused.
func TestFenceCountsWritesThatDidNotAnswer2xx(t *testing.T) {
	t.Parallel()
	var f election.Fence
	var value string
	store := f.Handler(nil, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		value = string(body)
		switch r.Header.Get("X-Then") {
		case "redirect":
			http.Redirect(w, r, "/done", http.StatusSeeOther)
		case "panic":
			panic("after the write")
		case "write-then-500":
			io.WriteString(w, "ok")
			w.WriteHeader(http.StatusInternalServerError)
		}
	}))
	send := func(token, body, then string) (code int) {
		defer func() {
			if recover() != nil {
				code = -1
			}
		}()
		req := httptest.NewRequest("PUT", "/r", strings.NewReader(body))
		req.Header.Set(election.TokenHeader, token)
		req.Header.Set("X-Then", then)
		rr := httptest.NewRecorder()
		store.ServeHTTP(rr, req)
		return rr.Code
	}
	for i, then := range []string{"redirect", "panic", "write-then-500"} {
		newer := fmt.Sprint(10 * (i + 1))
		send(newer, "new", then)
		if code := send(fmt.Sprint(10*(i+1)-1), "stale", ""); code != http.StatusConflict || value != "new" {
			t.Fatalf("after a write that answered %s: stale write got %d, value %q", then, code, value)
		}
	}
}

// A request that gives up waiting for its resource (its context ended)
// says so, with 503, rather than an empty 200.
func TestFenceGivingUpIsNotSuccess(t *testing.T) {
	t.Parallel()
	var f election.Fence
	hold := make(chan struct{})
	release := sync.OnceFunc(func() { close(hold) })
	inner := f.Handler(nil, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("X-Hold") != "" {
			<-hold
		}
	}))
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), 200*time.Millisecond) // a middleware's deadline
		defer cancel()
		inner.ServeHTTP(w, r.WithContext(ctx))
	}))
	defer srv.Close()
	defer release() // before the server closes, even when the test fails
	ctx := ctxFor(t, time.Minute)
	first := make(chan int, 1)
	go func() { first <- put(t, ctx, srv, "/r", "1", "a", "X-Hold", "1") }()
	time.Sleep(50 * time.Millisecond)
	if code := put(t, ctx, srv, "/r", "1", "b"); code != http.StatusServiceUnavailable {
		t.Fatalf("write that gave up waiting: %d, want 503", code)
	}
	release()
	<-first
}

// A client that reads its response slowly does not hold the resource:
// the response waits for it after the write is done.
func TestFenceSlowReaderDoesNotHoldTheResource(t *testing.T) {
	t.Parallel()
	f := election.Fence{MaxBody: 8 << 20}
	big := strings.Repeat("x", 4<<20)
	srv := httptest.NewServer(f.Handler(nil, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, big) // echoes a large document
	})))
	defer srv.Close()
	d := net.Dialer{Control: func(_, _ string, c syscall.RawConn) error {
		return c.Control(func(fd uintptr) { syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 4096) })
	}}
	conn, err := d.Dial("tcp", srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fmt.Fprintf(conn, "PUT /r HTTP/1.1\r\nHost: x\r\n%s: 1\r\nContent-Length: 0\r\n\r\n", election.TokenHeader) // never reads
	time.Sleep(200 * time.Millisecond)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "PUT", srv.URL+"/r", nil)
	req.Header.Set(election.TokenHeader, "2")
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatalf("write behind a slow reader: %v", err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("write behind a slow reader: %d", resp.StatusCode)
	}
}

// fencedConnID makes a fenced write as holder and returns the id of the
// session it ran on.
func fencedConnID(t *testing.T, ctx context.Context, term *election.Term, holder string) uint64 {
	t.Helper()
	var id uint64
	err := term.Fenced(ctx, func(tx *sql.Tx) error {
		if err := tx.QueryRowContext(ctx, "SELECT CONNECTION_ID()").Scan(&id); err != nil {
			return err
		}
		_, err := tx.ExecContext(ctx, "INSERT INTO writes (token, holder) VALUES (?, ?)", term.Token(), holder)
		return err
	})
	if err != nil {
		t.Fatalf("fenced write %s: %v", holder, err)
	}
	return id
}

// assertPoolSessionsAtDefault fails the test unless every idle session of
// db has the server's default wait_timeout, and none is one of ids. It
// holds them all at once, so that it sees each one.
func assertPoolSessionsAtDefault(t *testing.T, ctx context.Context, db *sql.DB, ids ...uint64) {
	t.Helper()
	var def int64
	if err := db.QueryRowContext(ctx, "SELECT @@GLOBAL.wait_timeout").Scan(&def); err != nil {
		t.Fatal(err)
	}
	idle := db.Stats().Idle
	for range idle {
		conn, err := db.Conn(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		var (
			id   uint64
			wait int64
		)
		if err := conn.QueryRowContext(ctx, "SELECT CONNECTION_ID(), @@SESSION.wait_timeout").Scan(&id, &wait); err != nil {
			t.Fatal(err)
		}
		if wait != def {
			t.Errorf("pool session %d has wait_timeout %d, the server's default is %d", id, wait, def)
		}
		for _, kept := range ids {
			if id == kept {
				t.Errorf("pool session %d was a term's kept session", id)
			}
		}
	}
}

// A term keeps one session for its fenced transactions, with the short
// wait_timeout; it must never go back to the pool, neither when the term
// ends with it idle nor when a fenced transaction still runs on it. A
// Fenced that finds it busy runs on a pool session that goes back with the
// server's default.
func TestKeptSessionNeverReturnsToThePool(t *testing.T) {
	forEachStrategy(t, func(t *testing.T, s election.Strategy) {
		db, _ := newDB(t)
		db.SetMaxIdleConns(10) // nothing is closed for want of room
		createWrites(t, db)
		admin := server.Open(t, "")
		ctx := ctxFor(t, time.Minute)
		e := newElector(t, s, db, "kept", "a")

		// Idle at the term's end.
		ta := await(t, campaign(ctx, e), 10*time.Second).term
		kept := fencedConnID(t, ctx, ta, "a")
		if again := fencedConnID(t, ctx, ta, "a"); again != kept {
			t.Fatalf("second fenced transaction on session %d, the first on %d: not kept", again, kept)
		}
		// Busy: a concurrent Fenced runs on a pool session of its own. Not
		// on TiDB, whose fenced transactions lock the epoch row
		// exclusively (platform.fenceLock) and so run one at a time: the
		// second would wait for the first.
		inside, hold := make(chan struct{}), make(chan struct{})
		done := make(chan error, 1)
		if !onTiDB {
			go func() {
				done <- ta.Fenced(ctx, func(tx *sql.Tx) error {
					close(inside)
					<-hold
					return nil
				})
			}()
			<-inside
			if other := fencedConnID(t, ctx, ta, "a"); other == kept {
				t.Fatal("a concurrent fenced transaction ran on the busy kept session")
			}
			close(hold)
			if err := <-done; err != nil {
				t.Fatal(err)
			}
		}
		resignAll(t, ta)
		assertPoolSessionsAtDefault(t, ctx, db, kept)

		// Busy at the term's end: dropped when its transaction ends.
		tb := await(t, campaign(ctx, e), 10*time.Second).term
		var busy uint64
		inside, hold = make(chan struct{}), make(chan struct{})
		go func() {
			done <- tb.Fenced(ctx, func(tx *sql.Tx) error {
				err := tx.QueryRowContext(ctx, "SELECT CONNECTION_ID()").Scan(&busy)
				close(inside)
				<-hold
				return err
			})
		}()
		<-inside
		resignAll(t, tb)
		close(hold)
		// Its term is over: the COMMIT is not sent.
		if err := <-done; !errors.Is(err, election.ErrFenced) {
			t.Fatalf("fenced transaction across the term's end: %v, want ErrFenced", err)
		}
		assertPoolSessionsAtDefault(t, ctx, db, kept, busy)
		var alive int
		admin.QueryRowContext(ctx, "SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE ID IN (?, ?)", kept, busy).Scan(&alive)
		if alive != 0 {
			t.Fatalf("%d kept sessions still open after their terms", alive)
		}
	})
}

// The kept session is idle between fenced transactions, so the server may
// drop it: killed, or past its wait_timeout (if the term has not closed it
// first). The next Fenced notices at BEGIN, before anything ran, and runs
// on a fresh session.
func TestFencedAfterKeptSessionDropped(t *testing.T) {
	t.Parallel()
	db, _ := newDB(t)
	createWrites(t, db)
	admin := server.Open(t, "")
	ctx := ctxFor(t, time.Minute)
	ta := await(t, campaign(ctx, newElector(t, election.Auto, db, "dropped", "a")), 10*time.Second).term
	first := fencedConnID(t, ctx, ta, "a")
	if _, err := admin.ExecContext(ctx, fmt.Sprint("KILL CONNECTION ", first)); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the killed session to end", 10*time.Second, func() bool {
		var n int
		admin.QueryRowContext(ctx, "SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE ID = ?", first).Scan(&n)
		return n == 0
	})
	afterKill := fencedConnID(t, ctx, ta, "a")
	if afterKill == first {
		t.Fatalf("fenced transaction on session %d, which was killed", first)
	}
	time.Sleep(3 * time.Second) // W = 2s: the server drops the idle session
	afterTimeout := fencedConnID(t, ctx, ta, "a")
	if afterTimeout == afterKill {
		t.Fatalf("fenced transaction on session %d, idle past its wait_timeout", afterKill)
	}
	if n := writesBy(db, "a"); n != 3 {
		t.Fatalf("%d writes, want 3", n)
	}
}

// A session that fails once fn has run is not retried: fn may have done
// anything. The next Fenced runs on a fresh session.
func TestFencedDoesNotRetryOnceFnRan(t *testing.T) {
	if onTiDB {
		t.Skip("killing a session inside a transaction makes the TiDB build tested here panic and end every session (platform.killsCommits)")
	}
	t.Parallel()
	db, _ := newDB(t)
	createWrites(t, db)
	admin := server.Open(t, "")
	ctx := ctxFor(t, time.Minute)
	ta := await(t, campaign(ctx, newElector(t, election.Auto, db, "no-retry", "a")), 10*time.Second).term
	calls := 0
	err := ta.Fenced(ctx, func(tx *sql.Tx) error {
		calls++
		var id uint64
		if err := tx.QueryRowContext(ctx, "SELECT CONNECTION_ID()").Scan(&id); err != nil {
			return err
		}
		if _, err := admin.ExecContext(ctx, fmt.Sprint("KILL CONNECTION ", id)); err != nil {
			return err
		}
		_, err := tx.ExecContext(ctx, "INSERT INTO writes (token, holder) VALUES (?, 'killed')", ta.Token())
		return err
	})
	if err == nil || calls != 1 {
		t.Fatalf("fenced transaction whose session was killed inside fn: %v after %d calls of fn, want an error after 1", err, calls)
	}
	fencedConnID(t, ctx, ta, "a")
	if writesBy(db, "killed") != 0 || writesBy(db, "a") != 1 {
		t.Fatalf("writes: %d of the killed transaction, %d after it", writesBy(db, "killed"), writesBy(db, "a"))
	}
}

// fn gets only a transaction, but it can still change its session: a
// wait_timeout it sets must not outlast its transaction on the kept
// session, or a leader stopped inside a later one could hold the epoch row
// that long.
func TestFencedRestoresWaitTimeout(t *testing.T) {
	t.Parallel()
	db, _ := newDB(t)
	createWrites(t, db)
	ctx := ctxFor(t, time.Minute)
	ta := await(t, campaign(ctx, newElector(t, election.Auto, db, "restore", "a")), 10*time.Second).term
	err := ta.Fenced(ctx, func(tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, "SET SESSION wait_timeout = 28800")
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	var wait int64
	err = ta.Fenced(ctx, func(tx *sql.Tx) error {
		return tx.QueryRowContext(ctx, "SELECT @@SESSION.wait_timeout").Scan(&wait)
	})
	if err != nil {
		t.Fatal(err)
	}
	if wait != 2 {
		t.Fatalf("the next fenced transaction runs with wait_timeout %d, want 2 (Lease+Margin)", wait)
	}
}

// In a bounded pool the kept session must not take the connection the rest
// of the program needs. With SetMaxOpenConns(2) the candidate pins one
// session and fenced transactions share the other with everything else,
// concurrent ones included; with three, a program that needs the last one
// gets it within an Interval.
func TestFencedInABoundedPool(t *testing.T) {
	t.Parallel()
	db, _ := newDB(t)
	createWrites(t, db)
	db.SetMaxOpenConns(2)
	ctx := ctxFor(t, time.Minute)
	ta := await(t, campaign(ctx, newElector(t, election.GetLock, db, "bounded", "a")), 10*time.Second).term
	quick := func() error {
		ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		var one int
		return db.QueryRowContext(ctx, "SELECT 1").Scan(&one)
	}
	var wg sync.WaitGroup
	errs := make(chan error, 40)
	for range 4 {
		wg.Go(func() {
			for range 5 {
				errs <- fencedWrite(ctx, ta, "a")
				errs <- quick()
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatalf("fenced writes and queries on a pool of two: %v", err)
		}
	}
	if n := writesBy(db, "a"); n != 20 {
		t.Fatalf("%d writes, want 20", n)
	}
	assertPoolSessionsAtDefault(t, ctx, db)

	db.SetMaxOpenConns(3)
	kept := fencedConnID(t, ctx, ta, "a")
	held, err := db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	if err := quick(); err != nil {
		t.Fatalf("a query while the kept session and one other take a pool of three: %v", err)
	}
	if again := fencedConnID(t, ctx, ta, "a"); again == kept {
		t.Fatal("the kept session was not given up to a waiting query")
	}
}

// The term closes its idle kept session itself before the server would end
// it for its wait_timeout: the server would count an aborted client, and
// the next Fenced would find it dead.
func TestIdleKeptSessionClosedBeforeItsWaitTimeout(t *testing.T) {
	t.Parallel()
	db, _ := newDB(t)
	createWrites(t, db)
	admin := server.Open(t, "")
	ctx := ctxFor(t, time.Minute)
	// W = 4 s; the kept session goes at 2 to 3 s idle (W − 2·Interval, at
	// the next keepalive): a second of slack for a late keepalive loop on a
	// loaded machine.
	cfg := election.Config{Identity: "a", Interval: time.Second, Lease: 3 * time.Second, Margin: time.Second}
	ta := await(t, campaign(ctx, newElectorWith(t, db, "idle", cfg)), 10*time.Second).term
	kept := fencedConnID(t, ctx, ta, "a")
	idle := time.Now()
	waitFor(t, "the idle kept session to end", 10*time.Second, func() bool {
		var n int
		admin.QueryRowContext(ctx, "SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE ID = ?", kept).Scan(&n)
		return n == 0
	})
	if took := time.Since(idle); took >= 4*time.Second {
		t.Fatalf("the idle kept session ended after %v: the server's wait_timeout, not the term, ended it", took)
	}
	if next := fencedConnID(t, ctx, ta, "a"); next == kept {
		t.Fatal("fenced transaction on a closed session")
	}
}

// A fenced transaction whose term ends while it is open, through the
// term's context, fails as fenced: database/sql rolls it back when the
// context ends, and its COMMIT finds it done.
func TestFencedTransactionCutByTheTermsEnd(t *testing.T) {
	forEachStrategy(t, func(t *testing.T, s election.Strategy) {
		db, _ := newDB(t)
		createWrites(t, db)
		ctx := ctxFor(t, time.Minute)
		campaignCtx, end := context.WithCancel(ctx)
		term := await(t, campaign(campaignCtx, newElector(t, s, db, "cut-tx", "a")), 10*time.Second).term
		err := term.Fenced(term.Context(), func(tx *sql.Tx) error {
			if _, err := tx.ExecContext(term.Context(), "INSERT INTO writes (token, holder) VALUES (?, 'cut')", term.Token()); err != nil {
				return err
			}
			end() // the term ends, as when its lease runs out
			<-term.Done()
			return nil
		})
		var stale *election.StaleTokenError
		if !errors.Is(err, election.ErrFenced) || !errors.As(err, &stale) || stale.Failed == nil {
			t.Errorf("a fenced transaction cut by its term's end: %v, want a StaleTokenError with the failure", err)
		}
		if writesBy(db, "cut") != 0 {
			t.Fatal("the cut transaction's write committed")
		}
	})
}

// A COMMIT that the server holds past the end of its term (here by a
// backup's commit lock, MariaDB's BACKUP STAGE BLOCK_COMMIT, which holds
// the leader's keepalives too, so that its lease runs out) does not hold
// Fenced: the term's end kills its session, and Fenced returns, with an
// unknown outcome, while the lock is still held; killed there, nothing of
// it commits. On a server of its own: the lock holds every commit.
func TestFencedCommitHeldPastItsTermIsCut(t *testing.T) {
	if mysqltest.PrivateBinary() == "" {
		t.Skip("needs a mariadbd binary to start a server of its own; only a DSN was given")
	}
	t.Parallel()
	srv, err := mysqltest.StartPrivate(ctxFor(t, 2*time.Minute), mysqltest.PrivateBinary())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Close)
	db := srv.Open(t, srv.NewDatabase(t))
	createWrites(t, db)
	ctx := ctxFor(t, time.Minute)
	admin := srv.Open(t, "")
	backup, err := admin.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer backup.Close()
	term := await(t, campaign(ctx, newElector(t, election.GetLock, db, "held-commit", "a")), 10*time.Second).term
	fenced := make(chan error, 1)
	go func() {
		fenced <- term.Fenced(ctx, func(tx *sql.Tx) error {
			if _, err := tx.ExecContext(ctx, "INSERT INTO writes (token, holder) VALUES (?, 'held')", term.Token()); err != nil {
				return err
			}
			for _, stmt := range []string{"BACKUP STAGE START", "BACKUP STAGE BLOCK_COMMIT"} {
				if _, err := backup.ExecContext(ctx, stmt); err != nil {
					return fmt.Errorf("%s: %w", stmt, err)
				}
			}
			return nil
		})
	}()
	select {
	case err := <-fenced:
		if err == nil || !strings.Contains(err.Error(), "unknown outcome") {
			t.Fatalf("Fenced whose COMMIT the server held past the term: %v, want an unknown outcome", err)
		}
	case <-time.After(30 * time.Second): // a guard against a hang, not a bound on speed
		t.Fatal("Fenced still waits for its COMMIT 30 s after it began, with the term over")
	}
	if term.Err() == nil {
		t.Fatal("the term did not end while the backup held commits")
	}
	// KILL only marks the session; it gives up its COMMIT when it wakes.
	waitFor(t, "the killed COMMIT to end", 10*time.Second, func() bool {
		var n int
		admin.QueryRowContext(ctx, "SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE INFO = 'COMMIT'").Scan(&n)
		return n == 0
	})
	if _, err := backup.ExecContext(ctx, "BACKUP STAGE END"); err != nil {
		t.Fatal(err)
	}
	if n := writesBy(db, "held"); n != 0 {
		t.Fatalf("the cut COMMIT committed %d rows", n)
	}
}

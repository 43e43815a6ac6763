// Command fencedstore shows why a leader sends its fencing token to the
// stores it writes to, and how a store refuses the writes of a stale leader.
// It has two roles. The store keeps a value per key in memory behind
// election.Fence.Handler, which answers 409 Conflict to a write whose token
// (header election.TokenHeader) is lower than one it has seen for the key.
// A client, while it leads the election "fencedstore", puts its name under
// the key "leader" every 100ms with its term's token.
//
//	go run ./examples/fencedstore store                     # on 127.0.0.1:8080
//	go run ./examples/fencedstore client -id a              # prints the ELECTION_DSN of its private MariaDB
//	ELECTION_DSN='root@tcp(127.0.0.1:PORT)/fencedstore' go run ./examples/fencedstore client -id b
//
// Pause the leading client (kill -STOP PID) until the other one leads, then
// resume it (kill -CONT PID): it sends one more write with its old token,
// before it learns that its term is over, and the store refuses it.
// curl 127.0.0.1:8080/log lists every write the store was sent. Without
// $ELECTION_DSN a client starts a private throwaway MariaDB from the
// mariadbd on PATH; with it, $ELECTION_DSN must name a database.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"time"

	_ "github.com/go-sql-driver/mysql" // the "mysql" driver

	"github.com/sqlelect/election"
	"github.com/sqlelect/election/examples/internal/exampledb"
)

// writeEvery is how often the leading client writes.
const writeEvery = 100 * time.Millisecond

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	role := ""
	if len(os.Args) > 1 {
		role = os.Args[1]
	}
	var err error
	switch role {
	case "store":
		fs := flag.NewFlagSet("store", flag.ExitOnError)
		addr := fs.String("addr", "127.0.0.1:8080", "address to listen on")
		fs.Parse(os.Args[2:])
		err = serve(ctx, *addr)
	case "client":
		fs := flag.NewFlagSet("client", flag.ExitOnError)
		storeURL := fs.String("store", "http://127.0.0.1:8080", "the store's URL")
		var cfg election.Config
		fs.StringVar(&cfg.Identity, "id", "", "this client's identity (default host-pid-random)")
		fs.DurationVar(&cfg.Interval, "interval", election.DefaultInterval, "how often the leader renews its term")
		fs.DurationVar(&cfg.Lease, "lease", election.DefaultLease, "how long the leader may act after a renewal")
		fs.DurationVar(&cfg.Margin, "margin", election.DefaultMargin, "time between the end of a silent leader's lease and the next term")
		fs.Parse(os.Args[2:])
		err = client(ctx, *storeURL, cfg)
	default:
		fmt.Fprintln(os.Stderr, "usage: fencedstore store [-addr host:port] | fencedstore client [-id name] [-store URL] [-interval d] [-lease d] [-margin d]")
		os.Exit(2)
	}
	if err != nil {
		log.Fatal(err)
	}
}

// entry is a write the store was sent, as GET /log lists it.
type entry struct {
	Key    string `json:"key"`
	Token  uint64 `json:"token"`
	Value  string `json:"value,omitempty"` // only for admitted writes
	Status int    `json:"status"`
}

// store is the downstream store: values in memory, and a log of writes.
type store struct {
	fence  election.Fence
	mu     sync.Mutex
	values map[string]string
	log    []entry
}

func serve(ctx context.Context, addr string) error {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	fmt.Printf("store listening on http://%s\n", l.Addr())
	s := &store{values: map[string]string{}}
	key := func(r *http.Request) string { return r.PathValue("key") }
	mux := http.NewServeMux()
	mux.Handle("PUT /kv/{key}", s.logRefused(s.fence.Handler(key, http.HandlerFunc(s.put))))
	mux.HandleFunc("GET /kv/{key}", s.get)
	mux.HandleFunc("GET /log", s.showLog)
	srv := &http.Server{Handler: mux}
	stop := context.AfterFunc(ctx, func() { srv.Shutdown(context.Background()) })
	defer stop()
	if err := srv.Serve(l); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// put stores an admitted write. The fence runs it for one request per key
// at a time, so the log lists admitted writes in the order it admitted them.
func (s *store) put(w http.ResponseWriter, r *http.Request) {
	value, err := io.ReadAll(r.Body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	token, _ := election.TokenFrom(r.Header) // the fence has checked it
	s.mu.Lock()
	s.values[r.PathValue("key")] = string(value)
	s.mu.Unlock()
	s.record(entry{Key: r.PathValue("key"), Token: token, Value: string(value), Status: http.StatusNoContent})
	w.WriteHeader(http.StatusNoContent)
}

// logRefused records the writes the fence refused, which never reach put.
func (s *store) logRefused(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		sw := &statusWriter{ResponseWriter: w}
		next.ServeHTTP(sw, r)
		if sw.status >= 400 {
			token, _ := election.TokenFrom(r.Header)
			s.record(entry{Key: r.PathValue("key"), Token: token, Status: sw.status})
		}
	})
}

func (s *store) record(e entry) {
	s.mu.Lock()
	s.log = append(s.log, e)
	s.mu.Unlock()
	fmt.Printf("PUT %s with token %d: %d %s\n", e.Key, e.Token, e.Status, http.StatusText(e.Status))
}

func (s *store) get(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	value, ok := s.values[r.PathValue("key")]
	s.mu.Unlock()
	if !ok {
		http.NotFound(w, r)
		return
	}
	io.WriteString(w, value)
}

func (s *store) showLog(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(s.log)
}

// statusWriter remembers the status a handler answered with.
type statusWriter struct {
	http.ResponseWriter
	status int
}

// WriteHeader remembers code and sends it.
func (w *statusWriter) WriteHeader(code int) {
	w.status = code
	w.ResponseWriter.WriteHeader(code)
}

// client writes to the store while it leads.
func client(ctx context.Context, storeURL string, cfg election.Config) error {
	db, cleanup, err := exampledb.Pool(ctx, "fencedstore")
	if err != nil {
		return err
	}
	defer cleanup()
	e, err := election.New(db, "fencedstore", cfg)
	if err != nil {
		return err
	}
	fmt.Printf("%s is a candidate\n", e.Identity())
	err = e.Run(ctx, func(ctx context.Context, t *election.Term) error {
		fmt.Printf("%s leads with token %d\n", e.Identity(), t.Token())
		for n := 1; ctx.Err() == nil; n++ {
			value := fmt.Sprintf("%s #%d", e.Identity(), n)
			req, err := http.NewRequest(http.MethodPut, storeURL+"/kv/leader", strings.NewReader(value))
			if err != nil {
				return err
			}
			t.SetToken(req.Header)
			// The term was checked above, but not from here to the write:
			// a pause here (GC, SIGSTOP, a slow disk) can outlast the term,
			// and then only the store's fence can refuse the write. The
			// sleep is that pause, announced by the line below so that a
			// test can stop the client inside it: on resume the write goes
			// out with the old token before anything looks at the term,
			// whether the lease timer or the sleep wakes up first.
			fmt.Printf("%s token %d: write %q pending\n", e.Identity(), t.Token(), value)
			time.Sleep(writeEvery)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				fmt.Printf("%s token %d: write %q failed: %v\n", e.Identity(), t.Token(), value, err)
				continue
			}
			resp.Body.Close()
			fmt.Printf("%s token %d: write %q: %s\n", e.Identity(), t.Token(), value, resp.Status)
		}
		fmt.Printf("%s stops leading: %v\n", e.Identity(), context.Cause(ctx))
		return nil
	})
	if ctx.Err() != nil {
		return nil // stopped by a signal
	}
	return err
}

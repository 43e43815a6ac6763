package faultproxy

import (
	"bytes"
	"errors"
	"io"
	"net"
	"os"
	"testing"
	"time"
)

// serve starts a server that runs reply on each connection it accepts, and
// returns its address; it stops when the test ends.
func serve(t *testing.T, reply func(c net.Conn)) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				reply(c)
			}()
		}
	}()
	return ln.Addr().String()
}

// echo starts a server that sends back what it reads, and returns a client
// connected to it through a proxy, both closed when the test ends.
func echo(t *testing.T) (*Proxy, net.Conn) {
	t.Helper()
	p, err := Start(serve(t, func(c net.Conn) { io.Copy(c, c) }))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p, dial(t, p)
}

// dial connects a client through p, closed when the test ends.
func dial(t *testing.T, p *Proxy) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// roundTrip sends msg and returns what comes back within a minute (a guard
// against a hang only).
func roundTrip(t *testing.T, c net.Conn, msg string) string {
	t.Helper()
	if _, err := c.Write([]byte(msg)); err != nil {
		t.Fatal(err)
	}
	c.SetReadDeadline(time.Now().Add(time.Minute))
	buf := make([]byte, 64)
	n, err := c.Read(buf)
	if err != nil {
		t.Fatalf("after sending %q: %v", msg, err)
	}
	return string(buf[:n])
}

// BlackholeAt drops the matching chunk and everything after it until
// Restore, and fires once: the server never saw the chunk, so the first
// answer after Restore is to the next one, and the same chunk passes then.
func TestBlackholeAt(t *testing.T) {
	p, c := echo(t)
	fired := make(chan struct{}, 2)
	p.BlackholeAt(func(chunk []byte) bool {
		if bytes.Contains(chunk, []byte("two")) {
			fired <- struct{}{}
			return true
		}
		return false
	})
	if got := roundTrip(t, c, "one"); got != "one" {
		t.Fatalf("before the trigger: got %q", got)
	}
	if _, err := c.Write([]byte("two")); err != nil {
		t.Fatal(err)
	}
	select {
	case <-fired:
	case <-time.After(time.Minute):
		t.Fatal("the trigger did not fire")
	}
	p.Restore()
	// The server's answer to "two", had it come through, would arrive
	// before the answer to "three".
	if got := roundTrip(t, c, "three"); got != "three" {
		t.Fatalf("after Restore: got %q, want only the answer to the chunk sent after it", got)
	}
	if got := roundTrip(t, c, "two"); got != "two" || len(fired) != 0 {
		t.Fatalf("the trigger again: got %q, fired again: %v; want it to pass, the trigger spent", got, len(fired) != 0)
	}
}

// Restore removes a trigger that has not fired.
func TestRestoreRemovesTrigger(t *testing.T) {
	p, c := echo(t)
	p.BlackholeAt(func([]byte) bool { return true })
	p.Restore()
	if got := roundTrip(t, c, "one"); got != "one" {
		t.Fatalf("got %q", got)
	}
}

// A server that resets its side during a blackhole (as a wait_timeout may)
// is not heard: the client's read waits, as across a partition, where it
// would have ended at once with the reset passed on; it is heard once the
// blackhole ends.
func TestBlackholeHidesAServerReset(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		if c, err := ln.Accept(); err == nil {
			accepted <- c
		}
	}()
	p, err := Start(ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	c, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	s := <-accepted
	// A byte through first: the proxy's own dial has completed, which a
	// reset would fail.
	if _, err := s.Write([]byte("x")); err != nil {
		t.Fatal(err)
	}
	if _, err := io.ReadFull(c, make([]byte, 1)); err != nil {
		t.Fatal(err)
	}
	p.Blackhole()
	s.(*net.TCPConn).SetLinger(0)
	s.Close()
	c.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
	if _, err := c.Read(make([]byte, 1)); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("the client heard %v through the blackhole, want nothing", err)
	}
	// Once the partition heals, the client learns that its server is gone,
	// as a retransmission would: left open, it would wait forever.
	p.Restore()
	c.SetReadDeadline(time.Now().Add(time.Minute)) // a guard against a hang only
	if _, err := c.Read(make([]byte, 1)); err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("after the blackhole the client read %v, want the connection ended", err)
	}
}

// SetTarget moves new connections to the new target and leaves an open one
// on the server it reached, which goes on answering it.
func TestSetTarget(t *testing.T) {
	named := func(name string) string {
		return serve(t, func(c net.Conn) {
			buf := make([]byte, 64)
			for {
				n, err := c.Read(buf)
				if err != nil {
					return
				}
				if _, err := c.Write(append([]byte(name+":"), buf[:n]...)); err != nil {
					return
				}
			}
		})
	}
	p, err := Start(named("old"))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	before := dial(t, p)
	if got := roundTrip(t, before, "x"); got != "old:x" {
		t.Fatalf("before SetTarget: got %q", got)
	}
	p.SetTarget(named("new"))
	if got := roundTrip(t, dial(t, p), "y"); got != "new:y" {
		t.Fatalf("a connection opened after SetTarget: got %q, want the new target's answer", got)
	}
	if got := roundTrip(t, before, "z"); got != "old:z" {
		t.Fatalf("a connection opened before SetTarget: got %q, want the old target's answer", got)
	}
}

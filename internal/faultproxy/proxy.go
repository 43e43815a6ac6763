// Package faultproxy is an in-process TCP proxy that injects network faults
// between a client and a server: a blackhole (the connections stay open and
// every byte is dropped, as on a partitioned link), started at once or at a
// chosen chunk of the client's, a reset of every connection, and added
// latency. It is also an endpoint that moves (SetTarget), as the DNS name or
// proxy in front of a database does in a failover.
package faultproxy

import (
	"errors"
	"net"
	"sync"
	"time"
)

// Proxy forwards connections from its listener to a target address.
type Proxy struct {
	ln net.Listener

	mu        sync.Mutex
	target    string
	blackhole bool
	at        func(chunk []byte) bool // starts a blackhole at a client's chunk (BlackholeAt)
	latency   time.Duration
	conns     map[net.Conn]struct{}
	// orphans lost their peer during a blackhole; Restore resets them.
	orphans map[net.Conn]struct{}
	wg      sync.WaitGroup
}

// Start listens on a free loopback port and forwards to target.
func Start(target string) (*Proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &Proxy{ln: ln, target: target, conns: make(map[net.Conn]struct{}), orphans: make(map[net.Conn]struct{})}
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

// Addr is the address clients dial instead of the target.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// SetTarget sends every connection accepted from now on to target, and
// leaves the open ones on the server they reach: what a database endpoint
// (Aurora's and RDS's DNS names, most proxies) does in a failover, where
// sessions opened before it stay on the old primary until they end.
func (p *Proxy) SetTarget(target string) { p.set(func() { p.target = target }) }

// Blackhole drops every byte in both directions from now on, on existing
// and new connections, without closing anything.
func (p *Proxy) Blackhole() { p.set(func() { p.blackhole = true }) }

// BlackholeAt starts a blackhole, as Blackhole does, at the first chunk of
// data a client sends for which at returns true; that chunk is dropped too,
// so the server never sees it. It fires once, and replaces a trigger that
// has not fired. A chunk is what one read returned: one write of the
// client's, unless the network split or merged writes. at runs with the
// proxy locked, so it must not call the proxy.
func (p *Proxy) BlackholeAt(at func(chunk []byte) bool) { p.set(func() { p.at = at }) }

// Restore ends a blackhole, removes added latency and a trigger that has
// not fired. A connection whose peer ended during the blackhole is reset
// now, as when a partition heals and a retransmission meets the peer's
// reset: left open, its client would wait for a reply forever.
func (p *Proxy) Restore() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.blackhole, p.latency, p.at = false, 0, nil
	for c := range p.orphans {
		reset(c)
		delete(p.conns, c)
	}
	clear(p.orphans)
}

// reset closes c with a TCP RST.
func reset(c net.Conn) {
	if tc, ok := c.(*net.TCPConn); ok {
		tc.SetLinger(0)
	}
	c.Close()
}

// Latency delays every chunk of data by d in each direction.
func (p *Proxy) Latency(d time.Duration) { p.set(func() { p.latency = d }) }

// Reset closes every open connection with a TCP RST on both sides.
func (p *Proxy) Reset() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for c := range p.conns {
		reset(c)
	}
}

// Close stops the proxy and closes every connection.
func (p *Proxy) Close() error {
	err := p.ln.Close()
	p.Reset()
	p.wg.Wait()
	return err
}

func (p *Proxy) set(f func()) {
	p.mu.Lock()
	f()
	p.mu.Unlock()
}

// state returns the faults that apply to chunk, read from a client if
// fromClient, after firing the trigger of BlackholeAt on it.
func (p *Proxy) state(chunk []byte, fromClient bool) (blackhole bool, latency time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if fromClient && p.at != nil && p.at(chunk) {
		p.blackhole, p.at = true, nil
	}
	return p.blackhole, p.latency
}

func (p *Proxy) track(c net.Conn) {
	p.mu.Lock()
	p.conns[c] = struct{}{}
	p.mu.Unlock()
}

func (p *Proxy) untrack(c net.Conn) {
	p.mu.Lock()
	delete(p.conns, c)
	p.mu.Unlock()
	c.Close()
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		client, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		target := p.target
		p.mu.Unlock()
		server, err := net.Dial("tcp", target)
		if err != nil {
			client.Close()
			continue
		}
		p.track(client)
		p.track(server)
		p.wg.Add(2)
		go p.pump(server, client, true)
		go p.pump(client, server, false)
	}
}

// pump copies src to dst, dropping data while blackholed; fromClient says
// src is the client. When src ends it closes dst, unless blackholed: a
// partitioned peer hears nothing, neither a close nor a reset (a server's
// wait_timeout may end its side with either). Only the proxy's own closes
// pass.
func (p *Proxy) pump(dst, src net.Conn, fromClient bool) {
	defer p.wg.Done()
	defer p.untrack(src)
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			blackhole, latency := p.state(buf[:n], fromClient)
			if latency > 0 {
				time.Sleep(latency)
			}
			if !blackhole {
				if _, werr := dst.Write(buf[:n]); werr != nil {
					return
				}
			}
		}
		if err != nil {
			p.mu.Lock()
			orphaned := p.blackhole && !errors.Is(err, net.ErrClosed)
			if orphaned {
				p.orphans[dst] = struct{}{}
			}
			p.mu.Unlock()
			if !orphaned {
				p.untrack(dst)
			}
			return
		}
	}
}

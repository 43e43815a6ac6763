// Package faultproxy is an in-process TCP proxy that injects network faults
// between a client and a server: a blackhole (the connections stay open and
// every byte is dropped, as on a partitioned link), a reset of every
// connection, and added latency.
package faultproxy

import (
	"errors"
	"io"
	"net"
	"sync"
	"time"
)

// Proxy forwards connections from its listener to a target address.
type Proxy struct {
	ln     net.Listener
	target string

	mu        sync.Mutex
	blackhole bool
	latency   time.Duration
	conns     map[net.Conn]struct{}
	wg        sync.WaitGroup
}

// Start listens on a free loopback port and forwards to target.
func Start(target string) (*Proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &Proxy{ln: ln, target: target, conns: make(map[net.Conn]struct{})}
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

// Addr is the address clients dial instead of the target.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Blackhole drops every byte in both directions from now on, on existing
// and new connections, without closing anything.
func (p *Proxy) Blackhole() { p.set(func() { p.blackhole = true }) }

// Restore ends a blackhole and removes added latency.
func (p *Proxy) Restore() { p.set(func() { p.blackhole, p.latency = false, 0 }) }

// Latency delays every chunk of data by d in each direction.
func (p *Proxy) Latency(d time.Duration) { p.set(func() { p.latency = d }) }

// Reset closes every open connection with a TCP RST on both sides.
func (p *Proxy) Reset() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for c := range p.conns {
		if tc, ok := c.(*net.TCPConn); ok {
			tc.SetLinger(0)
		}
		c.Close()
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

func (p *Proxy) state() (blackhole bool, latency time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
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
		server, err := net.Dial("tcp", p.target)
		if err != nil {
			client.Close()
			continue
		}
		p.track(client)
		p.track(server)
		p.wg.Add(2)
		go p.pump(server, client)
		go p.pump(client, server)
	}
}

// pump copies src to dst, dropping data while blackholed. When src ends it
// closes dst, unless blackholed: a partitioned peer hears nothing.
func (p *Proxy) pump(dst, src net.Conn) {
	defer p.wg.Done()
	defer p.untrack(src)
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			blackhole, latency := p.state()
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
			if blackhole, _ := p.state(); !blackhole || !errors.Is(err, io.EOF) {
				p.untrack(dst)
			}
			return
		}
	}
}

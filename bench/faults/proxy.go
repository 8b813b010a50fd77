// Package faults puts small TCP proxies on loopback between the parts of a
// run (a shard and etcd, the shards and the kube-apiserver) that drop,
// stall, delay and reset connections on command, so a harness can cut a
// shard off while it keeps running. No root, no network namespaces: each
// part is pointed at a proxy's address instead of the real one.
package faults

import (
	"errors"
	"io"
	"net"
	"sync"
	"time"
)

// Proxy forwards every connection accepted on its address to a target
// address, byte for byte, and misbehaves on command. Safe for concurrent
// use; its methods never block on the connections.
type Proxy struct {
	target string
	ln     net.Listener

	mu sync.Mutex // guards the fields below
	// delay is added before each chunk is forwarded, both ways.
	delay time.Duration
	// stalled: no byte moves (both ways) until Resume; connections stay
	// open, as behind a stalled peer or a full network.
	stalled bool
	resume  chan struct{} // closed by Resume
	// blackhole: new connections are accepted and then neither forwarded
	// nor answered (a partition: the peer looks dead, not refusing).
	blackhole bool
	conns     map[net.Conn]struct{}
	closed    bool

	wg sync.WaitGroup
}

// Listen starts a proxy on 127.0.0.1 (a free port) forwarding to target.
func Listen(target string) (*Proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &Proxy{target: target, ln: ln, conns: map[net.Conn]struct{}{}, resume: make(chan struct{})}
	close(p.resume)
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

// Addr is the address to dial instead of the target.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// SetDelay adds d before every chunk forwarded from now on (0: none).
func (p *Proxy) SetDelay(d time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.delay = d
}

// Stall stops every byte, both ways, on every connection until Resume.
func (p *Proxy) Stall() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.stalled {
		p.stalled, p.resume = true, make(chan struct{})
	}
}

// Resume lets bytes move again after Stall.
func (p *Proxy) Resume() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.stalled {
		p.stalled = false
		close(p.resume)
	}
}

// Blackhole makes new connections hang (accepted, never forwarded) while
// on, and cuts the open ones as Reset does when turned on.
func (p *Proxy) Blackhole(on bool) {
	p.mu.Lock()
	p.blackhole = on
	p.mu.Unlock()
	if on {
		p.Reset()
	}
}

// Reset closes every open connection at once, with a TCP reset where the
// system allows (no lingering): both sides see the connection die.
func (p *Proxy) Reset() {
	p.mu.Lock()
	conns := make([]net.Conn, 0, len(p.conns))
	for c := range p.conns {
		conns = append(conns, c)
	}
	p.mu.Unlock()
	for _, c := range conns {
		if tc, ok := c.(*net.TCPConn); ok {
			_ = tc.SetLinger(0)
		}
		_ = c.Close()
	}
}

// Close stops accepting, closes every connection and waits for the
// forwarding goroutines to end.
func (p *Proxy) Close() error {
	p.mu.Lock()
	p.closed = true
	if p.stalled {
		p.stalled = false
		close(p.resume)
	}
	p.mu.Unlock()
	err := p.ln.Close()
	p.Reset()
	p.wg.Wait()
	return err
}

func (p *Proxy) track(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return false
	}
	p.conns[c] = struct{}{}
	return true
}

func (p *Proxy) untrack(c net.Conn) {
	p.mu.Lock()
	delete(p.conns, c)
	p.mu.Unlock()
	_ = c.Close()
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		in, err := p.ln.Accept()
		if err != nil {
			return
		}
		if !p.track(in) {
			_ = in.Close()
			return
		}
		p.mu.Lock()
		hole := p.blackhole
		p.mu.Unlock()
		p.wg.Add(1)
		if hole {
			// Held open and read into nothing until reset or closed.
			go func() {
				defer p.wg.Done()
				defer p.untrack(in)
				_, _ = io.Copy(io.Discard, in)
			}()
			continue
		}
		go p.serve(in)
	}
}

func (p *Proxy) serve(in net.Conn) {
	defer p.wg.Done()
	defer p.untrack(in)
	out, err := net.DialTimeout("tcp", p.target, 5*time.Second)
	if err != nil {
		return
	}
	if !p.track(out) {
		_ = out.Close()
		return
	}
	defer p.untrack(out)
	done := make(chan struct{}, 2)
	go func() { p.pipe(out, in); done <- struct{}{} }()
	go func() { p.pipe(in, out); done <- struct{}{} }()
	<-done
	<-done
}

// pipe copies src to dst chunk by chunk, waiting out stalls and delays.
func (p *Proxy) pipe(dst, src net.Conn) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			if !p.wait() {
				_ = src.Close()
				_ = dst.Close()
				return
			}
			if _, werr := dst.Write(buf[:n]); werr != nil {
				_ = src.Close()
				_ = dst.Close()
				return
			}
		}
		if err != nil {
			// A clean end is passed on as a half-close; anything else
			// (a reset, a close by Reset) ends both sides.
			if tc, ok := dst.(*net.TCPConn); ok && errors.Is(err, io.EOF) {
				_ = tc.CloseWrite()
				return
			}
			_ = src.Close()
			_ = dst.Close()
			return
		}
	}
}

// wait holds a chunk while the proxy is stalled, then for the delay; it
// reports false once the proxy is closed.
func (p *Proxy) wait() bool {
	for {
		p.mu.Lock()
		stalled, resume, delay, closed := p.stalled, p.resume, p.delay, p.closed
		p.mu.Unlock()
		if closed {
			return false
		}
		if stalled {
			<-resume
			continue
		}
		if delay > 0 {
			time.Sleep(delay)
		}
		return true
	}
}

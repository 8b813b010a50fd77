package faults

import (
	"errors"
	"fmt"
	"net"
	"sync"
)

// Relay forwards every UDP datagram it receives to a target address and
// drops them on command: all of them (the target cut off from everyone)
// or only those from chosen senders (the target cut off from one peer).
// The datagrams leave from a socket of the relay's own, so the target
// sees the relay as their source: a protocol that answers to the source
// address (rather than to an address carried in the message, as memberlist
// does) would need its answers relayed back, which Relay does not do.
// Safe for concurrent use.
type Relay struct {
	in, out *net.UDPConn
	target  *net.UDPAddr

	mu       sync.Mutex // guards the fields below
	drop     bool
	dropFrom map[string]bool // sender address (ip:port) → its datagrams are dropped

	wg sync.WaitGroup
}

// ListenRelay starts a relay on addr (an ip:port; port 0 picks one)
// forwarding to target.
func ListenRelay(addr, target string) (*Relay, error) {
	ta, err := net.ResolveUDPAddr("udp", target)
	if err != nil {
		return nil, fmt.Errorf("relay target %q: %w", target, err)
	}
	la, err := net.ResolveUDPAddr("udp", addr)
	if err != nil {
		return nil, fmt.Errorf("relay address %q: %w", addr, err)
	}
	in, err := net.ListenUDP("udp", la)
	if err != nil {
		return nil, err
	}
	out, err := net.ListenUDP("udp", &net.UDPAddr{IP: la.IP})
	if err != nil {
		_ = in.Close()
		return nil, err
	}
	r := &Relay{in: in, out: out, target: ta, dropFrom: map[string]bool{}}
	r.wg.Add(1)
	go r.forward()
	return r, nil
}

// Addr is the address to send to instead of the target.
func (r *Relay) Addr() string { return r.in.LocalAddr().String() }

// Drop drops every datagram while on.
func (r *Relay) Drop(on bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.drop = on
}

// DropFrom drops the datagrams sent from src (ip:port) while on.
func (r *Relay) DropFrom(src string, on bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if on {
		r.dropFrom[src] = true
	} else {
		delete(r.dropFrom, src)
	}
}

// Close stops the relay and waits for its goroutine to end.
func (r *Relay) Close() error {
	err := errors.Join(r.in.Close(), r.out.Close())
	r.wg.Wait()
	return err
}

func (r *Relay) dropped(src *net.UDPAddr) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.drop || r.dropFrom[src.String()]
}

func (r *Relay) forward() {
	defer r.wg.Done()
	buf := make([]byte, 64<<10)
	for {
		n, src, err := r.in.ReadFromUDP(buf)
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			continue // a transient read error (e.g. an ICMP refusal) on one datagram
		}
		if r.dropped(src) {
			continue
		}
		// A datagram the target does not take is lost, as on a network.
		_, _ = r.out.WriteToUDP(buf[:n], r.target)
	}
}

// Gossip is a memberlist member's stand-in address: a TCP Proxy and a UDP
// Relay on the same port, both forwarding to the member's real gossip
// port. The member advertises the stand-in's address, so everything the
// other members send it passes through here.
type Gossip struct {
	TCP *Proxy
	UDP *Relay
}

// ListenGossip starts a stand-in for the member gossiping on target.
func ListenGossip(target string) (*Gossip, error) {
	var last error
	for range 10 {
		p, err := Listen(target)
		if err != nil {
			return nil, err
		}
		// The UDP port of the same number may be taken: try another.
		r, err := ListenRelay(p.Addr(), target)
		if err == nil {
			return &Gossip{TCP: p, UDP: r}, nil
		}
		last = err
		_ = p.Close()
	}
	return nil, fmt.Errorf("no port free for both TCP and UDP: %w", last)
}

// Addr is the stand-in's address (the same for TCP and UDP).
func (g *Gossip) Addr() string { return g.TCP.Addr() }

// Cut stops (on) or lets through again (off) everything sent to the
// member: new TCP connections hang, open ones are reset, datagrams are
// dropped.
func (g *Gossip) Cut(on bool) {
	g.TCP.Blackhole(on)
	g.UDP.Drop(on)
}

// Close closes both halves.
func (g *Gossip) Close() error { return errors.Join(g.TCP.Close(), g.UDP.Close()) }

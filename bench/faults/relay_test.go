package faults

import (
	"net"
	"testing"
	"time"
)

// udpSink listens on loopback and hands every datagram it gets to the test.
func udpSink(t *testing.T) (*net.UDPConn, <-chan string) {
	t.Helper()
	c, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan string, 64)
	done := make(chan struct{})
	go func() {
		defer close(done)
		buf := make([]byte, 1500)
		for {
			n, _, err := c.ReadFromUDP(buf)
			if err != nil {
				return
			}
			got <- string(buf[:n])
		}
	}()
	t.Cleanup(func() { _ = c.Close(); <-done })
	return c, got
}

func sender(t *testing.T) *net.UDPConn {
	t.Helper()
	c, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// delivered sends msg from c to addr until it arrives (UDP may drop one
// on a busy machine) or d passes; it reports whether it arrived.
func delivered(t *testing.T, c *net.UDPConn, addr string, msg string, got <-chan string, d time.Duration) bool {
	t.Helper()
	ua, err := net.ResolveUDPAddr("udp", addr)
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.After(d)
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		if _, err := c.WriteToUDP([]byte(msg), ua); err != nil {
			t.Fatal(err)
		}
		select {
		case m := <-got:
			if m == msg {
				return true
			}
		case <-tick.C:
		case <-deadline:
			return false
		}
	}
}

// Datagrams pass until dropped, all of them or one sender's; the others
// still pass, and everything passes again once the drop is lifted.
func TestRelayDrops(t *testing.T) {
	sink, got := udpSink(t)
	r, err := ListenRelay("127.0.0.1:0", sink.LocalAddr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r.Close() })
	a, b := sender(t), sender(t)
	if !delivered(t, a, r.Addr(), "a1", got, 5*time.Second) {
		t.Fatal("a datagram did not pass an open relay")
	}
	r.DropFrom(a.LocalAddr().String(), true)
	if delivered(t, a, r.Addr(), "a2", got, 500*time.Millisecond) {
		t.Fatal("a datagram from a dropped sender passed")
	}
	if !delivered(t, b, r.Addr(), "b1", got, 5*time.Second) {
		t.Fatal("another sender's datagram was dropped")
	}
	r.DropFrom(a.LocalAddr().String(), false)
	r.Drop(true)
	if delivered(t, b, r.Addr(), "b2", got, 500*time.Millisecond) {
		t.Fatal("a datagram passed a relay that drops everything")
	}
	r.Drop(false)
	if !delivered(t, a, r.Addr(), "a3", got, 5*time.Second) {
		t.Fatal("a datagram did not pass once the drop was lifted")
	}
}

// A gossip stand-in answers TCP and UDP on one port; Cut stops both.
func TestGossipCut(t *testing.T) {
	sink, got := udpSink(t)
	// The TCP half needs a target too: an echo server on the sink's port
	// number is not guaranteed free, so the TCP half is checked against
	// its own echo server through a second stand-in.
	g, err := ListenGossip(sink.LocalAddr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = g.Close() })
	if g.TCP.Addr() != g.UDP.Addr() {
		t.Fatalf("TCP on %s, UDP on %s: want one port", g.TCP.Addr(), g.UDP.Addr())
	}
	s := sender(t)
	if !delivered(t, s, g.Addr(), "x1", got, 5*time.Second) {
		t.Fatal("a datagram did not pass the stand-in")
	}
	g.Cut(true)
	if delivered(t, s, g.Addr(), "x2", got, 500*time.Millisecond) {
		t.Fatal("a datagram passed a cut stand-in")
	}
	e, err := ListenGossip(echo(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.Close() })
	c, r := dial(t, e.TCP)
	if err := roundTrip(c, r, 5*time.Second); err != nil {
		t.Fatalf("TCP through the stand-in: %v", err)
	}
	e.Cut(true)
	if err := roundTrip(c, r, 500*time.Millisecond); err == nil {
		t.Fatal("a TCP round trip passed a cut stand-in")
	}
	g.Cut(false)
	if !delivered(t, s, g.Addr(), "x3", got, 5*time.Second) {
		t.Fatal("a datagram did not pass once the cut was lifted")
	}
}

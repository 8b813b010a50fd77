package faults

import (
	"bufio"
	"errors"
	"io"
	"net"
	"os"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// echo serves lines back on loopback until the test ends.
func echo(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	conns := make(chan net.Conn, 16)
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			conns <- c
			go func() { _, _ = io.Copy(c, c); _ = c.Close() }()
		}
	}()
	t.Cleanup(func() {
		_ = ln.Close()
		<-done
		close(conns)
		for c := range conns {
			_ = c.Close()
		}
	})
	return ln.Addr().String()
}

func proxy(t *testing.T) *Proxy {
	t.Helper()
	p, err := Listen(echo(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close() })
	return p
}

// roundTrip sends a line and reads it back within d; it returns the error.
func roundTrip(c net.Conn, r *bufio.Reader, d time.Duration) error {
	if err := c.SetDeadline(time.Now().Add(d)); err != nil {
		return err
	}
	if _, err := c.Write([]byte("ping\n")); err != nil {
		return err
	}
	line, err := r.ReadString('\n')
	if err == nil && line != "ping\n" {
		return errors.New("echoed " + line)
	}
	return err
}

func dial(t *testing.T, p *Proxy) (net.Conn, *bufio.Reader) {
	t.Helper()
	c, err := net.DialTimeout("tcp", p.Addr(), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c, bufio.NewReader(c)
}

// Bytes pass through unchanged until told otherwise.
func TestProxyForwards(t *testing.T) {
	p := proxy(t)
	c, r := dial(t, p)
	for range 3 {
		if err := roundTrip(c, r, 5*time.Second); err != nil {
			t.Fatalf("through the proxy: %v", err)
		}
	}
}

// A stalled proxy moves no byte (the peer looks hung, the connection
// stays open); after Resume the same connection carries what was sent.
func TestProxyStallAndResume(t *testing.T) {
	p := proxy(t)
	c, r := dial(t, p)
	if err := roundTrip(c, r, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	p.Stall()
	if err := roundTrip(c, r, 300*time.Millisecond); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("round trip while stalled: %v, want a timeout", err)
	}
	p.Resume()
	// The stalled ping is echoed first, then a new one.
	if err := c.SetDeadline(time.Now().Add(5 * time.Second)); err != nil {
		t.Fatal(err)
	}
	if line, err := r.ReadString('\n'); err != nil || line != "ping\n" {
		t.Fatalf("after Resume: %q, %v; want the stalled ping", line, err)
	}
	if err := roundTrip(c, r, 5*time.Second); err != nil {
		t.Fatalf("after Resume: %v", err)
	}
}

// A delay holds every chunk at least that long (a lower bound only: the
// machine may add more).
func TestProxyDelay(t *testing.T) {
	p := proxy(t)
	c, r := dial(t, p)
	p.SetDelay(150 * time.Millisecond)
	t0 := time.Now()
	if err := roundTrip(c, r, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	if took := time.Since(t0); took < 300*time.Millisecond {
		t.Fatalf("round trip took %s with 150 ms each way, want at least 300 ms", took)
	}
}

// Reset kills open connections; new ones work.
func TestProxyReset(t *testing.T) {
	p := proxy(t)
	c, r := dial(t, p)
	if err := roundTrip(c, r, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	p.Reset()
	if err := roundTrip(c, r, 5*time.Second); err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("round trip on a reset connection: %v, want it dead (not hung)", err)
	}
	c2, r2 := dial(t, p)
	if err := roundTrip(c2, r2, 5*time.Second); err != nil {
		t.Fatalf("a new connection after Reset: %v", err)
	}
}

// A blackholed proxy accepts connections and answers nothing, and cuts
// the open ones; turned off, it forwards again.
func TestProxyBlackhole(t *testing.T) {
	p := proxy(t)
	c, r := dial(t, p)
	if err := roundTrip(c, r, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	p.Blackhole(true)
	if err := roundTrip(c, r, 5*time.Second); err == nil {
		t.Fatal("an open connection survived the blackhole")
	}
	c2, r2 := dial(t, p)
	if err := roundTrip(c2, r2, 300*time.Millisecond); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("round trip into the blackhole: %v, want a timeout", err)
	}
	p.Blackhole(false)
	c3, r3 := dial(t, p)
	if err := roundTrip(c3, r3, 5*time.Second); err != nil {
		t.Fatalf("after the blackhole: %v", err)
	}
}

package testenv

import (
	"bufio"
	"net"
	"strings"
	"testing"
	"time"
)

// pingOn sends PING on an open connection and waits up to timeout for +PONG.
func pingOn(conn net.Conn, r *bufio.Reader, timeout time.Duration) error {
	if err := conn.SetDeadline(time.Now().Add(timeout)); err != nil {
		return err
	}
	if _, err := conn.Write([]byte("PING\r\n")); err != nil {
		return err
	}
	line, err := r.ReadString('\n')
	if err != nil {
		return err
	}
	if !strings.HasPrefix(line, "+PONG") {
		return &net.OpError{Op: "ping", Err: net.UnknownNetworkError(line)}
	}
	return nil
}

func TestProxyForwards(t *testing.T) {
	r := NewRedis(t)
	p := NewProxy(t, r.Addr())
	if err := ping(p.Addr(), time.Second); err != nil {
		t.Fatalf("PING through proxy: %v", err)
	}
}

// TestProxyBlackhole: while blackholed nothing is answered; afterwards a new
// connection works.
func TestProxyBlackhole(t *testing.T) {
	r := NewRedis(t)
	p := NewProxy(t, r.Addr())

	p.Blackhole(true)
	if err := ping(p.Addr(), 200*time.Millisecond); !isTimeout(err) {
		t.Fatalf("PING while blackholed: got %v, want timeout", err)
	}
	p.Blackhole(false)
	if err := ping(p.Addr(), time.Second); err != nil {
		t.Fatalf("PING on a new connection after blackhole: %v", err)
	}
}

// TestProxyReset: a client on a reset connection gets a read error, not a
// timeout.
func TestProxyReset(t *testing.T) {
	r := NewRedis(t)
	p := NewProxy(t, r.Addr())

	conn, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatalf("dial proxy: %v", err)
	}
	defer conn.Close()
	br := bufio.NewReader(conn)
	if err := pingOn(conn, br, time.Second); err != nil {
		t.Fatalf("PING before Reset: %v", err)
	}
	p.Reset()
	if err := conn.SetReadDeadline(time.Now().Add(2 * time.Second)); err != nil {
		t.Fatal(err)
	}
	_, err = br.ReadByte()
	if err == nil || isTimeout(err) {
		t.Fatalf("read after Reset: got %v, want a connection error", err)
	}
	if err := ping(p.Addr(), time.Second); err != nil {
		t.Fatalf("PING on a new connection after Reset: %v", err)
	}
}

// TestProxyLatency: a round trip takes at least the one-way latency twice.
// Only the lower bound is asserted; CI machines are slow.
func TestProxyLatency(t *testing.T) {
	r := NewRedis(t)
	p := NewProxy(t, r.Addr())
	const latency = 50 * time.Millisecond
	p.SetLatency(latency)

	conn, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatalf("dial proxy: %v", err)
	}
	defer conn.Close()
	start := time.Now()
	if err := pingOn(conn, bufio.NewReader(conn), 5*time.Second); err != nil {
		t.Fatalf("PING with latency: %v", err)
	}
	if rtt := time.Since(start); rtt < 2*latency {
		t.Fatalf("round trip %v, want >= %v", rtt, 2*latency)
	}
}

// TestProxyHold: what is sent while the hold is on is neither answered nor
// lost; turning it off delivers it, in order.
func TestProxyHold(t *testing.T) {
	r := NewRedis(t)
	p := NewProxy(t, r.Addr())
	conn, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatalf("dial proxy: %v", err)
	}
	defer conn.Close()
	br := bufio.NewReader(conn)
	if err := pingOn(conn, br, 5*time.Second); err != nil {
		t.Fatalf("PING before Hold: %v", err)
	}
	p.Hold(true)
	for _, cmd := range []string{"ECHO first\r\n", "ECHO second\r\n"} {
		if _, err := conn.Write([]byte(cmd)); err != nil {
			t.Fatal(err)
		}
	}
	if err := conn.SetReadDeadline(time.Now().Add(200 * time.Millisecond)); err != nil {
		t.Fatal(err)
	}
	if _, err := br.ReadByte(); !isTimeout(err) {
		t.Fatalf("read while held: got %v, want timeout", err)
	}
	p.Hold(false)
	if err := conn.SetReadDeadline(time.Now().Add(5 * time.Second)); err != nil {
		t.Fatal(err)
	}
	var got []string
	for len(got) < 4 {
		line, err := br.ReadString('\n')
		if err != nil {
			t.Fatalf("read after Hold(false), having read %q: %v", got, err)
		}
		got = append(got, strings.TrimRight(line, "\r\n"))
	}
	if want := []string{"$5", "first", "$6", "second"}; strings.Join(got, " ") != strings.Join(want, " ") {
		t.Fatalf("after Hold(false): got %q, want %q", got, want)
	}
}

// TestProxyCloseInterruptsLatency: Close returns promptly even while chunks
// are waiting out a long latency, and leaves no goroutines (see TestMain).
func TestProxyCloseInterruptsLatency(t *testing.T) {
	r := NewRedis(t)
	p, err := StartProxy(r.Addr())
	if err != nil {
		t.Fatalf("StartProxy: %v", err)
	}
	p.SetLatency(time.Hour)
	conn, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatalf("dial proxy: %v", err)
	}
	defer conn.Close()
	if _, err := conn.Write([]byte("PING\r\n")); err != nil {
		t.Fatal(err)
	}
	time.Sleep(50 * time.Millisecond) // let the proxy read the chunk and start waiting
	done := make(chan error, 1)
	go func() { done <- p.Close() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Close: %v", err)
		}
	case <-time.After(15 * time.Second): // the latency is an hour
		t.Fatalf("Close blocked behind latency")
	}
	if err := p.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
}

// TestProxyDropNextReply: the command reaches the server and runs, its reply
// never reaches the client, and a new connection is answered as usual.
func TestProxyDropNextReply(t *testing.T) {
	r := NewRedis(t)
	p := NewProxy(t, r.Addr())

	conn, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatalf("dial proxy: %v", err)
	}
	defer conn.Close()
	br := bufio.NewReader(conn)
	if err := pingOn(conn, br, time.Second); err != nil {
		t.Fatalf("PING before DropNextReply: %v", err)
	}
	dropped := p.DropNextReply()
	if _, err := conn.Write([]byte("SET dropped 1\r\n")); err != nil {
		t.Fatal(err)
	}
	select {
	case <-dropped:
	case <-time.After(10 * time.Second):
		t.Fatal("no reply was dropped")
	}
	if err := pingOn(conn, br, 200*time.Millisecond); !isTimeout(err) {
		t.Fatalf("PING on the connection whose reply was dropped: got %v, want timeout", err)
	}

	// The SET ran: a new connection sees its value.
	conn2, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatalf("dial proxy: %v", err)
	}
	defer conn2.Close()
	if err := conn2.SetDeadline(time.Now().Add(5 * time.Second)); err != nil {
		t.Fatal(err)
	}
	if _, err := conn2.Write([]byte("GET dropped\r\n")); err != nil {
		t.Fatal(err)
	}
	br2 := bufio.NewReader(conn2)
	for _, want := range []string{"$1", "1"} {
		line, err := br2.ReadString('\n')
		if err != nil || strings.TrimSpace(line) != want {
			t.Fatalf("GET after the dropped SET: line %q, err %v, want %q", line, err, want)
		}
	}
}

// TestProxyHalfOpen: an open connection goes silent (a timeout, not a reset
// or EOF), while a new connection is answered.
func TestProxyHalfOpen(t *testing.T) {
	r := NewRedis(t)
	p := NewProxy(t, r.Addr())

	conn, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	br := bufio.NewReader(conn)
	if err := pingOn(conn, br, time.Second); err != nil {
		t.Fatalf("PING before: %v", err)
	}
	p.HalfOpen()
	if err := pingOn(conn, br, 200*time.Millisecond); !isTimeout(err) {
		t.Fatalf("PING on the half-open connection: got %v, want timeout", err)
	}
	if err := ping(p.Addr(), time.Second); err != nil {
		t.Fatalf("PING on a new connection: %v", err)
	}
}

package testenv

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

const proxyDialTimeout = 5 * time.Second

// Proxy is a TCP fault proxy between clients and one server. Clients dial
// Addr; each accepted connection gets its own connection to the target. Its
// methods are safe for concurrent use.
type Proxy struct {
	target string
	ln     net.Listener

	latency   atomic.Int64 // time.Duration
	blackhole atomic.Bool
	dropNext  atomic.Pointer[chan struct{}] // armed by DropNextReply
	holdMu    sync.Mutex                    // serialises Hold
	held      atomic.Pointer[chan struct{}] // while Hold is on: closed when it goes off

	ctx       context.Context // cancelled by Close; bounds dials and latency waits
	cancel    context.CancelFunc
	closeOnce sync.Once
	wg        sync.WaitGroup

	mu     sync.Mutex
	conns  map[*proxyConn]struct{}
	closed bool
}

// proxyConn is one client connection and its upstream connection.
type proxyConn struct {
	client, server net.Conn
	silent         atomic.Bool // HalfOpen: drop everything, close nothing
}

// NewProxy starts a Proxy to target for the test and closes it when the test
// ends. It fails the test if the proxy cannot listen.
func NewProxy(t testing.TB, target string) *Proxy {
	t.Helper()
	p, err := StartProxy(target)
	if err != nil {
		t.Fatalf("testenv: start proxy to %s: %v", target, err)
	}
	t.Cleanup(func() {
		if err := p.Close(); err != nil {
			t.Errorf("testenv: close proxy: %v", err)
		}
	})
	return p
}

// StartProxy starts a Proxy to target listening on a free 127.0.0.1 port.
// The caller must Close it. The target is dialled per client connection, so
// it need not be up yet.
func StartProxy(target string) (*Proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("testenv: proxy listen: %w", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	p := &Proxy{
		target: target,
		ln:     ln,
		ctx:    ctx,
		cancel: cancel,
		conns:  make(map[*proxyConn]struct{}),
	}
	p.wg.Add(1)
	go p.acceptLoop()
	return p, nil
}

// Addr returns the address clients dial, "127.0.0.1:PORT".
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// SetLatency delays every chunk forwarded, in both directions, by d before
// it is written on. Chunks on one connection are delayed one after another,
// so the proxy also lowers throughput. Zero or negative turns it off.
func (p *Proxy) SetLatency(d time.Duration) { p.latency.Store(int64(d)) }

// Blackhole, while on, reads and silently drops bytes in both directions;
// new connections are accepted but nothing is forwarded. Turning it off
// resumes forwarding of data read from then on; dropped data stays dropped.
func (p *Proxy) Blackhole(on bool) { p.blackhole.Store(on) }

// Hold, while on, keeps every chunk read in either direction instead of
// forwarding it: what is sent meanwhile is in flight, neither lost nor
// delivered (a stalled link or peer). Turning it off forwards what was kept,
// in order, then everything after it as usual. Unlike SetLatency, it leaves
// how long a message stays in flight to the caller, who can deliver it after
// an event instead of after a duration; unlike a half-open connection, the
// client's own health checks go unanswered only for as long as it is on.
func (p *Proxy) Hold(on bool) {
	p.holdMu.Lock()
	defer p.holdMu.Unlock()
	switch cur := p.held.Load(); {
	case on && cur == nil:
		ch := make(chan struct{})
		p.held.Store(&ch)
	case !on && cur != nil:
		p.held.Store(nil)
		close(*cur)
	}
}

// DropNextReply arms the proxy to drop the next bytes any server sends to a
// client, and everything after them on that connection: the request reached
// the server and ran, but its client never sees the answer (a reply lost
// after the command ran, which clients retry on another connection). The
// client's read times out; other connections, and connections made
// afterwards, are forwarded as usual. It arms once; the returned channel is
// closed when a reply has been dropped.
func (p *Proxy) DropNextReply() <-chan struct{} {
	ch := make(chan struct{})
	p.dropNext.Store(&ch)
	return ch
}

// HalfOpen makes every current connection half-open, as when the peer
// vanished without a reset (a host that lost power, a NAT or firewall that
// dropped the flow): nothing is closed, and from now on everything sent on
// those connections in either direction is silently dropped. Clients see
// requests that are never answered until their own timeouts (or TCP
// keepalive) give up. Connections made afterwards are forwarded as usual.
func (p *Proxy) HalfOpen() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for c := range p.conns {
		c.silent.Store(true)
	}
}

// Reset closes every current connection, on both sides, with a TCP RST.
// Clients see "connection reset"; new connections are proxied as usual.
func (p *Proxy) Reset() {
	p.mu.Lock()
	conns := make([]*proxyConn, 0, len(p.conns))
	for c := range p.conns {
		conns = append(conns, c)
	}
	p.mu.Unlock()
	for _, c := range conns {
		c.reset()
	}
}

// Close stops listening, closes every connection and waits until all of the
// proxy's goroutines have exited. It is idempotent.
func (p *Proxy) Close() error {
	var err error
	p.closeOnce.Do(func() {
		p.cancel()
		err = p.ln.Close()
		p.mu.Lock()
		p.closed = true
		conns := p.conns
		p.conns = nil
		p.mu.Unlock()
		for c := range conns {
			c.close()
		}
	})
	p.wg.Wait()
	if err != nil && !errors.Is(err, net.ErrClosed) {
		return fmt.Errorf("testenv: close proxy: %w", err)
	}
	return nil
}

func (p *Proxy) acceptLoop() {
	defer p.wg.Done()
	for {
		client, err := p.ln.Accept()
		if err != nil {
			if p.ctx.Err() != nil || errors.Is(err, net.ErrClosed) {
				return
			}
			// Transient (for example EMFILE): back off instead of spinning.
			select {
			case <-p.ctx.Done():
				return
			case <-time.After(10 * time.Millisecond):
			}
			continue
		}
		p.wg.Add(1)
		go p.handle(client)
	}
}

// handle dials the target for one client and copies in both directions: the
// upstream direction on a second goroutine, the downstream one here.
func (p *Proxy) handle(client net.Conn) {
	defer p.wg.Done()
	ctx, cancel := context.WithTimeout(p.ctx, proxyDialTimeout)
	var d net.Dialer
	server, err := d.DialContext(ctx, "tcp", p.target)
	cancel()
	if err != nil {
		closeRST(client)
		return
	}
	c := &proxyConn{client: client, server: server}
	if !p.track(c) {
		c.close()
		return
	}
	defer p.untrack(c)

	p.wg.Add(1)
	upDone := make(chan struct{})
	go func() {
		defer p.wg.Done()
		defer close(upDone)
		p.pipe(c, server, client, false)
	}()
	p.pipe(c, client, server, true)
	<-upDone
	c.close()
}

func (p *Proxy) track(c *proxyConn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return false
	}
	p.conns[c] = struct{}{}
	return true
}

func (p *Proxy) untrack(c *proxyConn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.conns != nil {
		delete(p.conns, c)
	}
}

// pipe copies src to dst until src ends or either side fails, applying the
// proxy's latency, Hold, blackhole, c's HalfOpen and, on the
// server-to-client direction (reply), DropNextReply. A clean EOF is passed on as a half-close
// so request/response protocols that shut down writing still get their
// answer; a half-open connection passes nothing on, not even that.
func (p *Proxy) pipe(c *proxyConn, dst, src net.Conn, reply bool) {
	buf := make([]byte, 32*1024)
	deaf := false // a reply was dropped: the rest of this stream is too
	for {
		n, err := src.Read(buf)
		if n > 0 {
			if reply && !deaf {
				if ch := p.dropNext.Swap(nil); ch != nil {
					deaf = true
					close(*ch)
				}
			}
			drop := deaf || p.blackhole.Load() || c.silent.Load()
			if d := time.Duration(p.latency.Load()); d > 0 && !drop {
				if !p.wait(d) {
					return
				}
			}
			if held := p.held.Load(); held != nil && !drop {
				select {
				case <-*held:
				case <-p.ctx.Done():
					return
				}
			}
			if !drop {
				if _, werr := dst.Write(buf[:n]); werr != nil {
					_ = src.Close()
					return
				}
			}
		}
		if err != nil {
			if c.silent.Load() {
				// The client must not learn that the server went away; once
				// the client itself gives up, the server side can go.
				if !reply {
					_ = dst.Close()
				}
				return
			}
			if errors.Is(err, io.EOF) {
				if tc, ok := dst.(*net.TCPConn); ok {
					_ = tc.CloseWrite()
					return
				}
			}
			_ = dst.Close()
			return
		}
	}
}

// wait sleeps for d unless the proxy is closed first; it reports whether the
// full delay passed.
func (p *Proxy) wait(d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-p.ctx.Done():
		return false
	}
}

func (c *proxyConn) close() {
	_ = c.client.Close()
	_ = c.server.Close()
}

func (c *proxyConn) reset() {
	closeRST(c.client)
	closeRST(c.server)
}

// closeRST closes conn so that the peer gets a TCP RST instead of a FIN.
func closeRST(conn net.Conn) {
	if tc, ok := conn.(*net.TCPConn); ok {
		_ = tc.SetLinger(0)
	}
	_ = conn.Close()
}

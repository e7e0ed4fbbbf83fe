package testenv

import (
	"crypto/tls"
	"errors"
	"fmt"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.etcd.io/etcd/client/pkg/v3/transport"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"google.golang.org/grpc"
)

const (
	etcdReadyTimeout = 20 * time.Second
	etcdStartTries   = 5
)

// Etcd is one embedded etcd member (go.etcd.io/etcd/server/v3/embed, the
// same version as the client) listening on 127.0.0.1 on ports of its own,
// with its data in a temporary directory. It is either a single-member
// cluster (NewEtcd) or one member of an EtcdCluster. Its methods are safe for
// concurrent use.
//
// The member runs with fsync disabled (test data only) and logs at level
// error, so test output stays readable.
type Etcd struct {
	name       string
	dir        string
	clientURL  url.URL
	peerURL    url.URL
	advPeerURL url.URL // what peers dial: peerURL, or a Proxy in front of it
	cluster    string  // initial-cluster
	token      string
	tickMs     uint
	electionMs uint
	certs      *Certs // client-certificate TLS on the client URL (WithEtcdClientCertTLS)
	// rootPassword is root's password once WithEtcdUser turned auth on.
	rootPassword string

	mu       sync.Mutex
	e        *embed.Etcd  // nil while stopped
	stopping *atomic.Bool // set by Stop: the running server's logger drops its shutdown errors
	grpc     *grpcServers // the running server's client gRPC servers, stopped hard by Stop
	closed   bool
	hold     *portHold // the ports while stopped, until Restart or Close

	// pause waits between two of Restart's tries (nil: time.Sleep); a
	// test seam, to look at the ports between tries.
	pause func(time.Duration)
}

// NewEtcd starts a single-member etcd for the test and stops it, removing
// its directory, when the test ends. It fails the test if etcd cannot start.
func NewEtcd(t testing.TB, opts ...EtcdOption) *Etcd {
	t.Helper()
	e, err := StartEtcd(opts...)
	if err != nil {
		t.Fatalf("testenv: start etcd: %v", err)
	}
	t.Cleanup(e.Close)
	return e
}

// StartEtcd starts a single-member etcd on free loopback ports. The caller
// must Close it. A port taken between choosing and binding is retried with
// fresh ports.
func StartEtcd(opts ...EtcdOption) (*Etcd, error) {
	var cfg etcdConfig
	for _, o := range opts {
		if o != nil {
			o.apply(&cfg)
		}
	}
	var last error
	for range etcdStartTries {
		m, err := newEtcdMember("single", "", 50, 500)
		if err != nil {
			return nil, err
		}
		if err := m.secure(cfg); err != nil {
			m.Close()
			return nil, err
		}
		m.cluster = m.name + "=" + m.peerURL.String()
		m.mu.Lock()
		err = m.startLocked()
		m.mu.Unlock()
		if err == nil {
			err = m.waitReady(etcdReadyTimeout)
		}
		if err == nil {
			if err = m.enableAuth(cfg); err != nil {
				m.Close()
				return nil, err
			}
			return m, nil
		}
		m.Close()
		last = err
	}
	return nil, fmt.Errorf("testenv: etcd did not start after %d tries: %w", etcdStartTries, last)
}

// newEtcdMember chooses ports and a directory; it starts nothing.
func newEtcdMember(name, token string, tickMs, electionMs uint) (*Etcd, error) {
	cport, err := FreePort()
	if err != nil {
		return nil, err
	}
	pport, err := FreePort()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "lockgov-etcd-"+name+"-")
	if err != nil {
		return nil, fmt.Errorf("testenv: etcd dir: %w", err)
	}
	if token == "" {
		token = "lockgov-test-" + strconv.Itoa(cport)
	}
	return &Etcd{
		name:       name,
		dir:        dir,
		clientURL:  url.URL{Scheme: "http", Host: "127.0.0.1:" + strconv.Itoa(cport)},
		peerURL:    url.URL{Scheme: "http", Host: "127.0.0.1:" + strconv.Itoa(pport)},
		token:      token,
		tickMs:     tickMs,
		electionMs: electionMs,
	}, nil
}

// startLocked starts the embedded server without waiting for it to be ready
// (a cluster member is ready only once a quorum runs). e.mu must be held.
func (e *Etcd) startLocked() error {
	if e.closed {
		return ErrClosed
	}
	if e.e != nil {
		return nil
	}
	e.hold.release()
	e.hold = nil
	cfg := embed.NewConfig()
	cfg.Name = e.name
	cfg.Dir = e.dir
	cfg.ListenClientUrls = []url.URL{e.clientURL}
	cfg.AdvertiseClientUrls = []url.URL{e.clientURL}
	cfg.ListenPeerUrls = []url.URL{e.peerURL}
	cfg.AdvertisePeerUrls = []url.URL{e.advertisedPeer()}
	cfg.InitialCluster = e.cluster
	cfg.InitialClusterToken = e.token
	cfg.ClusterState = embed.ClusterStateFlagNew // ignored once the data dir has a WAL
	cfg.TickMs = e.tickMs
	cfg.ElectionMs = e.electionMs
	cfg.UnsafeNoFsync = true
	cfg.BcryptCost = 4 // bcrypt.MinCost: test passwords, logins not seconds under -race
	cfg.Logger = "zap"
	cfg.LogLevel = "error"
	cfg.LogOutputs = []string{"stderr"}
	// Errors at error level go to stderr, except once Stop has begun: closing
	// its listeners makes etcd log "setting up serving from embedded etcd
	// failed" once per listener, which is the shutdown, not a failure.
	stopping := new(atomic.Bool)
	core := zapcore.NewCore(zapcore.NewJSONEncoder(zap.NewProductionEncoderConfig()), zapcore.Lock(os.Stderr), zapcore.ErrorLevel)
	cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(zap.New(untilStopped{Core: core, stopping: stopping}))
	// embed's Close stops its client gRPC servers gracefully: it waits for
	// every open stream (a watch, a lease keepalive) until etcd's request
	// timeout, 5 s plus two election timeouts, and serves them meanwhile.
	// Stop stops them hard first (see Stop), so it registers them here.
	servers := new(grpcServers)
	cfg.ServiceRegister = servers.add
	if e.certs != nil {
		cfg.ClientTLSInfo = transport.TLSInfo{
			CertFile:       e.certs.ServerCertFile,
			KeyFile:        e.certs.ServerKeyFile,
			TrustedCAFile:  e.certs.CAFile,
			ClientCertAuth: true,
		}
	}
	srv, err := embed.StartEtcd(cfg)
	if err != nil {
		return fmt.Errorf("testenv: etcd member %s: %w", e.name, err)
	}
	e.e, e.stopping, e.grpc = srv, stopping, servers
	return nil
}

// grpcServers are the client gRPC servers of one embedded etcd run.
type grpcServers struct {
	mu sync.Mutex
	s  []*grpc.Server
}

func (g *grpcServers) add(s *grpc.Server) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.s = append(g.s, s)
}

// stop closes every server's listeners and connections at once, ending
// their open streams, as a member that crashes does.
func (g *grpcServers) stop() {
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, s := range g.s {
		s.Stop()
	}
}

// untilStopped is a zap core that logs nothing once stopping is set.
type untilStopped struct {
	zapcore.Core
	stopping *atomic.Bool
}

func (c untilStopped) With(fields []zapcore.Field) zapcore.Core {
	return untilStopped{Core: c.Core.With(fields), stopping: c.stopping}
}

func (c untilStopped) Check(ent zapcore.Entry, ce *zapcore.CheckedEntry) *zapcore.CheckedEntry {
	if c.stopping.Load() {
		return ce
	}
	return c.Core.Check(ent, ce)
}

// advertisedPeer is the URL other members dial to reach this one.
func (e *Etcd) advertisedPeer() url.URL {
	if e.advPeerURL.Host != "" {
		return e.advPeerURL
	}
	return e.peerURL
}

// waitReady waits until the member serves client requests.
func (e *Etcd) waitReady(timeout time.Duration) error {
	e.mu.Lock()
	srv := e.e
	e.mu.Unlock()
	if srv == nil {
		return fmt.Errorf("testenv: etcd member %s is stopped", e.name)
	}
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case <-srv.Server.ReadyNotify():
		return nil
	case err := <-srv.Err():
		return fmt.Errorf("testenv: etcd member %s: %w", e.name, err)
	case <-t.C:
		return fmt.Errorf("testenv: etcd member %s not ready within %v", e.name, timeout)
	}
}

// Name returns the member name.
func (e *Etcd) Name() string { return e.name }

// Endpoint returns the client URL, "http://127.0.0.1:PORT". It stays the
// same across Stop and Restart.
func (e *Etcd) Endpoint() string { return e.clientURL.String() }

// Endpoints returns []string{e.Endpoint()}, for clientv3.Config.
func (e *Etcd) Endpoints() []string { return []string{e.Endpoint()} }

// Running reports whether the member is started.
func (e *Etcd) Running() bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.e != nil
}

// IsLeader reports whether the member is running and is the raft leader.
func (e *Etcd) IsLeader() bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.e != nil && e.e.Server.Leader() == e.e.Server.MemberID()
}

// HasLeader reports whether the member is running and knows a raft leader
// (itself or another member): a member without one answers no
// linearizable request, and etcd expires no lease.
func (e *Etcd) HasLeader() bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.e != nil && e.e.Server.Leader() != 0
}

// Stop shuts the member down, keeping its data directory and ports for
// Restart. Clients see their connections closed at once, open watches and
// lease keepalives included: the client gRPC servers are stopped hard
// before embed's Close, whose graceful stop would wait for open streams
// (and serve them) for etcd's request timeout, about 6 s, so that no
// outage a test makes could be shorter than a client's request timeout.
// It is a no-op when the member is already stopped.
func (e *Etcd) Stop() {
	e.mu.Lock()
	srv, stopping, servers := e.e, e.stopping, e.grpc
	e.e, e.grpc = nil, nil
	e.mu.Unlock()
	if srv != nil {
		stopping.Store(true)
		servers.stop()
		srv.Close()
		// Keep the ports for Restart (Redis.Kill says how): held from
		// here, not at the top, since the member listens until Close.
		e.mu.Lock()
		e.holdLocked()
		e.mu.Unlock()
	}
}

// holdLocked holds the ports of a member that is down (portHold), unless
// they are held already or the member is closed. e.mu must be held.
func (e *Etcd) holdLocked() {
	if !e.closed && e.e == nil && e.hold == nil {
		e.hold = holdPorts(urlPort(e.clientURL), urlPort(e.peerURL))
	}
}

func urlPort(u url.URL) int {
	p, _ := strconv.Atoi(u.Port())
	return p
}

// Restart starts a stopped member again on the same ports with the same
// data, and waits until it serves requests (for a cluster member: until it
// has rejoined a quorum). A start that fails, because a port is in use,
// is tried again after a pause; the ports are held again meanwhile, and
// after a Restart that fails, as after Stop: the member is down.
func (e *Etcd) Restart() error {
	var err error
	for i := range etcdStartTries {
		e.mu.Lock()
		if err = e.startLocked(); err != nil {
			// startLocked let the hold go for the server's bind; the
			// server is not running, so take it again.
			e.holdLocked()
		}
		e.mu.Unlock()
		if err == nil {
			return e.waitReady(etcdReadyTimeout)
		}
		if errors.Is(err, ErrClosed) || !strings.Contains(err.Error(), "address already in use") {
			return err
		}
		// The old listener's port is briefly unavailable; try again.
		pause := time.Sleep
		if e.pause != nil {
			pause = e.pause
		}
		pause(time.Duration(i+1) * 100 * time.Millisecond)
	}
	return err
}

// Close stops the member and removes its data directory. It is idempotent.
func (e *Etcd) Close() {
	e.Stop()
	e.mu.Lock()
	already := e.closed
	e.closed = true
	e.hold.release()
	e.hold = nil
	e.mu.Unlock()
	if !already {
		_ = os.RemoveAll(e.dir)
	}
}

// NewEtcdClient returns a client on endpoints that the test closes when it
// ends. Dials give up after 2 seconds; the client logs nothing.
func NewEtcdClient(t testing.TB, endpoints ...string) *clientv3.Client {
	t.Helper()
	c, err := clientv3.New(clientv3.Config{
		Endpoints:   endpoints,
		DialTimeout: 2 * time.Second,
		Logger:      zap.NewNop(),
	})
	if err != nil {
		t.Fatalf("testenv: etcd client for %v: %v", endpoints, err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// Client returns a client on this member that the test closes when it ends.
// Under WithEtcdClientCertTLS it presents the client certificate; under
// WithEtcdUser it logs in as root.
func (e *Etcd) Client(t testing.TB) *clientv3.Client {
	t.Helper()
	if e.certs != nil || e.rootPassword != "" {
		var tc *tls.Config
		if e.certs != nil {
			tc = e.certs.ClientTLS()
		}
		cfg := e.ClientConfig(tc)
		if e.rootPassword != "" {
			cfg.Username, cfg.Password = "root", e.rootPassword
		}
		c, err := clientv3.New(cfg)
		if err != nil {
			t.Fatalf("testenv: etcd client for %s: %v", e.Endpoint(), err)
		}
		t.Cleanup(func() { _ = c.Close() })
		return c
	}
	return NewEtcdClient(t, e.Endpoint())
}

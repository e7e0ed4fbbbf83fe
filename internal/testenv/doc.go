// Package testenv starts real servers for tests, on free loopback ports,
// and a TCP fault proxy to put between a client and a server:
//
//   - NewRedis: a private redis-server process (Debian's binary).
//   - NewRedisCluster: a Redis Cluster of n primaries (redis-cli --cluster create).
//   - NewSentinel: a primary, a replica and one Sentinel with short failover
//     timings; the replication stream runs through a Proxy (Link) so a test
//     can lose writes the way a failover does.
//   - NewEtcd, NewEtcdCluster: embedded etcd (go.etcd.io/etcd/server/v3/embed,
//     the client's version), one member or a cluster whose leader can be
//     stopped.
//   - NewPostgres: a private PostgreSQL cluster (initdb + pg_ctl as the
//     postgres OS user, in a temporary directory it owns).
//   - NewProxy: latency, hold (deliver later, when the test says),
//     blackhole (drop traffic) and reset between any client and any of the
//     above.
//   - Security: WithRedisTLS (TLS only, client certificates required) and
//     WithRedisACLUser (ACL users, default user off) for NewRedis;
//     WithEtcdClientCertTLS for NewEtcd; NewCerts generates the CA, server
//     and client certificates (crypto/x509) a test needs.
//
// Nothing here is a fake. Tests talk to the same server binaries that
// production runs, so Lua scripts, expiry, leases, watches and failure
// behaviour are real.
//
// testenv never uses a server that is already running. Every server gets its
// own port (chosen by the kernel, never 6379 or 5432 by default), its own
// temporary directory and no durability (Redis: --save "" --appendonly no;
// etcd: no fsync; PostgreSQL: fsync off), so a developer's local servers are
// never read, written or flushed.
//
// Typical use in a test:
//
//	r := testenv.NewRedis(t)                 // stopped and removed by t.Cleanup
//	p := testenv.NewProxy(t, r.Addr())       // clients dial p.Addr()
//	p.SetLatency(50 * time.Millisecond)
//	r.Kill()                                 // simulate a crash
//	r.Restart()                              // same port, empty data set
//
//	e := testenv.NewEtcd(t)
//	cli := e.Client(t)                       // closed by t.Cleanup
//
// Only tests import this package (it links the etcd server); instrument's
// layering test holds that no library does.
//
// # Installing the servers
//
// The redis-server binary is looked up on PATH, then at /usr/bin/redis-server;
// PostgreSQL's initdb under /usr/lib/postgresql/*/bin; etcd is compiled in.
// ./scripts/test installs what is missing; by hand on Debian or Ubuntu:
//
//	apt-get install -y redis-server postgresql
//
// The package only starts its own processes; it does not need the system
// service to run (it may be stopped or disabled).
//
// # Failure modes
//
// StartRedis fails with ErrRedisNotInstalled when no binary is found, and
// with the tail of the server's log when it does not answer PING within 10s;
// StartPostgres with ErrPostgresNotInstalled, StartEtcd when the member is
// not ready within 20s.
// A port taken by someone else between choosing and binding is retried with a
// fresh port, up to 5 times. The server runs in its own process group and, on
// Linux, is sent SIGKILL when the test process dies, so an aborted test run
// does not leave servers behind.
package testenv

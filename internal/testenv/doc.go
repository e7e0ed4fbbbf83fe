// Package testenv starts real servers for tests: a private redis-server
// process on a free loopback port, and a TCP fault proxy that can add
// latency, drop traffic or reset connections between a client and a server.
//
// Nothing here is a fake. Tests talk to the same redis-server binary that
// production runs, so Lua scripts, expiry and failure behaviour are real.
//
// testenv never uses a server that is already running. Every Redis gets its
// own port (chosen by the kernel, never 6379 by default), its own temporary
// directory and no persistence (--save "" --appendonly no), so a developer's
// local Redis is never read, written or flushed.
//
// Typical use in a test:
//
//	r := testenv.NewRedis(t)                 // stopped and removed by t.Cleanup
//	p := testenv.NewProxy(t, r.Addr())       // clients dial p.Addr()
//	p.SetLatency(50 * time.Millisecond)
//	r.Kill()                                 // simulate a crash
//	r.Restart()                              // same port, empty data set
//
// # Installing redis-server
//
// The redis-server binary is looked up on PATH, then at /usr/bin/redis-server.
// ./scripts/test installs it; by hand on Debian or Ubuntu:
//
//	apt-get install -y redis-server
//
// The package only starts its own processes; it does not need the system
// service to run (it may be stopped or disabled).
//
// # Failure modes
//
// StartRedis fails with ErrRedisNotInstalled when no binary is found, and
// with the tail of the server's log when it does not answer PING within 10s.
// A port taken by someone else between choosing and binding is retried with a
// fresh port, up to 5 times. The server runs in its own process group and, on
// Linux, is sent SIGKILL when the test process dies, so an aborted test run
// does not leave servers behind.
package testenv

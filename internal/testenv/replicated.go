package testenv

import (
	"context"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// Replicated is a primary and one replica of it, without a Sentinel: the
// test plays the failover itself (Link.Blackhole, Primary.Kill, Promote), so
// that it decides exactly which writes the promoted replica has.
type Replicated struct {
	Primary, Replica *Redis
	// Link carries the replication stream from the primary to the replica:
	// Blackhole it and the primary keeps accepting writes that the replica
	// never sees, and that no replica acknowledges.
	Link *Proxy
}

// NewReplicated starts a primary and a replica that has completed its
// initial sync and that the primary counts for WAIT, for the test.
func NewReplicated(t testing.TB) *Replicated {
	t.Helper()
	// No delay before the full sync the replica asks for (default 5s).
	primary := NewRedis(t, WithRedisArgs("--repl-diskless-sync-delay", "0"))
	link := NewProxy(t, primary.Addr())
	_, port, _ := strings.Cut(link.Addr(), ":")
	replica := NewRedis(t, WithRedisArgs("--replicaof", "127.0.0.1", port))
	rp := &Replicated{Primary: primary, Replica: replica, Link: link}
	ctx := context.Background()
	cp, cr := NewRedisClient(t, primary.Addr()), NewRedisClient(t, replica.Addr())
	WaitFor(t, 30*time.Second, "the replica to sync", func() bool {
		info, err := cr.Info(ctx, "replication").Result()
		return err == nil && strings.Contains(info, "master_link_status:up")
	})
	// After a diskless sync the primary counts the replica (WAIT does) only
	// once it has acknowledged an offset, which it does once a second: a
	// WAIT of a connection that wrote nothing says when.
	WaitFor(t, 30*time.Second, "the primary to count the replica online", func() bool {
		return cp.Wait(ctx, 1, 50*time.Millisecond).Val() == 1
	})
	return rp
}

// PauseReplica stops the replica (SIGSTOP) until the test ends or resume is
// called: still connected, it acknowledges nothing. It loses nothing
// either: what the primary sends meanwhile waits in the replica's socket
// and is applied on resume, so a test of a replica that lacks a write (a
// failover to a lagging replica) must cut the link instead (a Proxy's
// Blackhole between them; see redislock's release_failover_attack_test.go).
func (rp *Replicated) PauseReplica(t testing.TB) (resume func()) {
	t.Helper()
	if err := rp.Replica.Pause(); err != nil {
		t.Fatal(err)
	}
	var once sync.Once
	resume = func() {
		once.Do(func() {
			if err := rp.Replica.Resume(); err != nil {
				t.Error(err)
			}
		})
	}
	t.Cleanup(resume)
	return resume
}

// Promote makes the replica a primary (REPLICAOF NO ONE), as a Sentinel or
// an operator does in a failover, keeping exactly the data it has.
func (rp *Replicated) Promote(t testing.TB) {
	t.Helper()
	c := NewRedisClient(t, rp.Replica.Addr())
	if err := c.Do(context.Background(), "REPLICAOF", "NO", "ONE").Err(); err != nil {
		t.Fatalf("testenv: promote the replica: %v", err)
	}
}

// ReplicaHas waits until read, run on a client of the replica, holds: the
// replica has caught up with a write the test made on the primary.
func (rp *Replicated) ReplicaHas(t testing.TB, what string, read func(c *redis.Client) bool) {
	t.Helper()
	c := NewRedisClient(t, rp.Replica.Addr())
	WaitFor(t, 30*time.Second, "the replica to have "+what, func() bool { return read(c) })
}

// CaughtUp waits until the replica has acknowledged every write the
// primary has made so far (a resumed replica catching up): a write and a
// WAIT on one connection, until the WAIT counts the replica.
func (rp *Replicated) CaughtUp(t testing.TB) {
	t.Helper()
	c := NewRedisClient(t, rp.Primary.Addr())
	ctx := context.Background()
	WaitFor(t, 30*time.Second, "the replica to catch up", func() bool {
		var wait *redis.IntCmd
		_, err := c.Pipelined(ctx, func(p redis.Pipeliner) error {
			p.Incr(ctx, "testenv:caught-up")
			wait = redis.NewIntCmd(ctx, "wait", 1, 100)
			_ = p.Process(ctx, wait)
			return nil
		})
		return err == nil && wait.Val() == 1
	})
}

// FlapReplica stops and resumes the replica (SIGSTOP, SIGCONT) at random,
// up to 150 ms running and 400 ms stopped at a time, until until is
// closed; the channel it returns is closed once the replica runs again
// and the flapping has ended. A failure to signal fails t and ends it.
// The random waits inject the fault; nothing waits on them to decide.
func (rp *Replicated) FlapReplica(t testing.TB, until <-chan struct{}) (done <-chan struct{}) {
	ended := make(chan struct{})
	go func() {
		defer close(ended)
		for {
			select {
			case <-until:
				return
			case <-time.After(time.Duration(rand.IntN(150)) * time.Millisecond):
			}
			if err := rp.Replica.Pause(); err != nil {
				t.Error(err)
				return
			}
			select {
			case <-until:
			case <-time.After(time.Duration(rand.IntN(400)) * time.Millisecond):
			}
			if err := rp.Replica.Resume(); err != nil {
				t.Error(err)
				return
			}
		}
	}()
	return ended
}

// KillBlockedIn waits until a client connection of r is blocked in cmd
// (CLIENT LIST says flags=b and cmd=<cmd>, as for a WAIT that no replica
// has answered yet)
// and closes it (CLIENT KILL ID): the replies the server wrote before it
// blocked reach the client, the blocked command's never does. It kills
// one connection.
func (r *Redis) KillBlockedIn(t testing.TB, cmd string) {
	t.Helper()
	c := NewRedisClient(t, r.Addr())
	ctx := context.Background()
	var id string
	WaitFor(t, 30*time.Second, "a connection blocked in "+cmd, func() bool {
		list, err := c.ClientList(ctx).Result()
		if err != nil {
			return false
		}
		for line := range strings.Lines(list) {
			fields := strings.Fields(line)
			if slices.Contains(fields, "cmd="+cmd) && slices.ContainsFunc(fields, blocked) {
				for _, f := range fields {
					if v, ok := strings.CutPrefix(f, "id="); ok {
						id = v
						return true
					}
				}
			}
		}
		return false
	})
	if err := c.Do(ctx, "CLIENT", "KILL", "ID", id).Err(); err != nil {
		t.Fatalf("testenv: kill the connection blocked in %s: %v", cmd, err)
	}
}

// blocked says whether a CLIENT LIST field is flags with b (blocked).
func blocked(field string) bool {
	flags, ok := strings.CutPrefix(field, "flags=")
	return ok && strings.Contains(flags, "b")
}

// Switchover promotes the replica (REPLICAOF NO ONE) and makes the old
// primary, still running, its replica, as Sentinel does with an old
// primary that comes back: the full sync replaces the old primary's data
// with the promoted one's, so writes it never replicated are gone from
// both. It returns once the new primary counts its replica for WAIT, with
// Primary and Replica swapped. Clients of the old primary are the test's
// to move; Link no longer carries the replication stream (the new replica
// reads the new primary directly).
func (rp *Replicated) Switchover(t testing.TB) {
	t.Helper()
	ctx := context.Background()
	rp.Promote(t)
	np, nr := NewRedisClient(t, rp.Replica.Addr()), NewRedisClient(t, rp.Primary.Addr())
	if err := np.ConfigSet(ctx, "repl-diskless-sync-delay", "0").Err(); err != nil {
		t.Fatalf("testenv: switchover: %v", err)
	}
	host, port, _ := strings.Cut(rp.Replica.Addr(), ":")
	if err := nr.Do(ctx, "REPLICAOF", host, port).Err(); err != nil {
		t.Fatalf("testenv: switchover: make the old primary a replica: %v", err)
	}
	rp.Primary, rp.Replica = rp.Replica, rp.Primary
	WaitFor(t, 30*time.Second, "the old primary to sync from the promoted replica", func() bool {
		info, err := nr.Info(ctx, "replication").Result()
		return err == nil && strings.Contains(info, "master_link_status:up")
	})
	rp.CaughtUp(t)
}

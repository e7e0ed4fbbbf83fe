package redisfence

import (
	"fmt"
	"time"

	"github.com/lockgov/lockgov/internal/replicaack"
)

// Option configures a Writer made by New.
type Option interface {
	apply(*config) error
}

type optionFunc func(*config) error

func (f optionFunc) apply(c *config) error { return f(c) }

type config struct {
	acks replicaack.Acks
}

// WithReplicaAcks makes every Set that writes (or finds its own write
// already stored) wait until n replicas have acknowledged it, with WAIT n
// timeout in one pipeline after set.lua (and a write of the fence key that
// changes nothing, so that a resend that finds its write already stored is
// confirmed too), so that a failover to one of those replicas keeps the
// value and its fence, and a stale holder is refused there. A Set whose
// write fewer than n replicas acknowledged within timeout returns an error
// holding a *NotReplicatedError (errors.Is: ErrNotReplicated): the value
// is on the primary; retry with the same fence and value, which reports
// written, changing nothing, once the replicas have it. A refused Set is a
// *fence.StaleFenceError whatever the replicas say. See "Replica
// acknowledgements" in the package doc.
//
// n must be >= 1 and timeout > 0 and at most the client's ReadTimeout less
// 250ms (the WAIT's reply is read within ReadTimeout, and Redis answers a
// WAIT that timed out up to a timer tick late); timeout is rounded up to
// whole milliseconds. New refuses it on a client that does not send a
// pipeline to one node on one connection (Cluster, Ring).
func WithReplicaAcks(n int, timeout time.Duration) Option {
	return optionFunc(func(c *config) error {
		if err := replicaack.Validate(fmt.Sprintf("redisfence: WithReplicaAcks(%d, %v)", n, timeout), n, timeout); err != nil {
			return err
		}
		c.acks = replicaack.New(n, timeout)
		return nil
	})
}

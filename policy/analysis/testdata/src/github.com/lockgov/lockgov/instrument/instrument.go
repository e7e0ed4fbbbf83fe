// Package instrument is a stub of lockgov's instrument package for lockgov
// vet's tests.
package instrument

import (
	"context"
	"time"
)

type AcquireOption interface{ apply() }

type ttlOption time.Duration

func (ttlOption) apply() {}

func WithTTL(d time.Duration) AcquireOption { return ttlOption(d) }

type Locker interface {
	Acquire(ctx context.Context, key string, opts ...AcquireOption) (Lease, error)
}

type Lease interface {
	Key() string
	Fence() uint64
	Context() context.Context
	Refresh(ctx context.Context) error
	Release(ctx context.Context) error
}

func Do(ctx context.Context, l Locker, key string, fn func(ctx context.Context) error, opts ...AcquireOption) error {
	return nil
}

// Package redsync is a stub of github.com/go-redsync/redsync/v4 for lockgov
// vet's tests.
package redsync

import (
	"context"
	"time"
)

type Redsync struct{}

func New() *Redsync { return &Redsync{} }

type Option interface{ Apply(*Mutex) }

type optionFunc func(*Mutex)

func (f optionFunc) Apply(m *Mutex) { f(m) }

func WithExpiry(d time.Duration) Option { return optionFunc(func(*Mutex) {}) }

func (r *Redsync) NewMutex(name string, options ...Option) *Mutex { return &Mutex{} }

type Mutex struct{}

func (m *Mutex) Lock() error                                     { return nil }
func (m *Mutex) LockContext(ctx context.Context) error           { return nil }
func (m *Mutex) TryLock() error                                  { return nil }
func (m *Mutex) TryLockContext(ctx context.Context) error        { return nil }
func (m *Mutex) Unlock() (bool, error)                           { return true, nil }
func (m *Mutex) UnlockContext(ctx context.Context) (bool, error) { return true, nil }

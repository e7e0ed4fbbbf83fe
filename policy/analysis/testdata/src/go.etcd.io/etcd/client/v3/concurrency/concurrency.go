// Package concurrency is a stub of go.etcd.io/etcd/client/v3/concurrency for
// lockgov vet's tests.
package concurrency

import (
	"context"
	"errors"

	clientv3 "go.etcd.io/etcd/client/v3"
)

var ErrLocked = errors.New("mutex: Locked by another session")

type Session struct{}

type SessionOption func()

func NewSession(client *clientv3.Client, opts ...SessionOption) (*Session, error) {
	return &Session{}, nil
}

func (s *Session) Close() error { return nil }

type Mutex struct{}

func NewMutex(s *Session, pfx string) *Mutex { return &Mutex{} }

func (m *Mutex) Lock(ctx context.Context) error    { return nil }
func (m *Mutex) TryLock(ctx context.Context) error { return nil }
func (m *Mutex) Unlock(ctx context.Context) error  { return nil }
func (m *Mutex) Key() string                       { return "" }

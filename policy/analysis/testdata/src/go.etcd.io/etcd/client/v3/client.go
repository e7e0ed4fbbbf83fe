// Package clientv3 is a stub of go.etcd.io/etcd/client/v3 for lockgov vet's
// tests: the signatures the analyzers match on, no behaviour.
package clientv3

import "context"

type LeaseID int64

type Client struct{}

type LeaseGrantResponse struct{ ID LeaseID }

func (c *Client) Grant(ctx context.Context, ttl int64) (*LeaseGrantResponse, error) {
	return &LeaseGrantResponse{}, nil
}

func (c *Client) Txn(ctx context.Context) Txn { return nil }

type Cmp struct{}

type Op struct{}

type OpOption func(*Op)

func Compare(cmp Cmp, result string, v interface{}) Cmp { return cmp }
func CreateRevision(key string) Cmp                     { return Cmp{} }
func Version(key string) Cmp                            { return Cmp{} }
func OpPut(key, val string, opts ...OpOption) Op        { return Op{} }
func OpGet(key string, opts ...OpOption) Op             { return Op{} }
func WithLease(leaseID LeaseID) OpOption                { return nil }

// TxnResponse says whether the If comparisons held (Succeeded).
type TxnResponse struct{ Succeeded bool }

// Txn is an etcd transaction: If(compares).Then(ops).Else(ops).Commit().
type Txn interface {
	If(cs ...Cmp) Txn
	Then(ops ...Op) Txn
	Else(ops ...Op) Txn
	Commit() (*TxnResponse, error)
}

// Package redis is a stub of github.com/redis/go-redis/v9 for lockgov vet's
// tests: the signatures the analyzers match on, no behaviour. The analyzers
// recognise go-redis by this package path.
package redis

import (
	"context"
	"time"
)

// KeepTTL keeps the key's existing TTL on SET.
const KeepTTL = -1

type Cmder interface{ Err() error }

type baseCmd struct{ err error }

func (c *baseCmd) Err() error { return c.err }

type BoolCmd struct{ baseCmd }

func (c *BoolCmd) Val() bool             { return false }
func (c *BoolCmd) Result() (bool, error) { return false, c.err }

type StatusCmd struct{ baseCmd }

func (c *StatusCmd) Val() string             { return "" }
func (c *StatusCmd) Result() (string, error) { return "", c.err }

type StringCmd struct{ baseCmd }

func (c *StringCmd) Val() string             { return "" }
func (c *StringCmd) Result() (string, error) { return "", c.err }

type IntCmd struct{ baseCmd }

func (c *IntCmd) Val() int64             { return 0 }
func (c *IntCmd) Result() (int64, error) { return 0, c.err }

type Cmd struct{ baseCmd }

func (c *Cmd) Val() interface{}             { return nil }
func (c *Cmd) Result() (interface{}, error) { return nil, c.err }
func (c *Cmd) Int() (int, error)            { return 0, c.err }

// SetArgs are the arguments of SetArgs (SET with options).
type SetArgs struct {
	Mode     string // NX or XX
	TTL      time.Duration
	ExpireAt time.Time
	Get      bool
	KeepTTL  bool
}

// Cmdable is the command set every client, pipeline and transaction has.
type Cmdable interface {
	Get(ctx context.Context, key string) *StringCmd
	GetDel(ctx context.Context, key string) *StringCmd
	Set(ctx context.Context, key string, value interface{}, expiration time.Duration) *StatusCmd
	SetArgs(ctx context.Context, key string, value interface{}, a SetArgs) *StatusCmd
	SetEx(ctx context.Context, key string, value interface{}, expiration time.Duration) *StatusCmd
	SetNX(ctx context.Context, key string, value interface{}, expiration time.Duration) *BoolCmd
	Expire(ctx context.Context, key string, expiration time.Duration) *BoolCmd
	PExpire(ctx context.Context, key string, expiration time.Duration) *BoolCmd
	ExpireAt(ctx context.Context, key string, tm time.Time) *BoolCmd
	Del(ctx context.Context, keys ...string) *IntCmd
	Unlink(ctx context.Context, keys ...string) *IntCmd
	Exists(ctx context.Context, keys ...string) *IntCmd
	HSet(ctx context.Context, key string, values ...interface{}) *IntCmd
	Eval(ctx context.Context, script string, keys []string, args ...interface{}) *Cmd
	EvalSha(ctx context.Context, sha1 string, keys []string, args ...interface{}) *Cmd
	Pipelined(ctx context.Context, fn func(Pipeliner) error) ([]Cmder, error)
	TxPipelined(ctx context.Context, fn func(Pipeliner) error) ([]Cmder, error)
}

// Pipeliner queues commands and sends them with Exec.
type Pipeliner interface {
	Cmdable
	Exec(ctx context.Context) ([]Cmder, error)
}

// UniversalClient is a single-node, Sentinel or Cluster client.
type UniversalClient interface {
	Cmdable
	Do(ctx context.Context, args ...interface{}) *Cmd
	Watch(ctx context.Context, fn func(*Tx) error, keys ...string) error
	Close() error
}

type cmdable func(ctx context.Context, cmd Cmder) error

func (c cmdable) Get(ctx context.Context, key string) *StringCmd    { return &StringCmd{} }
func (c cmdable) GetDel(ctx context.Context, key string) *StringCmd { return &StringCmd{} }
func (c cmdable) Set(ctx context.Context, key string, value interface{}, expiration time.Duration) *StatusCmd {
	return &StatusCmd{}
}
func (c cmdable) SetArgs(ctx context.Context, key string, value interface{}, a SetArgs) *StatusCmd {
	return &StatusCmd{}
}
func (c cmdable) SetEx(ctx context.Context, key string, value interface{}, expiration time.Duration) *StatusCmd {
	return &StatusCmd{}
}
func (c cmdable) SetNX(ctx context.Context, key string, value interface{}, expiration time.Duration) *BoolCmd {
	return &BoolCmd{}
}
func (c cmdable) Expire(ctx context.Context, key string, expiration time.Duration) *BoolCmd {
	return &BoolCmd{}
}
func (c cmdable) PExpire(ctx context.Context, key string, expiration time.Duration) *BoolCmd {
	return &BoolCmd{}
}
func (c cmdable) ExpireAt(ctx context.Context, key string, tm time.Time) *BoolCmd { return &BoolCmd{} }
func (c cmdable) Del(ctx context.Context, keys ...string) *IntCmd                 { return &IntCmd{} }
func (c cmdable) Unlink(ctx context.Context, keys ...string) *IntCmd              { return &IntCmd{} }
func (c cmdable) Exists(ctx context.Context, keys ...string) *IntCmd              { return &IntCmd{} }
func (c cmdable) HSet(ctx context.Context, key string, values ...interface{}) *IntCmd {
	return &IntCmd{}
}
func (c cmdable) Eval(ctx context.Context, script string, keys []string, args ...interface{}) *Cmd {
	return &Cmd{}
}
func (c cmdable) EvalSha(ctx context.Context, sha1 string, keys []string, args ...interface{}) *Cmd {
	return &Cmd{}
}
func (c cmdable) Pipelined(ctx context.Context, fn func(Pipeliner) error) ([]Cmder, error) {
	return nil, nil
}
func (c cmdable) TxPipelined(ctx context.Context, fn func(Pipeliner) error) ([]Cmder, error) {
	return nil, nil
}

// Options configures a Client.
type Options struct{ Addr string }

// Client is a single-node client.
type Client struct{ cmdable }

func NewClient(opt *Options) *Client { return &Client{} }

func (c *Client) Do(ctx context.Context, args ...interface{}) *Cmd { return &Cmd{} }
func (c *Client) Watch(ctx context.Context, fn func(*Tx) error, keys ...string) error {
	return nil
}
func (c *Client) Close() error { return nil }

// Tx is a WATCH transaction.
type Tx struct{ cmdable }

// Script is a Lua script run with EVALSHA, falling back to EVAL.
type Script struct{ src string }

func NewScript(src string) *Script { return &Script{src: src} }

// Scripter runs scripts.
type Scripter interface {
	Eval(ctx context.Context, script string, keys []string, args ...interface{}) *Cmd
	EvalSha(ctx context.Context, sha1 string, keys []string, args ...interface{}) *Cmd
}

func (s *Script) Run(ctx context.Context, c Scripter, keys []string, args ...interface{}) *Cmd {
	return &Cmd{}
}

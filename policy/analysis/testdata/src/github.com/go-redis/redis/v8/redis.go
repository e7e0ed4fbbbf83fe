// Package redis is a stub of github.com/go-redis/redis/v8 for lockgov vet's
// tests: the few signatures the tests call.
package redis

import (
	"context"
	"time"
)

type BoolCmd struct{ err error }

func (c *BoolCmd) Err() error            { return c.err }
func (c *BoolCmd) Result() (bool, error) { return false, c.err }

type StringCmd struct{ err error }

func (c *StringCmd) Err() error              { return c.err }
func (c *StringCmd) Result() (string, error) { return "", c.err }

type IntCmd struct{ err error }

func (c *IntCmd) Err() error { return c.err }

type Cmd struct{ err error }

func (c *Cmd) Err() error { return c.err }

type Client struct{}

func (c *Client) SetNX(ctx context.Context, key string, value interface{}, expiration time.Duration) *BoolCmd {
	return &BoolCmd{}
}
func (c *Client) Expire(ctx context.Context, key string, expiration time.Duration) *BoolCmd {
	return &BoolCmd{}
}
func (c *Client) Get(ctx context.Context, key string) *StringCmd  { return &StringCmd{} }
func (c *Client) Del(ctx context.Context, keys ...string) *IntCmd { return &IntCmd{} }
func (c *Client) Eval(ctx context.Context, script string, keys []string, args ...interface{}) *Cmd {
	return &Cmd{}
}

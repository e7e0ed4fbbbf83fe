// Package redislock is a stub of github.com/bsm/redislock for lockgov vet's
// tests.
package redislock

import (
	"context"
	"errors"
	"time"
)

var ErrNotObtained = errors.New("redislock: not obtained")

type RedisClient interface{}

type Client struct{}

func New(client RedisClient) *Client { return &Client{} }

type Options struct{}

type Lock struct{}

func (c *Client) Obtain(ctx context.Context, key string, ttl time.Duration, opt *Options) (*Lock, error) {
	return &Lock{}, nil
}

func Obtain(ctx context.Context, client RedisClient, key string, ttl time.Duration, opt *Options) (*Lock, error) {
	return &Lock{}, nil
}

func (l *Lock) Key() string                       { return "" }
func (l *Lock) Release(ctx context.Context) error { return nil }

package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strings"

	"github.com/redis/go-redis/v9"
)

// go-redis writes its own messages (a dial that failed after its retries,
// Sentinel's choice of a new primary, a pool hook's error) through one
// process-wide logger, by default unstructured lines on stderr of the form
// "redis: 2026/12/07 09:00:00 pool.go:770: redis: connection pool: failed
// to dial ...". Beside the agent's slog lines an operator's log pipeline
// cannot parse them, so the binary routes them into slog on stderr, the
// handler the agent's own lines use, with component=go-redis. Nothing is
// dropped: Sentinel's failover messages stay, as Info; a message that
// reports a failure is a Warn. Only the binary does this: the setting is
// the process's, and a library (lockgov's packages) leaves it to its user.

// routeRedisLog makes go-redis's messages slog records written to w.
func routeRedisLog(w io.Writer) {
	redis.SetLogger(redisLog{slog.New(slog.NewTextHandler(w, nil)).With("component", "go-redis")})
}

type redisLog struct{ l *slog.Logger }

func (r redisLog) Printf(ctx context.Context, format string, v ...any) {
	msg := strings.TrimPrefix(fmt.Sprintf(format, v...), "redis: ")
	r.l.Log(ctx, redisLogLevel(msg), msg)
}

// redisLogLevel reads a go-redis message's level from its words: go-redis
// gives none.
func redisLogLevel(msg string) slog.Level {
	m := strings.ToLower(msg)
	for _, w := range []string{"fail", "error", "err=", "panic", "rejected", "unread data"} {
		if strings.Contains(m, w) {
			return slog.LevelWarn
		}
	}
	return slog.LevelInfo
}

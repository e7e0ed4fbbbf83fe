package testenv

import (
	"context"
	"crypto/sha1"
	"encoding/hex"
	"sync/atomic"

	"github.com/redis/go-redis/v9"
)

// ResendOnce is a go-redis hook (client.AddHook) that, once armed, runs the
// next call of script SHA (EVALSHA) twice and throws the first reply away:
// what redis-server sees when go-redis resends a command whose reply was lost
// after it ran. Between, when set, runs between the two runs: another
// process acting while the reply was lost. Load the script before arming
// (a call answered NOSCRIPT is not resent). SHA names the script so that
// other scripts the client runs meanwhile (a watchdog's renewal, a
// heartbeat) are left alone; ScriptSHA gives it for a script's source.
type ResendOnce struct {
	SHA     string
	Between func()

	passThrough
	armed, resent atomic.Bool
}

// Arm makes the next call of the script run twice.
func (h *ResendOnce) Arm() { h.resent.Store(false); h.armed.Store(true) }

// Resent reports whether a script call ran twice since Arm.
func (h *ResendOnce) Resent() bool { return h.resent.Load() }

func (h *ResendOnce) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if runsScript(cmd, h.SHA) && h.armed.CompareAndSwap(true, false) {
			lost := redis.NewCmd(ctx, cmd.Args()...)
			if err := next(ctx, lost); err != nil && redis.HasErrorPrefix(err, "NOSCRIPT") {
				h.armed.Store(true) // not run: the next call is the one
			} else {
				h.resent.Store(true)
				if h.Between != nil {
					h.Between()
				}
			}
		}
		return next(ctx, cmd)
	}
}

// BeforeScript is a go-redis hook (client.AddHook) that runs Do once, right
// before the first call of script SHA (EVALSHA) is sent: another process
// acting between what the caller read and the script it then runs.
type BeforeScript struct {
	SHA string
	Do  func()

	passThrough
	done atomic.Bool
}

// Done reports whether Do has run.
func (h *BeforeScript) Done() bool { return h.done.Load() }

func (h *BeforeScript) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if runsScript(cmd, h.SHA) && h.done.CompareAndSwap(false, true) {
			h.Do()
		}
		return next(ctx, cmd)
	}
}

// passThrough is the part of a go-redis hook that a script hook leaves alone:
// dials and pipelines.
type passThrough struct{}

func (passThrough) DialHook(next redis.DialHook) redis.DialHook { return next }

func (passThrough) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// runsScript reports whether cmd is an EVALSHA of the script sha.
func runsScript(cmd redis.Cmder, sha string) bool {
	args := cmd.Args()
	return cmd.Name() == "evalsha" && len(args) > 1 && args[1] == sha
}

// ScriptSHA is the SHA1 that EVALSHA names src by.
func ScriptSHA(src string) string {
	sum := sha1.Sum([]byte(src))
	return hex.EncodeToString(sum[:])
}

package agent

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockgov/lockgov/internal/testenv"
)

// publishGate holds the leader's publish script until the command's
// context ends, as a publish that is on the wire when the agent stops.
type publishGate struct {
	entered chan struct{}
	once    sync.Once
}

func (g *publishGate) DialHook(next redis.DialHook) redis.DialHook { return next }
func (g *publishGate) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}
func (g *publishGate) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		args := cmd.Args()
		if len(args) > 1 && (args[1] == publishScript.Hash() || args[1] == publishSrc) {
			g.once.Do(func() { close(g.entered) })
			<-ctx.Done()
		}
		return next(ctx, cmd)
	}
}

// TestClose_DuringAPublishLogsNoWarning: an agent stopped while its leader
// publishes the findings (Ctrl-C on `lockgov demo`) ends that publish with
// its own context. That is the agent stopping, not a store failing: it
// logs no warning. `lockgov demo` printed `WARN agent: publish findings
// ... err="context canceled"` as the last line of every run.
func TestClose_DuringAPublishLogsNoWarning(t *testing.T) {
	r := testenv.NewRedis(t)
	logs := &syncBuf{}
	cfg := testConfig("agent")
	cfg.Redis = []string{"redis://" + r.Addr()}
	cfg.Logger = slog.New(slog.NewTextHandler(logs, nil))
	a, err := Start(context.Background(), cfg)
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	g := &publishGate{entered: make(chan struct{})}
	a.coord.redis.AddHook(g)
	select {
	case <-g.entered:
	case <-time.After(30 * time.Second):
		_ = a.Close()
		t.Fatal("no publish within 30s")
	}
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	if out := logs.String(); strings.Contains(out, "publish findings") {
		t.Errorf("closing the agent during a publish logged:\n%s", out)
	}
}

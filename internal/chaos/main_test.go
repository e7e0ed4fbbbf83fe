package chaos

import (
	"context"
	"os"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/lockgov/lockgov/internal/leakcheck"
)

// quiet drops go-redis's own log lines (Sentinel switches, failed dials):
// the faults cause them by design, and the reports say what happened.
type quiet struct{}

func (quiet) Printf(context.Context, string, ...any) {}

func TestMain(m *testing.M) {
	if os.Getenv(childEnv) != "" {
		os.Exit(runChild())
	}
	redis.SetLogger(quiet{})
	leakcheck.VerifyTestMain(m)
}

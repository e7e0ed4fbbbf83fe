package snowflake_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/lockgov/lockgov/snowflake"
)

// A generator whose skew source says reject issues nothing, with the offset in a typed
// error, and issues again once the source says otherwise.
func TestGenerator_SkewSourceRejectRefusesIDsWithTheOffset(t *testing.T) {
	reject := true
	g, err := snowflake.New(1, snowflake.WithSkewSource(func() (time.Duration, bool) { return 700 * time.Millisecond, reject }))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	_, err = g.NextID(ctx)
	var se *snowflake.ClockSkewError
	if !errors.As(err, &se) || se.Offset != 700*time.Millisecond || !errors.Is(err, snowflake.ErrClockSkew) {
		t.Fatalf("NextID: %v, want *ClockSkewError{700ms}", err)
	}
	if _, err := g.NextN(ctx, 4); !errors.Is(err, snowflake.ErrClockSkew) {
		t.Fatalf("NextN: %v, want ErrClockSkew", err)
	}
	reject = false
	if _, err := g.NextID(ctx); err != nil {
		t.Fatalf("NextID after the tier cleared: %v", err)
	}
}

package errchain_test

import (
	"testing"

	"github.com/lockgov/lockgov/internal/leakcheck"
)

func TestMain(m *testing.M) {
	leakcheck.VerifyTestMain(m)
}

package soak_test

import (
	"testing"

	"github.com/lockgov/lockgov/internal/leakcheck"
)

// TestMain fails the package when a goroutine outlives the tests: the end
// of the soak's "goroutines flat".
func TestMain(m *testing.M) {
	leakcheck.VerifyTestMain(m)
}

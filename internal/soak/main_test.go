package soak_test

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package when a goroutine outlives the tests: the end
// of the soak's "goroutines flat".
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

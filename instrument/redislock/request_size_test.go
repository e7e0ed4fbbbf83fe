package redislock

import (
	"testing"
	"unsafe"
)

// TestRequest_FitsItsSizeClass pins request, allocated once per Acquire, to
// the 576-byte size class: with the 8-byte malloc header Go puts on a
// pointerful object over 512 bytes, at most 568 bytes. h98's core field
// made it 576, 640 bytes a request: 64 bytes more for every Acquire, with
// the allocation count (what BenchmarkAcquireRelease was checked by)
// unchanged. A field that needs room goes into padding (see request).
func TestRequest_FitsItsSizeClass(t *testing.T) {
	t.Parallel()
	const mallocHeader, sizeClass = 8, 576
	if n := unsafe.Sizeof(request{}); n+mallocHeader > sizeClass {
		t.Fatalf("request is %d bytes: with the malloc header past the %d-byte size class (every Acquire allocates the next, 640)", n, sizeClass)
	}
}

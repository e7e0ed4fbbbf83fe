package testenv

import (
	"syscall"
	"time"
)

// ProcessCPU is the CPU time this process has used so far, user + system
// (getrusage RUSAGE_SELF). redis-server runs in a process of its own, so
// two readings around a benchmark give the client's cost alone; RedisCPU
// gives the server's.
func ProcessCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

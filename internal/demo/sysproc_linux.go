package demo

import "syscall"

// sysProcAttr puts redis-server in its own process group and asks the
// kernel to kill it if the demo dies without stopping it.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}

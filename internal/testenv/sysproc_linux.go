package testenv

import "syscall"

// sysProcAttr puts the server in its own process group, so signals reach it
// and only it, and asks the kernel to kill it if the test process dies.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}

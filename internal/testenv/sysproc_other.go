//go:build unix && !linux

package testenv

import "syscall"

// sysProcAttr puts the server in its own process group, so signals reach it
// and only it.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}

package mcp

import "syscall"

// sysProcAttr puts a stdio child in its own process group and has the kernel kill it
// when Atrium dies (Pdeathsig), kill -9 included.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}

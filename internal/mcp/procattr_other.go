//go:build !linux

package mcp

import "syscall"

// sysProcAttr puts a stdio child in its own process group. Only Linux has a
// parent-death signal; elsewhere the child file alone reaps what a crash left.
func sysProcAttr() *syscall.SysProcAttr { return &syscall.SysProcAttr{Setpgid: true} }

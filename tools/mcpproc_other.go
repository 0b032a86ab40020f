//go:build unix && !linux

package tools

import "syscall"

// serverProcess is how a server program starts: leading a process group
// of its own, which is killed whole when the server ends. (Only Linux
// can have it killed when superego is killed.)
func serverProcess() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}

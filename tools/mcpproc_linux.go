package tools

import "syscall"

// serverProcess is how a server program starts on Linux: leading a
// process group of its own, which is killed whole when the server ends,
// and sent SIGKILL by the kernel when the thread that started it ends,
// which supervise keeps alive as long as superego runs: so the program
// ends with superego however superego ends, kill -9 included.
func serverProcess() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}

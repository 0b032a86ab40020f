package tools

import (
	"io"
	"os"
	"os/exec"
	"os/signal"
	"runtime"
	"syscall"
)

// keeperName is the name (argv[0]) the superego binary is started under
// as a keeper: no command a user types reaches it.
const keeperName = "superego-mcp-keeper"

// A keeper makes a stdio server's program, and everything the program
// starts (the node that npx starts), end with superego however superego
// ends, kill -9 included. A parent-death signal could not: the kernel
// sends it to a child, never to the child's own children.
//
// It is the superego binary started again, as superego-mcp-keeper, leading
// a process group of its own, and the program is started into that group
// (join). Both are superego's children: the program's standard input,
// output and error, its signals and its exit status are its own, and
// superego reaps both. The keeper sleeps on the read end of a pipe whose
// write end only superego holds: when superego is gone, however it went,
// the kernel closes the pipe, and the keeper kills the whole group, itself
// included.
type keeper struct {
	cmd  *exec.Cmd
	pipe *os.File // the write end
}

// startKeeper starts a keeper for one start of a program.
func startKeeper() (*keeper, error) {
	exe, err := self()
	if err != nil {
		return nil, err
	}
	r, w, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	cmd := &exec.Cmd{Path: exe, Args: []string{keeperName}, ExtraFiles: []*os.File{r}, // its fd 3
		SysProcAttr: &syscall.SysProcAttr{Setpgid: true}}
	err = cmd.Start()
	r.Close()
	if err != nil {
		w.Close()
		return nil, err
	}
	return &keeper{cmd: cmd, pipe: w}, nil
}

// join has cmd start its program in the keeper's process group.
func (k *keeper) join(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pgid: k.cmd.Process.Pid}
}

// kill kills the whole group at once: the program, what it started, and
// the keeper. A nil keeper (a server over HTTP) has nothing to kill.
func (k *keeper) kill() {
	if k != nil {
		syscall.Kill(-k.cmd.Process.Pid, syscall.SIGKILL)
	}
}

// end kills what is left of the group, once the program has ended or
// been given up on, and reaps the keeper.
func (k *keeper) end() {
	k.kill()
	k.cmd.Wait()
	k.pipe.Close()
}

// KeeperMain runs the binary as a keeper, when superego started it as
// one, and does not return: it sleeps until superego is gone, then kills
// its process group. Otherwise it returns at once. A program that starts
// stdio MCP servers (MCP.Start) calls it first thing in main, and a test
// binary that does, first thing in TestMain.
func KeeperMain() {
	if os.Args[0] != keeperName {
		return
	}
	if syscall.Getpgrp() != os.Getpid() {
		os.Exit(2) // not started by superego: the group is someone else's
	}
	// Only the pipe's end stops it: not a hangup, nor a signal sent to
	// the whole group.
	signal.Ignore(syscall.SIGHUP, syscall.SIGINT, syscall.SIGTERM)
	io.Copy(io.Discard, os.NewFile(3, "superego"))
	syscall.Kill(0, syscall.SIGKILL)
}

// self is the running binary, to start again: on Linux the very file that
// runs, even once an upgrade has replaced it on disk.
func self() (string, error) {
	if runtime.GOOS == "linux" {
		return "/proc/self/exe", nil
	}
	return os.Executable()
}

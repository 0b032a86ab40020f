// Package serving starts `superego serve` as a process for the benchmarks
// that measure the server as operators run it, and finds the address it
// listens on.
package serving

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
)

// listening is the line with which the server says where it listens.
var listening = regexp.MustCompile(`serving on http://(\S+)\.`)

// Start starts cmd, a `superego serve --addr 127.0.0.1:0 …` its caller
// has set up, and returns the address it serves on once it says so; its
// output after that line is read and dropped. Where the server exits
// first, cmd has been waited for and the error says so.
func Start(cmd *exec.Cmd) (addr string, err error) {
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return "", err
	}
	if err := cmd.Start(); err != nil {
		return "", err
	}
	sc := bufio.NewScanner(stdout)
	for sc.Scan() {
		if m := listening.FindStringSubmatch(sc.Text()); m != nil {
			go io.Copy(io.Discard, stdout)
			return m[1], nil
		}
	}
	cmd.Process.Kill()
	cmd.Wait()
	return "", errors.New("the server did not start")
}

// MiB is a field of a process's /proc/PID/status, "VmRSS" (its resident
// set now) or "VmHWM" (its peak), in MiB.
func MiB(pid int, field string) (float64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	for line := range strings.Lines(string(b)) {
		if v, ok := strings.CutPrefix(line, field+":"); ok {
			kb, err := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 64)
			return kb / 1024, err
		}
	}
	return 0, fmt.Errorf("no %s for process %d", field, pid)
}

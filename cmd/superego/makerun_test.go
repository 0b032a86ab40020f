package main

import (
	"bufio"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"
)

// make run builds the server and becomes it: kill PID, with make's PID, as
// a user stops what they started in the background, stops the server too
// (`go run` left it running, re-parented to init). The server's standard
// output ends when the last process that holds it does.
func TestMakeRunStopsWithMake(t *testing.T) {
	t.Parallel()
	if _, err := exec.LookPath("make"); err != nil {
		t.Skip("make is not installed")
	}
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	cmd := exec.Command("make", "-s", "-C", "../..", "run")
	cmd.Env = append(os.Environ(), "SUPEREGO_ADDR=127.0.0.1:0", "SUPEREGO_DB=memory", "SUPEREGO_MODEL=offline", "SUPEREGO_TEST_AS_MAIN=")
	cmd.Stdout, cmd.Stderr = w, w
	// A group of its own: whatever is left of it is killed after the test.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	w.Close()
	t.Cleanup(func() { syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) })

	lines := make(chan string, 64) // the output's lines; closed at its end
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(r)
		for sc.Scan() {
			lines <- sc.Text()
		}
	}()
	var out strings.Builder
	addr := ""
	for addr == "" {
		select {
		case line, ok := <-lines:
			if !ok {
				t.Fatalf("make run ended before serving:\n%s", out.String())
			}
			out.WriteString(line + "\n")
			if a, ok := strings.CutPrefix(line, "superego is serving on "); ok {
				addr = strings.TrimSuffix(a, ".")
			}
		case <-time.After(2 * time.Minute): // a cold build
			t.Fatalf("make run did not serve:\n%s", out.String())
		}
	}
	resp, err := http.Get(addr + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()

	syscall.Kill(cmd.Process.Pid, syscall.SIGTERM) // make's, not the server's
	for ended := false; !ended; {
		select {
		case line, ok := <-lines:
			out.WriteString(line + "\n")
			ended = !ok
		case <-time.After(30 * time.Second):
			t.Fatalf("the server outlived make:\n%s", out.String())
		}
	}
	cmd.Wait()
	if !strings.Contains(out.String(), `msg="shutting down"`) {
		t.Errorf("the server did not shut down as on Ctrl-C:\n%s", out.String())
	}
	if _, err := http.Get(addr + "/healthz"); err == nil {
		t.Error("the server still answers")
	}
}

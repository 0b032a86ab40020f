package main

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"superego/agents/agentstest"
	"superego/internal/eventually"
	"superego/tools/mcptest"
)

// A server killed while a side-effecting MCP call runs does not run it
// again when the run resumes: the tool server saw the call once, the model
// is told it may or may not have taken effect, and the run completes.
func TestKillNineDuringAToolCallRunsItOnce(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	os.MkdirAll(filepath.Join(dir, "flows"), 0o755)
	os.WriteFile(filepath.Join(dir, "flows", "calc.json"), []byte(strings.Replace(mcpFlow, "%s", "mcp__t__hold", 1)), 0o644)
	sent := filepath.Join(dir, "sent.log")
	exe, _ := os.Executable()
	writeJSON(t, filepath.Join(dir, "mcp.json"), map[string]any{"mcpServers": map[string]any{
		"t": map[string]any{"command": exe, "env": map[string]string{"SUPEREGO_TEST_MCP_SERVER": "actions", mcptest.LogEnv: sent}}}})
	model := &gatedModel{Server: agentstest.OpenAI(t, func(r agentstest.Request) agentstest.Answer {
		if res := r.ToolResults(); len(res) > 0 {
			return agentstest.Reply("", "COMPLETE", "", "finished: "+res[0].Text)
		}
		return agentstest.Answer{ToolCalls: []agentstest.Call{{ID: "h1", Name: "mcp__t__hold", Args: `{"text": "once"}`}}}
	})}
	mcp := []string{"--mcp", filepath.Join(dir, "mcp.json"), "--constitutions", "../../constitutions"}
	first := startServer(t, dir, model, mcp...)
	id := startRun(t, first.addr)
	// The call has reached the tool server, which holds it: kill the
	// server mid-call.
	eventually.Holds(t, 20*time.Second, func() string {
		if len(mcptest.Calls(t, sent)) == 0 {
			return fmt.Sprintf("the call never reached the tool server:\n%s", first.logs)
		}
		return ""
	})
	first.cmd.Process.Signal(syscall.SIGKILL)
	<-first.done

	second := startServer(t, dir, model, mcp...)
	events := history(t, second.addr, id)
	last := events[len(events)-1]
	if last.name != "done" || !strings.Contains(last.data, `"status":"completed","response":"finished: interrupted: this call may or may not have taken effect"`) {
		t.Errorf("the resumed run ended %+v\n%s", last, second.logs)
	}
	if calls := mcptest.Calls(t, sent); len(calls) != 1 || calls[0] != "hold\t{\"text\":\"once\"}" {
		t.Errorf("the tool server saw %q", calls)
	}
	steps := 0
	for _, e := range events {
		if e.name == "complete_step" && strings.Contains(e.data, `"tool_usage":[{"id":"h1","tool_name":"mcp__t__hold","input":{"text":"once"},"output":"interrupted: this call may or may not have taken effect"`) {
			steps++
		}
	}
	if steps != 1 {
		t.Errorf("the interrupted call's step is there %d times", steps)
	}
	second.cmd.Process.Signal(syscall.SIGTERM)
	<-second.done
}

// An MCP server started over stdio ends with superego, however superego
// ends: killed with kill -9, it takes with it the server, and what the
// server started, even where both would keep running once their client
// has gone (the server lingers; its child never reads its input and
// ignores SIGHUP).
func TestKillNineLeavesNoMCPServer(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	os.MkdirAll(filepath.Join(dir, "flows"), 0o755)
	os.WriteFile(filepath.Join(dir, "flows", "pid.json"), []byte(strings.Replace(mcpFlow, "%s", "mcp__t__pid", 1)), 0o644)
	exe, _ := os.Executable()
	pids := filepath.Join(dir, "pids")
	writeJSON(t, filepath.Join(dir, "mcp.json"), map[string]any{"mcpServers": map[string]any{
		"t": map[string]any{"command": exe, "env": map[string]string{"SUPEREGO_TEST_MCP_SERVER": "1", mcptest.LingerEnv: "1", mcptest.PidsEnv: pids}}}})
	model := &gatedModel{Server: agentstest.OpenAI(t, func(r agentstest.Request) agentstest.Answer {
		if res := r.ToolResults(); len(res) > 0 {
			return agentstest.Reply("", "COMPLETE", "", "pid "+res[0].Text)
		}
		return agentstest.Answer{ToolCalls: []agentstest.Call{{ID: "p1", Name: "mcp__t__pid", Args: `{}`}}}
	})}
	s := startServer(t, dir, model, "--mcp", filepath.Join(dir, "mcp.json"), "--constitutions", "../../constitutions")
	var pid int
	if _, err := fmt.Sscanf(regexp.MustCompile(`"response":"pid (\d+)"`).FindString(executeJSON(t, s.addr, "pid", "which pid")), `"response":"pid %d"`, &pid); err != nil || pid == 0 {
		t.Fatalf("the server's pid: %v\n%s", err, s.logs)
	}
	server, child := mcptest.Pids(t, pids) // written before it served the call
	if server != pid {
		t.Fatalf("the server wrote pid %d, and answered %d", server, pid)
	}
	t.Cleanup(func() { syscall.Kill(server, syscall.SIGKILL); syscall.Kill(child, syscall.SIGKILL) }) // should the test fail
	s.cmd.Process.Signal(syscall.SIGKILL)
	<-s.done
	mcptest.WaitGone(t, 5*time.Second, server, child)
}

package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"superego/agents/agentstest"
)

// writeJSON writes v as a JSON file.
func writeJSON(t *testing.T, path string, v any) {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// A bad mcp.json stops serve, run and validate at once, saying what is
// wrong and, where it is a server's, which.
func TestBadMCPConfig(t *testing.T) {
	dir := t.TempDir()
	for _, c := range []struct{ name, file, want string }{
		{"syntax", "{\"mcpServers\": {\n  \"fs\": {\"command\": \"sh\",}\n}}", `: line 2: malformed JSON: invalid character '}'`},
		{"unknown field", `{"mcpServers": {"fs": {"command": "sh", "enviroment": {"A": "b"}}}}`, `: mcpServers.fs: unknown field "enviroment"`},
		{"missing command", `{"mcpServers": {"ok": {"command": "sh"}, "fs": {"command": "/nonexistent/mcp-server-fs"}}}`, `: mcpServers.fs: command "/nonexistent/mcp-server-fs": not found, or not executable`},
	} {
		path := filepath.Join(dir, strings.ReplaceAll(c.name, " ", "_")+".json")
		os.WriteFile(path, []byte(c.file), 0o644)
		for _, cmd := range [][]string{{"serve"}, {"run", "basic_calculator", "hi"}, {"validate"}} {
			code, _, errs := runCmd(t, env(append(repoEnv, "SUPEREGO_MCP", path)...), cmd...)
			if code != exitUsage || !strings.Contains(errs, path+c.want) {
				t.Errorf("%s, %s: exit %d, %q; want %q", c.name, cmd[0], code, errs, path+c.want)
			}
		}
	}
	code, _, errs := runCmd(t, env(repoEnv...), "validate", "--mcp", filepath.Join(dir, "missing.json"))
	if code != exitUsage || !strings.Contains(errs, "missing.json: no such file") {
		t.Errorf("a missing --mcp file: %d %q", code, errs)
	}
	// Without --mcp, ./mcp.json is read if it is there.
	t.Chdir(dir)
	if cfg, _, err := parseConfig("validate", nil, env(), io.Discard); err != nil || cfg.MCP != "" || cfg.MCPServers != nil {
		t.Errorf("no mcp.json: %+v %v", cfg.MCPServers, err)
	}
	os.WriteFile("mcp.json", []byte(`{"mcpServers": {"shell": {"command": "sh"}}}`), 0o644)
	if cfg, _, err := parseConfig("validate", nil, env(), io.Discard); err != nil || cfg.MCP != "mcp.json" || len(cfg.MCPServers) != 1 || cfg.MCPServers[0].Name != "shell" {
		t.Errorf("./mcp.json: %q %+v %v", cfg.MCP, cfg.MCPServers, err)
	}
}

const mcpFlow = `{"name": "MCP", "graph": {"start": "assistant", "nodes": {
  "assistant": {"type": "inner_agent", "agent_id": "assistant", "system_prompt": "Use your tools.", "tools": ["%s"],
    "transitions": {"COMPLETE": null, "NEEDS_TOOL": "self"}}}}}`

// serveWithMCP serves the flows in dir/flows with the servers of mcp, on a
// model that calls tool with args once and answers with its result. It
// returns the server's address and a function that stops it and returns
// its log.
func serveWithMCP(t *testing.T, dir string, mcp map[string]any, tool, args string) (string, func() string) {
	t.Helper()
	writeJSON(t, filepath.Join(dir, "mcp.json"), map[string]any{"mcpServers": mcp})
	model := agentstest.OpenAI(t, func(r agentstest.Request) agentstest.Answer {
		if res := r.ToolResults(); len(res) > 0 {
			return agentstest.Reply("", "COMPLETE", "", "the tool said: "+res[0].Text)
		}
		return agentstest.Answer{ToolCalls: []agentstest.Call{{ID: "c1", Name: tool, Args: args}}}
	})
	getenv := env("OPENAI_API_KEY", "k", "OPENAI_BASE_URL", model.URL+"/v1", "SUPEREGO_MODEL", "openai:gpt-test")
	cfg, _, err := parseConfig("serve", []string{"--addr", "127.0.0.1:0", "--flows", filepath.Join(dir, "flows"), "--constitutions", "../../constitutions",
		"--db", "memory", "--workspaces", t.TempDir(), "--mcp", filepath.Join(dir, "mcp.json")}, getenv, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	ready := make(chan string, 1)
	var logs bytes.Buffer // written by serve until it returns, read after
	served := make(chan error, 1)
	go func() { served <- serve(ctx, cfg, io.Discard, &logs, ready) }()
	var addr string
	select {
	case addr = <-ready:
	case err := <-served:
		t.Fatalf("serve: %v\n%s", err, logs.String())
	}
	stopped := false
	stop := func() string {
		if !stopped {
			stopped = true
			cancel()
			select {
			case <-served:
			case <-time.After(30 * time.Second):
				t.Fatal("serve did not return")
			}
		}
		return logs.String()
	}
	t.Cleanup(func() { stop() })
	return addr, stop
}

func get(t *testing.T, url string) string {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

func executeJSON(t *testing.T, addr, flowID, input string) string {
	t.Helper()
	req, _ := http.NewRequest("POST", "http://"+addr+"/flow/execute", strings.NewReader(`{"flow_id": "`+flowID+`", "input": "`+input+`"}`))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

// superego serve starts the servers of mcp.json with their env, its flows'
// agents use their tools, a flow naming a server mcp.json lacks is refused
// with its JSON path, and /healthz shows each server, and no secret.
func TestServeWithMCPServers(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	os.Mkdir(filepath.Join(dir, "flows"), 0o755)
	os.WriteFile(filepath.Join(dir, "flows", "echo.json"), []byte(strings.Replace(mcpFlow, "%s", "mcp__t__*", 1)), 0o644)
	os.WriteFile(filepath.Join(dir, "flows", "unknown.json"), []byte(strings.Replace(mcpFlow, "%s", "mcp__nope__read", 1)), 0o644)
	exe, _ := os.Executable()
	const secret = "sk-mcp-config-SECRET-99"
	addr, stop := serveWithMCP(t, dir, map[string]any{
		"t": map[string]any{"command": exe, "env": map[string]string{"SUPEREGO_TEST_MCP_SERVER": "1", "SUPEREGO_TEST_MCP_SECRET": secret}},
	}, "mcp__t__echo", `{"text": "hello from mcp.json"}`)

	health := get(t, "http://"+addr+"/healthz")
	for _, want := range []string{
		`"mcp":[{"name":"t","state":"running","tools":4}]`,
		`{"id":"unknown","errors":["graph.nodes.assistant.tools.0: unknown MCP server \"nope\" (servers in mcp.json: t)"]}`,
	} {
		if !strings.Contains(health, want) {
			t.Errorf("healthz lacks %s:\n%s", want, health)
		}
	}
	if got := executeJSON(t, addr, "echo", "echo something"); !strings.Contains(got, `"status":"completed","response":"the tool said: hello from mcp.json"`) {
		t.Errorf("run: %s", got)
	}
	log := stop()
	for where, s := range map[string]string{"healthz": health, "log": log} {
		if strings.Contains(s, secret) {
			t.Errorf("the server's env secret reached the %s", where)
		}
	}
	if !strings.Contains(log, `unknown MCP server \"nope\"`) {
		t.Errorf("the refused flow is not logged:\n%s", log)
	}
	code, out, _ := runCmd(t, env("SUPEREGO_MCP", filepath.Join(dir, "mcp.json"), "SUPEREGO_CONSTITUTIONS", "../../constitutions"), "validate", "--flows", filepath.Join(dir, "flows"))
	if code != exitFailed || !strings.Contains(out, "ok       echo\nrefused  unknown\n         graph.nodes.assistant.tools.0: unknown MCP server \"nope\" (servers in mcp.json: t)") {
		t.Errorf("validate: %d\n%s", code, out)
	}
}

// With npm, the MCP filesystem server that Claude Code users run, started
// from mcp.json: an agent reads a file through it. .ci/run installs it and
// names its program in SUPEREGO_MCP_NODE.
func TestServeWithNodeMCPServer(t *testing.T) {
	t.Parallel()
	bin := os.Getenv("SUPEREGO_MCP_NODE")
	if bin == "" {
		t.Skip("SUPEREGO_MCP_NODE is not set: install @modelcontextprotocol/server-filesystem from npm and name its mcp-server-filesystem, as .ci/run does")
	}
	dir := t.TempDir()
	os.Mkdir(filepath.Join(dir, "flows"), 0o755)
	os.WriteFile(filepath.Join(dir, "flows", "files.json"), []byte(strings.Replace(mcpFlow, "%s", "mcp__fs__*", 1)), 0o644)
	data := filepath.Join(dir, "data")
	os.Mkdir(data, 0o755)
	os.WriteFile(filepath.Join(data, "notes.txt"), []byte("Tides turn twice a day."), 0o644)
	args, _ := json.Marshal(map[string]string{"path": filepath.Join(data, "notes.txt")})
	addr, stop := serveWithMCP(t, dir, map[string]any{"fs": map[string]any{"command": bin, "args": []string{data}}}, "mcp__fs__read_text_file", string(args))
	if health := get(t, "http://"+addr+"/healthz"); !strings.Contains(health, `"mcp":[{"name":"fs","state":"running","tools":`) {
		t.Errorf("healthz: %s", health)
	}
	if got := executeJSON(t, addr, "files", "what do my notes say?"); !strings.Contains(got, `"status":"completed","response":"the tool said: Tides turn twice a day."`) {
		t.Errorf("run: %s", got)
	}
	stop()
}

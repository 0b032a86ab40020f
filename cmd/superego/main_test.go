package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"superego/agents/agentstest"
	"sync"
	"testing"
	"time"
)

func env(kv ...string) func(string) string {
	m := map[string]string{}
	for i := 0; i+1 < len(kv); i += 2 {
		m[kv[i]] = kv[i+1]
	}
	return func(k string) string { return m[k] }
}

// repoEnv points the command at the repository's flows and constitutions.
var repoEnv = []string{"SUPEREGO_FLOWS", "../../flows", "SUPEREGO_CONSTITUTIONS", "../../constitutions", "SUPEREGO_DB", "memory"}

func runCmd(t *testing.T, getenv func(string) string, args ...string) (int, string, string) {
	t.Helper()
	var out, errb bytes.Buffer
	code := run(context.Background(), args, getenv, &out, &errb)
	return code, out.String(), errb.String()
}

func TestValidate(t *testing.T) {
	t.Parallel()
	code, out, _ := runCmd(t, env(repoEnv...), "validate")
	if code != 0 || out != "ok       bare_agent\nok       bare_assistant\nok       basic_calculator\nok       guarded_agent\nok       guarded_chat\nok       guarded_coder\nok       guarded_tools\nok       multi_agent_flow\nok       sg_phase\nok       supervised_assistant\nok       worker_checker\n" {
		t.Errorf("validate shipped flows: %d\n%s", code, out)
	}
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.json")
	os.WriteFile(bad, []byte(`{"name": "b", "graph": {"start": "calc", "nodes": {"calc": {"type": "inner_agent", "agent_id": "c",
		"transitions": {"DONE": "calcc"}}}}}`), 0o644)
	code, out, _ = runCmd(t, env(repoEnv...), "validate", bad, "../../flows/basic_calculator.json")
	want := "ok       ../../flows/basic_calculator.json\nrefused  " + bad + "\n         graph.nodes.calc.transitions.DONE: unknown node \"calcc\"\n"
	if code != 1 || out != want {
		t.Errorf("validate a broken file: %d\n%s\nwant\n%s", code, out, want)
	}
}

func TestRunPrintsTheFlowAndExitsByStatus(t *testing.T) {
	t.Parallel()
	code, out, errs := runCmd(t, env(repoEnv...), "run", "basic_calculator", "What is 5*10?")
	want := `user: What is 5*10?
input_superego
  → ACCEPT, next: calculator
calculator
  tool calculator {"expression":"5*10"}
    = 50
  → NEEDS_TOOL, next: calculator
calculator
  The calculator returned 50.
  → COMPLETE, next: end
completed: The calculator returned 50.
`
	if code != 0 || out != want {
		t.Errorf("exit %d, stderr %q, output:\n%s\nwant:\n%s", code, errs, out, want)
	}
	// Every shipped flow, including the seed's multi-agent flow as printed
	// there, runs to the end on the offline model.
	for _, id := range []string{"multi_agent_flow", "guarded_chat"} {
		if code, out, errs := runCmd(t, env(repoEnv...), "run", id, "What is 2+2?"); code != 0 || !strings.Contains(out, "completed: ") {
			t.Errorf("%s: exit %d\n%s\n%s", id, code, out, errs)
		}
	}
	// The offline model's hidden fields never reach the terminal.
	for _, args := range [][]string{{"run", "guarded_chat", "What is 5*10?"}, {"run", "--json", "guarded_chat", "What is 5*10?"}} {
		_, out, errs := runCmd(t, env(repoEnv...), args...)
		for _, hidden := range []string{"The offline model does not reason.", "Offline model: no guidance."} {
			if strings.Contains(out+errs, hidden) {
				t.Errorf("%v prints a hidden field: %q", args, hidden)
			}
		}
	}
	code, out, _ = runCmd(t, env(repoEnv...), "run", "--json", "basic_calculator", "hi")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	var last struct {
		Event string         `json:"event"`
		Data  map[string]any `json:"data"`
	}
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &last); code != 0 || err != nil || last.Event != "done" || last.Data["status"] != "completed" {
		t.Errorf("--json: exit %d, last line %s", code, lines[len(lines)-1])
	}
	// The offline model reports no tokens: done says so, with zeros.
	if usage, ok := last.Data["usage"].(map[string]any); !ok || usage["prompt_tokens"] != 0.0 || usage["completion_tokens"] != 0.0 {
		t.Errorf("--json: done without usage: %s", lines[len(lines)-1])
	}
	if code, _, errs := runCmd(t, env(repoEnv...), "run", "nope", "hi"); code != exitUsage || !strings.Contains(errs, `flow "nope": not found`) {
		t.Errorf("unknown flow: %d %q", code, errs)
	}
	if code, _, errs := runCmd(t, env(repoEnv...), "run", "basic_calculator"); code != exitUsage || !strings.Contains(errs, "want FLOW and a message") {
		t.Errorf("missing message: %d %q", code, errs)
	}
	if code, _, errs := runCmd(t, env(repoEnv...), "run", "--model", "openai:gpt-4o-mini", "basic_calculator", "x"); code != exitUsage || !strings.Contains(errs, "OPENAI_API_KEY") {
		t.Errorf("openai without a key: %d %q", code, errs)
	}
}

func TestConfigPrecedence(t *testing.T) {
	t.Parallel()
	cfg, _, err := parseConfig("serve", nil, env(), io.Discard)
	if err != nil || cfg.Addr != "127.0.0.1:8080" || cfg.Flows != "./flows" || cfg.Model != "offline" || cfg.MaxRuns != 256 {
		t.Errorf("defaults: %+v %v", cfg, err)
	}
	cfg, _, _ = parseConfig("serve", nil, env("OPENAI_API_KEY", "k"), io.Discard)
	if cfg.Model != "openai:gpt-4o-mini" {
		t.Errorf("with an OpenAI key: %q", cfg.Model)
	}
	cfg, _, _ = parseConfig("serve", nil, env("ANTHROPIC_API_KEY", "k"), io.Discard)
	if !strings.HasPrefix(cfg.Model, "anthropic:") {
		t.Errorf("with an Anthropic key: %q", cfg.Model)
	}
	cfg, _, _ = parseConfig("serve", []string{"--addr", ":9", "--model", "ollama:qwen"}, env("SUPEREGO_ADDR", ":7", "SUPEREGO_MODEL", "offline", "SUPEREGO_FLOWS", "/f"), io.Discard)
	if cfg.Addr != ":9" || cfg.Model != "ollama:qwen" || cfg.Flows != "/f" {
		t.Errorf("flags over env over defaults: %+v", cfg)
	}
	for _, bad := range [][]string{{"--max-runs", "0"}, {"--model-timeout", "soon"}, {"--nope"}} {
		if _, _, err := parseConfig("serve", bad, env(), io.Discard); err == nil {
			t.Errorf("%v accepted", bad)
		}
	}
	if code, _, errs := runCmd(t, env(), "frobnicate"); code != exitUsage || !strings.Contains(errs, `unknown command "frobnicate"`) {
		t.Errorf("unknown command: %d %q", code, errs)
	}
}

func TestServeStartsAndShutsDown(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	os.CopyFS(filepath.Join(dir, "flows"), os.DirFS("../../flows"))
	os.WriteFile(filepath.Join(dir, "flows", "broken.json"), []byte(`{"name": "x"`), 0o644)
	cfg, _, err := parseConfig("serve", []string{"--addr", "127.0.0.1:0", "--flows", filepath.Join(dir, "flows"), "--constitutions", "../../constitutions", "--db", filepath.Join(dir, "s.db")}, env(), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	ready := make(chan string, 1)
	var out, logs bytes.Buffer
	served := make(chan error, 1)
	go func() { served <- serve(ctx, cfg, &out, &logs, ready) }()
	addr := <-ready

	resp, err := http.Get("http://" + addr + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	want := `{"flows":["bare_agent","bare_assistant","basic_calculator","guarded_agent","guarded_chat","guarded_coder","guarded_tools","multi_agent_flow","sg_phase","supervised_assistant","worker_checker"],"mcp":[],"model":"offline","model_note":"the built-in offline model: not a language model; it judges nothing, and answers every call with a fixed, labelled reply. Set SUPEREGO_MODEL, OPENAI_API_KEY or ANTHROPIC_API_KEY for real judgments","refused":[{"id":"broken","errors":["malformed JSON: the file ends inside the flow object"]}],"status":"ok"}`
	if strings.TrimSpace(string(b)) != want {
		t.Errorf("healthz: %s", b)
	}
	resp, err = http.Post("http://"+addr+"/flow/execute", "application/json", strings.NewReader(`{"flow_id": "broken", "input": "x"}`))
	if err != nil || resp.StatusCode != 404 {
		t.Errorf("running a refused flow: %v %v", resp.StatusCode, err)
	}
	resp.Body.Close()
	resp, err = http.Post("http://"+addr+"/flow/execute", "application/json", strings.NewReader(`{"flow_id": "basic_calculator", "input": "What is 5*10?"}`))
	if err != nil {
		t.Fatal(err)
	}
	b, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(b), `"status":"completed","response":"The calculator returned 50."`) {
		t.Errorf("run: %s", b)
	}
	cancel()
	select {
	case err := <-served:
		if err != nil {
			t.Errorf("serve: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("serve did not return after shutdown")
	}
	if !strings.Contains(out.String(), "curl -N http://"+addr+"/flow/execute") {
		t.Errorf("no curl line:\n%s", out.String())
	}
	if !strings.Contains(logs.String(), `msg="flow refused" flow=broken`) || !strings.Contains(logs.String(), "not a language model") || !strings.Contains(logs.String(), "traces=off") {
		t.Errorf("logs:\n%s", logs.String())
	}
}

// Rules and references in --rules and --references reach every inner
// agent's prompt.
func TestRulesFolder(t *testing.T) {
	t.Parallel()
	rules := t.TempDir()
	os.WriteFile(filepath.Join(rules, "french.md"), []byte("priority: 3\n---\nAlways answer in French.\n"), 0o644)
	os.WriteFile(filepath.Join(rules, "manual.md"), []byte("include: manual\n---\nMention the weather.\n"), 0o644)
	var asked []agentstest.Request
	var mu sync.Mutex
	model := agentstest.OpenAI(t, func(r agentstest.Request) agentstest.Answer {
		mu.Lock()
		asked = append(asked, r)
		mu.Unlock()
		if r.Node() == "calculator" {
			return agentstest.Reply("", "COMPLETE", "", "Cinquante.")
		}
		return agentstest.Reply("", "ACCEPT", "", "")
	})
	getenv := env(append(repoEnv, "OPENAI_API_KEY", "k", "OPENAI_BASE_URL", model.URL+"/v1", "SUPEREGO_MODEL", "openai:gpt-test",
		"SUPEREGO_RULES", rules, "SUPEREGO_REFERENCES", filepath.Join(rules, "none"), "SUPEREGO_WORKSPACES", t.TempDir())...)
	if code, out, errs := runCmd(t, getenv, "run", "basic_calculator", "What is 5*10?"); code != 0 {
		t.Fatalf("run: %d\n%s\n%s", code, out, errs)
	}
	mu.Lock()
	asked = slices.Clone(asked)
	mu.Unlock()
	if len(asked) != 2 {
		t.Fatalf("%d model calls; want the superego's and the calculator's", len(asked))
	}
	for _, r := range asked {
		prompt := r.LastUser()
		if r.Node() == "calculator" && (!strings.Contains(prompt, "[rule: french]\nAlways answer in French.") || strings.Contains(prompt, "weather")) {
			t.Errorf("the inner agent's prompt:\n%s", prompt)
		}
		if r.Node() == "input_superego" && strings.Contains(prompt, "French") {
			t.Error("rules went to a superego; they are for inner agents")
		}
	}
	os.WriteFile(filepath.Join(rules, "bad.md"), []byte("priority: high\n---\nx"), 0o644)
	if code, _, errs := runCmd(t, getenv, "run", "basic_calculator", "x"); code == 0 || !strings.Contains(errs, "bad.md") {
		t.Errorf("a broken rule file: %d %s", code, errs)
	}
}

// The server's timeouts: a body that does not arrive in time gets 408 and
// its connection back; an idle kept-alive connection is closed; neither
// cuts a stream that takes longer than both.
func TestServerTimeouts(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	os.CopyFS(filepath.Join(dir, "flows"), os.DirFS("../../flows"))
	cfg, _, err := parseConfig("serve", []string{"--addr", "127.0.0.1:0", "--flows", filepath.Join(dir, "flows"), "--constitutions", "../../constitutions", "--db", "memory"}, env(), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	cfg.ReadTimeout, cfg.IdleTimeout = 300*time.Millisecond, 300*time.Millisecond
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ready := make(chan string, 1)
	go serve(ctx, cfg, io.Discard, io.Discard, ready)
	addr := <-ready

	// A slow body: half of it, then nothing.
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fmt.Fprint(c, "POST /flow/execute HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 60\r\n\r\n{\"flow_id\": \"basic_")
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("no answer to a slow body: %v", err)
	}
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusRequestTimeout || !strings.Contains(string(b), `"code":"request_timeout"`) {
		t.Errorf("slow body: %d %s", resp.StatusCode, b)
	}

	// An idle connection, after a request: the server closes it.
	idle, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer idle.Close()
	fmt.Fprint(idle, "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
	br := bufio.NewReader(idle)
	if resp, err := http.ReadResponse(br, nil); err != nil {
		t.Fatal(err)
	} else {
		io.Copy(io.Discard, resp.Body)
	}
	idle.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := br.ReadByte(); err != io.EOF {
		t.Errorf("an idle connection was not closed by the server: %v", err)
	}

	// A stream that outlasts both timeouts is not cut: a clarification and
	// its answer, read slowly, on one connection each.
	resp, err = http.Post("http://"+addr+"/flow/execute", "application/json", strings.NewReader(`{"flow_id": "basic_calculator", "input": "What is 5*10?"}`))
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(2 * cfg.ReadTimeout) // a client slower than the read timeout
	b, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(b), "event: done") {
		t.Errorf("a slow reader's stream was cut:\n%s", b)
	}
}

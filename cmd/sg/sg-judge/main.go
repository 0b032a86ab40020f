// Command sg-judge is sg's phase judge: it runs the embedded sg_phase flow
// once, here or on a superego server, and prints the phase it decided. sg
// evaluate starts it once per user message; it lives apart from sg so that
// sg check, a whole process before every write, links none of the engine.
//
// It reads one JSON request on standard input:
//
//	{"model": "openai:gpt-4o-mini", "timeout": 60000000000, "constitution": "…",
//	 "input": "…", "server": "", "session_dir": "/project/.superego/session"}
//
// and prints {"phase": "READY", "reason": "…"}: the judge's decision and
// response, never its thinking or agent_guidance. The providers read the
// environment the server reads (OPENAI_API_KEY, ANTHROPIC_BASE_URL…). A
// failure is a line on standard error and exit status 1.
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/tmc/langchaingo/llms"

	"superego/agents"
	"superego/engine"
	"superego/flow"
	"superego/flows"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Stdin, os.Stdout, os.Stderr, os.Getenv)
	stop()
	os.Exit(code)
}

// request is what sg sends.
type request struct {
	Model        string        `json:"model"`
	Timeout      time.Duration `json:"timeout"`
	Constitution string        `json:"constitution"`
	Input        string        `json:"input"`
	Server       string        `json:"server"`
	SessionDir   string        `json:"session_dir"`
}

// verdict is what the judge decided.
type verdict struct {
	Phase  string `json:"phase"`
	Reason string `json:"reason"`
}

// Phases, as the sg_phase flow's transitions name them.
const (
	exploring  = "EXPLORING"
	discussing = "DISCUSSING"
	ready      = "READY"
)

func run(ctx context.Context, stdin io.Reader, stdout, stderr io.Writer, getenv func(string) string) int {
	var req request
	if err := json.NewDecoder(stdin).Decode(&req); err != nil {
		fmt.Fprintln(stderr, "sg-judge: the request is not JSON:", err)
		return 2
	}
	v, err := judge(ctx, req, getenv)
	if err != nil {
		fmt.Fprintln(stderr, "sg-judge:", err)
		return 1
	}
	json.NewEncoder(stdout).Encode(v)
	return 0
}

// judge runs the phase flow, here or on a superego server.
func judge(ctx context.Context, req request, getenv func(string) string) (verdict, error) {
	if req.Timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, req.Timeout)
		defer cancel()
	}
	if req.Server != "" {
		return judgeOnServer(ctx, req.Server, req.Input)
	}
	if strings.TrimSpace(req.Constitution) == "" {
		return verdict{}, errors.New("no constitution")
	}
	def, _ := flows.FS.ReadFile("sg_phase.json")
	d, err := flow.Parse(def, flow.Catalog{Providers: agents.ProviderNames, Texts: map[string]string{"sg_phase": req.Constitution}})
	if err != nil {
		return verdict{}, err
	}
	m, err := model(req, getenv)
	if err != nil {
		return verdict{}, err
	}
	agent := &agents.Agent{Model: func(string) (agents.Model, error) { return m, nil }, Timeout: req.Timeout}
	var step flow.Step
	out := (&engine.Executor{Agent: agent}).Execute(ctx, engine.Turn{FlowID: "sg_phase", Def: d, InstanceID: flow.NewID(), RunID: flow.NewID(), Input: req.Input},
		engine.Sink{Emit: func(evs ...flow.Event) error {
			for _, ev := range evs {
				if s, ok := ev.Data.(*flow.Step); ok && s.Node == "phase_judge" {
					step = *s
				}
			}
			return nil
		}})
	if out.Err != nil {
		return verdict{}, out.Err
	}
	return verdictOf(step.Decision, step.Response)
}

func verdictOf(decision, response string) (verdict, error) {
	switch decision {
	case exploring, discussing, ready:
		return verdict{Phase: decision, Reason: strings.TrimSpace(response)}, nil
	}
	return verdict{}, fmt.Errorf("the judge decided %q, not a phase", decision)
}

// judgeOnServer runs the sg_phase flow on a superego server.
func judgeOnServer(ctx context.Context, server, input string) (verdict, error) {
	body, _ := json.Marshal(map[string]string{"flow_id": "sg_phase", "input": input})
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, strings.TrimRight(server, "/")+"/flow/execute", bytes.NewReader(body))
	if err != nil {
		return verdict{}, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return verdict{}, err
	}
	defer resp.Body.Close()
	var res struct {
		Status string      `json:"status"`
		Steps  []flow.Step `json:"steps"`
		Error  *struct {
			Code    string `json:"code"`
			Message string `json:"message"`
		} `json:"error"`
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, 8<<20)).Decode(&res); err != nil {
		return verdict{}, fmt.Errorf("server %s: %s: %w", server, resp.Status, err)
	}
	if res.Error != nil {
		return verdict{}, fmt.Errorf("server %s: %s: %s", server, res.Error.Code, res.Error.Message)
	}
	for i := len(res.Steps) - 1; i >= 0; i-- {
		if res.Steps[i].Node == "phase_judge" {
			return verdictOf(res.Steps[i].Decision, res.Steps[i].Response)
		}
	}
	return verdict{}, fmt.Errorf("server %s: run %s without a phase_judge step", server, res.Status)
}

// model resolves the model the request names; the providers read the same
// environment as the server.
func model(req request, getenv func(string) string) (agents.Model, error) {
	if req.Model == "claude-cli" || strings.HasPrefix(req.Model, "claude-cli:") {
		_, name, _ := strings.Cut(req.Model, ":")
		if err := os.MkdirAll(req.SessionDir, 0o755); err != nil {
			return agents.Model{}, err
		}
		return agents.Model{LLM: &claudeCLI{model: name, dir: req.SessionDir}, Name: req.Model}, nil
	}
	p := &agents.Providers{
		Default:          req.Model,
		OpenAIKey:        getenv("OPENAI_API_KEY"),
		OpenAIBaseURL:    getenv("OPENAI_BASE_URL"),
		AnthropicKey:     getenv("ANTHROPIC_API_KEY"),
		AnthropicBaseURL: getenv("ANTHROPIC_BASE_URL"),
		OllamaHost:       getenv("OLLAMA_HOST"),
	}
	return p.Model("")
}

// claudeCLI is a model behind Claude Code's own command line, "claude -p",
// so a Claude Code user needs no separate API key. Its session runs with
// SUPEREGO_DISABLED=1, so the hooks it triggers do nothing: the evaluator
// never gates itself.
type claudeCLI struct {
	model string
	dir   string // .superego/session: its working directory, away from the project's settings and hooks
}

func (c *claudeCLI) Call(ctx context.Context, prompt string, options ...llms.CallOption) (string, error) {
	return llms.GenerateFromSinglePrompt(ctx, c, prompt, options...)
}

func (c *claudeCLI) GenerateContent(ctx context.Context, messages []llms.MessageContent, options ...llms.CallOption) (*llms.ContentResponse, error) {
	var opts llms.CallOptions
	for _, o := range options {
		o(&opts)
	}
	var system, prompt strings.Builder
	for _, m := range messages {
		for _, p := range m.Parts {
			if t, ok := p.(llms.TextContent); ok {
				if m.Role == llms.ChatMessageTypeSystem {
					system.WriteString(t.Text + "\n")
				} else {
					prompt.WriteString(t.Text + "\n\n")
				}
			}
		}
	}
	args := []string{"-p", "--output-format", "json", "--append-system-prompt", system.String()}
	if c.model != "" {
		args = append(args, "--model", c.model)
	}
	cmd := exec.CommandContext(ctx, "claude", args...)
	cmd.Stdin = strings.NewReader(prompt.String())
	cmd.Dir = c.dir
	cmd.Env = append(os.Environ(), "SUPEREGO_DISABLED=1")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("claude -p: %w: %s", err, firstLine(stderr.String()))
	}
	var res struct {
		IsError bool   `json:"is_error"`
		Result  string `json:"result"`
	}
	if err := json.Unmarshal(out, &res); err != nil {
		return nil, fmt.Errorf("claude -p: output is not its JSON result: %w", err)
	}
	if res.IsError {
		return nil, fmt.Errorf("claude -p: %s", res.Result)
	}
	if opts.StreamingFunc != nil {
		if err := opts.StreamingFunc(ctx, []byte(res.Result)); err != nil {
			return nil, err
		}
	}
	return &llms.ContentResponse{Choices: []*llms.ContentChoice{{Content: res.Result, StopReason: "stop"}}}, nil
}

func firstLine(s string) string {
	s, _, _ = strings.Cut(strings.TrimSpace(s), "\n")
	return s
}

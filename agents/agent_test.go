package agents_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"superego/agents"
	"superego/agents/agentstest"
	"superego/engine"
	"superego/flow"
	"superego/tools"
)

const (
	thinkingMarker = "THINKING-MARKER-7f3a"
	guidanceMarker = "GUIDANCE-MARKER-91c2"
)

const calcFlow = `{
  "name": "calc",
  "graph": {
    "start": "input_superego",
    "nodes": {
      "input_superego": {"type": "superego", "agent_id": "input_superego", "constitution": "CONSTITUTION-TEXT-1",
        "transitions": {"BLOCK": null, "ACCEPT": "calculator", "CAUTION": "calculator", "NEEDS_CLARIFICATION": "input_superego"}},
      "calculator": {"type": "inner_agent", "agent_id": "calculator", "system_prompt": "SYSTEM-PROMPT-2",
        "tools": ["calculator"], "transitions": {"COMPLETE": "output_superego", "NEEDS_TOOL": "self"}},
      "output_superego": {"type": "superego", "agent_id": "output_superego", "constitution": "CONSTITUTION-TEXT-3",
        "transitions": {"ACCEPT": null, "BLOCK": null}}
    }
  }
}`

// calcScript plays the three nodes: the superego plants markers in its
// hidden fields, the calculator calls its tool once and then answers.
func calcScript(r agentstest.Request) agentstest.Answer {
	switch r.Node() {
	case "input_superego":
		return agentstest.Reply(thinkingMarker+" benign", "CAUTION", guidanceMarker+" verify the number", "Checking that for you.")
	case "calculator":
		if res := r.ToolResults(); len(res) > 0 {
			return agentstest.Reply(thinkingMarker+" done", "COMPLETE", guidanceMarker, "5*10 = "+res[0].Text)
		}
		return agentstest.Answer{ToolCalls: []agentstest.Call{{ID: "call_calc_1", Name: "calculator", Args: `{"expression":"5*10"}`}}}
	case "output_superego":
		return agentstest.Reply(thinkingMarker, "ACCEPT", guidanceMarker, "")
	}
	return agentstest.Answer{Status: 500, Text: "unknown node in prompt"}
}

type run struct {
	events []flow.Event
	out    engine.Outcome
}

func (r run) partials(node string) string {
	var b strings.Builder
	for _, e := range r.events {
		if p, ok := e.Data.(flow.Partial); ok && p.Node == node {
			b.WriteString(p.Delta)
		}
	}
	return b.String()
}

func (r run) steps() []flow.Step {
	var out []flow.Step
	for _, e := range r.events {
		if s, ok := e.Data.(*flow.Step); ok {
			out = append(out, *s)
		}
	}
	return out
}

func execute(t *testing.T, def string, agent *agents.Agent, input string) run {
	t.Helper()
	d, err := flow.Parse([]byte(def), flow.Catalog{Tools: agent.Tools.Names(), Providers: agents.ProviderNames})
	if err != nil {
		t.Fatal(err)
	}
	var r run
	x := &engine.Executor{Agent: agent}
	r.out = x.Execute(context.Background(), engine.Turn{FlowID: "calc", Def: d, InstanceID: "i", RunID: "r", Input: input},
		engine.Sink{Emit: func(evs ...flow.Event) error { r.events = append(r.events, evs...); return nil }})
	return r
}

func TestProvidersSpeakTheProtocol(t *testing.T) {
	t.Parallel()
	openai := agentstest.OpenAI(t, calcScript)
	anthropic := agentstest.Anthropic(t, calcScript)
	cases := []struct {
		name   string
		spec   string
		server *agentstest.Server
		p      *agents.Providers
	}{
		{"openai", "openai:gpt-test", openai, &agents.Providers{OpenAIKey: "k", OpenAIBaseURL: openai.URL + "/v1"}},
		{"anthropic", "anthropic:claude-test", anthropic, &agents.Providers{AnthropicKey: "k", AnthropicBaseURL: anthropic.URL}},
		{"ollama", "ollama:llama-test", openai, &agents.Providers{OllamaHost: strings.TrimPrefix(openai.URL, "http://")}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			before := len(c.server.Requests())
			c.p.Default = c.spec
			agent := &agents.Agent{Model: c.p.Model, Tools: tools.Set{"calculator": tools.Calculator()}}
			r := execute(t, calcFlow, agent, "What is 5*10?")
			if r.out.Status != flow.StatusCompleted || r.out.Response != "5*10 = 50" {
				t.Fatalf("outcome %+v", r.out)
			}
			var trace []string
			for _, s := range r.steps()[1:] {
				trace = append(trace, s.AgentID+":"+s.Decision)
			}
			if got, want := strings.Join(trace, " "), "input_superego:CAUTION calculator:NEEDS_TOOL calculator:COMPLETE output_superego:ACCEPT"; got != want {
				t.Errorf("trace %q, want %q", got, want)
			}
			steps := r.steps()
			if tu := steps[2].ToolUsage; len(tu) != 1 || tu[0].Output != "50" || tu[0].ID != "call_calc_1" || string(tu[0].Input) != `{"expression":"5*10"}` {
				t.Errorf("tool usage %+v", tu)
			}
			if s := steps[1]; s.Thinking == "" || !strings.Contains(s.AgentGuidance, guidanceMarker) || s.Usage == nil || s.Model != c.spec {
				t.Errorf("superego step %+v", s)
			}
			if got := r.partials("input_superego"); got != "Checking that for you." {
				t.Errorf("superego partials %q", got)
			}
			if got := r.partials("calculator"); got != "5*10 = 50" {
				t.Errorf("calculator partials %q", got)
			}

			reqs := c.server.Requests()[before:]
			if len(reqs) != 4 {
				t.Fatalf("%d model calls, want 4", len(reqs))
			}
			sup, calc1, calc2, out := reqs[0], reqs[1], reqs[2], reqs[3]
			if !strings.Contains(sup.System, "CONSTITUTION-TEXT-1") || !strings.Contains(sup.System, "Decide with exactly one of: ACCEPT, BLOCK, CAUTION, NEEDS_CLARIFICATION.") {
				t.Errorf("superego system prompt:\n%s", sup.System)
			}
			for _, other := range []string{"SYSTEM-PROMPT-2", "CONSTITUTION-TEXT-3"} {
				if strings.Contains(sup.System, other) {
					t.Errorf("superego's system prompt holds another node's %q", other)
				}
			}
			if !strings.Contains(calc1.System, "SYSTEM-PROMPT-2") || strings.Contains(calc1.System, "CONSTITUTION-TEXT") {
				t.Errorf("calculator system prompt:\n%s", calc1.System)
			}
			if len(calc1.Tools) != 1 || calc1.Tools[0] != "calculator" || len(sup.Tools) != 0 {
				t.Errorf("tools offered: superego %v, calculator %v", sup.Tools, calc1.Tools)
			}
			// The guidance reaches the next node, and only through its message.
			if !strings.Contains(calc1.LastUser(), guidanceMarker) || !strings.Contains(calc2.LastUser(), guidanceMarker) {
				t.Errorf("calculator was not given the superego's guidance: %q", calc1.LastUser())
			}
			for _, req := range reqs {
				if strings.Contains(string(req.Body), thinkingMarker) {
					t.Errorf("%s's request carries another node's thinking", req.Node())
				}
			}
			// The tool result goes back natively, tied to its call.
			if res := calc2.ToolResults(); len(res) != 1 || res[0].ToolCallID != "call_calc_1" || res[0].Text != "50" {
				t.Errorf("tool results sent back: %+v", res)
			}
			if !strings.Contains(out.LastUser(), "The draft from calculator:\n5*10 = 50") {
				t.Errorf("output superego's message: %q", out.LastUser())
			}
			if c.server == openai && !sup.JSONMode {
				t.Error("JSON mode not requested from an OpenAI-compatible server")
			}
		})
	}
}

func TestModelFailures(t *testing.T) {
	t.Parallel()
	oneNode := `{"name": "one", "graph": {"start": "s", "nodes": {"s": {"type": "superego", "agent_id": "s", "constitution": "c",
		"transitions": {"ACCEPT": null, "BLOCK": null, "CAUTION": null}}}}}`
	cases := []struct {
		name   string
		answer agentstest.Answer
		status string
		err    error
		check  func(t *testing.T, r run)
	}{
		{name: "server error", answer: agentstest.Answer{Status: 500, Text: "overloaded"}, status: flow.StatusFailed, err: flow.ErrModelUnavailable},
		{name: "timeout", answer: agentstest.Answer{Hang: true}, status: flow.StatusFailed, err: flow.ErrTimeout},
		{name: "empty reply", answer: agentstest.Answer{}, status: flow.StatusFailed, err: flow.ErrModelOutput},
		{name: "prose falls back to CAUTION", answer: agentstest.Answer{Text: "I think this is fine."}, status: flow.StatusCompleted,
			check: func(t *testing.T, r run) {
				s := r.steps()[1]
				if s.Decision != "CAUTION" || s.Fallback == "" || s.Response != "I think this is fine." {
					t.Errorf("step %+v", s)
				}
			}},
		{name: "fenced JSON with text around it", answer: agentstest.Answer{Text: "Here:\n```json\n" + agentstest.JSON(thinkingMarker, "block", "g", "No.") + "\n```\nDone."},
			status: flow.StatusBlocked,
			check: func(t *testing.T, r run) {
				if s := r.steps()[1]; s.Decision != "BLOCK" || s.Response != "No." || s.Fallback != "" {
					t.Errorf("step %+v", s)
				}
			}},
		{name: "unknown decision", answer: agentstest.Reply("t", "MAYBE", "g", "hmm"), status: flow.StatusCompleted,
			check: func(t *testing.T, r run) {
				if s := r.steps()[1]; s.Decision != "CAUTION" || !strings.Contains(s.Fallback, `"MAYBE" is not one of ACCEPT, BLOCK, CAUTION`) {
					t.Errorf("step %+v", s)
				}
			}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			srv := agentstest.OpenAI(t, func(agentstest.Request) agentstest.Answer { return c.answer })
			p := &agents.Providers{Default: "openai:m", OpenAIKey: "k", OpenAIBaseURL: srv.URL + "/v1"}
			r := execute(t, oneNode, &agents.Agent{Model: p.Model, Timeout: 200 * time.Millisecond}, "hello")
			if r.out.Status != c.status || (c.err != nil && !errors.Is(r.out.Err, c.err)) {
				t.Fatalf("outcome %+v, want %s %v", r.out, c.status, c.err)
			}
			if c.err != nil {
				last := r.events[len(r.events)-2].Data.(flow.ErrorData)
				if last.Code != flow.ErrorCode(c.err) || strings.Contains(last.Message, thinkingMarker) {
					t.Errorf("error event %+v", last)
				}
			}
			if c.check != nil {
				c.check(t, r)
			}
		})
	}
}

func TestToolFailuresGoBackToTheModel(t *testing.T) {
	t.Parallel()
	set := tools.Set{
		"calculator": tools.Calculator(),
		"boom":       {Name: "boom", Parameters: map[string]any{"type": "object"}, Call: func(context.Context, json.RawMessage) (string, error) { panic("kaboom") }},
	}
	def := `{"name": "t", "graph": {"start": "a", "nodes": {"a": {"type": "inner_agent", "agent_id": "a", "tools": ["calculator", "boom"],
		"max_iterations": 5, "transitions": {"COMPLETE": null}}}}}`
	calls := [][]agentstest.Call{
		{{ID: "1", Name: "calculator", Args: `{"expression":"9**9**9**9"}`}, {ID: "2", Name: "nope", Args: `{}`}, {ID: "3", Name: "calculator", Args: `{"expr`}},
		{{ID: "4", Name: "boom", Args: `{}`}},
	}
	srv := agentstest.OpenAI(t, func(r agentstest.Request) agentstest.Answer {
		n := len(r.ToolResults()) / 3
		return agentstest.Answer{ToolCalls: calls[n]}
	})
	p := &agents.Providers{Default: "openai:m", OpenAIKey: "k", OpenAIBaseURL: srv.URL + "/v1"}
	r := execute(t, def, &agents.Agent{Model: p.Model, Tools: set}, "go")
	if r.out.Status != flow.StatusFailed || !errors.Is(r.out.Err, flow.ErrToolFailed) {
		t.Fatalf("outcome %+v, want failed with tool_failed", r.out)
	}
	first := r.steps()[1].ToolUsage
	wants := []string{"too large", `no tool "nope" here`}
	for i, w := range wants {
		if !strings.Contains(first[i].Error, w) {
			t.Errorf("tool use %d error %q, want it to say %q", i, first[i].Error, w)
		}
	}
	// Arguments that do not decode run nothing: the call is refused.
	if u := first[2]; !u.Refused || !strings.HasPrefix(u.Output, "refused: invalid arguments: not valid JSON") || string(u.Input) != `"{\"expr"` {
		t.Errorf("tool use 2: %+v", u)
	}
	second := srv.Requests()[1].ToolResults()
	if len(second) != 3 || !strings.HasPrefix(second[0].Text, "error: ") {
		t.Errorf("errors given back to the model: %+v", second)
	}
}

func TestMissingKeyIsAClearError(t *testing.T) {
	t.Parallel()
	_, err := (&agents.Providers{}).Model("openai:gpt-4o-mini")
	if !errors.Is(err, agents.ErrNoKey) || !strings.Contains(err.Error(), "OPENAI_API_KEY") {
		t.Errorf("err = %v", err)
	}
	_, err = (&agents.Providers{}).Model("bogus:x")
	if err == nil || !strings.Contains(err.Error(), `unknown provider "bogus"`) {
		t.Errorf("err = %v", err)
	}
}

func TestOfflineModelRunsEveryShippedFlow(t *testing.T) {
	t.Parallel()
	p := &agents.Providers{Default: "offline"}
	agent := &agents.Agent{Model: p.Model, Tools: tools.Builtin(nil, &tools.Workspaces{Root: t.TempDir()})}
	r := execute(t, calcFlow, agent, "What is 6*7?")
	if r.out.Status != flow.StatusCompleted || !strings.Contains(r.out.Response, "42") {
		t.Fatalf("outcome %+v", r.out)
	}
	for _, s := range r.steps()[1:] {
		if s.Model != agents.OfflineName {
			t.Errorf("step model %q", s.Model)
		}
	}
}

func TestNodeModelOverridesTheDefault(t *testing.T) {
	t.Parallel()
	openai := agentstest.OpenAI(t, calcScript)
	anthropic := agentstest.Anthropic(t, calcScript)
	p := &agents.Providers{Default: "openai:gpt-test", OpenAIKey: "k", OpenAIBaseURL: openai.URL + "/v1", AnthropicKey: "k", AnthropicBaseURL: anthropic.URL}
	def := strings.Replace(calcFlow, `"constitution": "CONSTITUTION-TEXT-3",`, `"constitution": "CONSTITUTION-TEXT-3", "model": "anthropic:claude-judge",`, 1)
	r := execute(t, def, &agents.Agent{Model: p.Model, Tools: tools.Set{"calculator": tools.Calculator()}}, "What is 5*10?")
	if r.out.Status != flow.StatusCompleted {
		t.Fatal(r.out)
	}
	models := map[string]string{}
	for _, s := range r.steps()[1:] {
		models[s.Node] = s.Model
	}
	if models["input_superego"] != "openai:gpt-test" || models["calculator"] != "openai:gpt-test" || models["output_superego"] != "anthropic:claude-judge" {
		t.Errorf("models by node: %v", models)
	}
	if reqs := anthropic.Requests(); len(reqs) != 1 || reqs[0].Model != "claude-judge" || reqs[0].Node() != "output_superego" {
		t.Errorf("anthropic requests: %+v", reqs)
	}
	if got := len(openai.Requests()); got != 3 {
		t.Errorf("%d OpenAI requests, want 3", got)
	}
}

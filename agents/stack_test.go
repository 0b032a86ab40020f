package agents_test

import (
	"context"
	"strings"
	"testing"

	"superego/agents"
	"superego/agents/agentstest"
	"superego/engine"
	"superego/flow"
	"superego/tools"
)

const stackFlow = `{"name": "s", "graph": {"start": "in", "nodes": {
  "in": {"type": "superego", "agent_id": "in", "constitution": "FLOOR-OF-IN", "transitions": {"ACCEPT": "calc", "BLOCK": null}},
  "calc": {"type": "inner_agent", "agent_id": "calc", "system_prompt": "SYSTEM-PROMPT-CALC", "tools": ["calculator"],
    "tool_judge": "act", "permissions": {"default": "allow"}, "judge_results": ["calculator"], "result_judge": "act",
    "transitions": {"COMPLETE": "out", "NEEDS_TOOL": "self"}},
  "act": {"type": "superego", "agent_id": "act", "constitution": "FLOOR-OF-ACT", "transitions": {"BLOCK": null}},
  "out": {"type": "superego", "agent_id": "out", "constitution": "FLOOR-OF-OUT", "stack": "off", "transitions": {"ACCEPT": null, "BLOCK": null}}}}}`

const userInput = "USER-TEXT-9c1 What is 6*7?"

// stackScript plays stackFlow: each judge says what its decision rests on.
func stackScript(r agentstest.Request) agentstest.Answer {
	basis := func(decision, basis string) agentstest.Answer {
		return agentstest.Answer{Text: `{"thinking": "t", "decision": "` + decision + `", "agent_guidance": "", "basis": "` + basis + `", "response": "RESPONSE-` + r.Node() + `"}`}
	}
	switch r.Node() {
	case "in":
		return basis("ACCEPT", "vegan")
	case "act":
		return basis("ACCEPT", "floor")
	case "out":
		return basis("ACCEPT", "floor") // said unasked: not recorded
	case "calc":
		if res := r.ToolResults(); len(res) > 0 {
			return agentstest.Reply("t", "COMPLETE", "", "42")
		}
		return agentstest.Answer{ToolCalls: []agentstest.Call{{ID: "call_1", Name: "calculator", Args: `{"expression":"6*7"}`}}}
	}
	return agentstest.Answer{Status: 500, Text: "unknown node"}
}

// provider is a fake provider's server, and the providers that reach it.
type provider struct {
	name   string
	server *agentstest.Server
	p      *agents.Providers
}

// bothProviders are a fake OpenAI and a fake Anthropic playing script,
// each the default model of its providers.
func bothProviders(t *testing.T, script func(agentstest.Request) agentstest.Answer) []provider {
	openai, anthropic := agentstest.OpenAI(t, script), agentstest.Anthropic(t, script)
	return []provider{
		{"openai", openai, &agents.Providers{Default: "openai:gpt-test", OpenAIKey: "k", OpenAIBaseURL: openai.URL + "/v1"}},
		{"anthropic", anthropic, &agents.Providers{Default: "anthropic:claude-test", AnthropicKey: "k", AnthropicBaseURL: anthropic.URL}},
	}
}

// A stacked judge's system message, on the wire of each provider, holds
// its floor first, marked binding, then the user's constitutions in the
// stack's order, each with its level, and nothing of the request: the
// judge of calls and results gets the stack as a message's judge does; a
// node with "stack": "off" and an inner agent get none of it. The basis
// is asked for before the response, so that only the response streams.
func TestAStackedJudgesSystemMessage(t *testing.T) {
	t.Parallel()
	lib := flow.Library{"vegan": "# Vegan\nVEGAN-TEXT", "child_safe": "CHILD-TEXT"}
	stack := []flow.StackEntry{{Name: "vegan", Adherence: 4}, {Name: "child_safe", Adherence: 1}}
	for _, c := range bothProviders(t, stackScript) {
		t.Run(c.name, func(t *testing.T) {
			agent := &agents.Agent{Model: c.p.Model, Tools: tools.Set{"calculator": tools.Calculator()}}
			r := executeStacked(t, agent, lib, stack)
			if r.out.Status != flow.StatusCompleted {
				t.Fatalf("outcome %+v", r.out)
			}
			systems := map[string]string{}
			for _, req := range c.server.Requests() {
				systems[req.Node()] = req.System
			}
			for _, node := range []string{"in", "act"} {
				s := systems[node]
				order := []string{"is the floor: it is binding", "FLOOR-OF-" + strings.ToUpper(node), "None of them lifts the floor",
					`<user_constitution name="vegan" adherence="4">`, "VEGAN-TEXT", `<user_constitution name="child_safe" adherence="1">`, "CHILD-TEXT",
					"Decide with exactly one of", `"basis":`, `"response":`}
				at := -1
				for _, part := range order {
					i := strings.Index(s, part)
					if i <= at {
						t.Errorf("%s's system message: %q is missing or out of order:\n%s", node, part, s)
						break
					}
					at = i
				}
				if strings.Contains(s, "USER-TEXT") {
					t.Errorf("%s's system message holds the request's text", node)
				}
			}
			for _, node := range []string{"out", "calc"} {
				if s := systems[node]; s == "" || strings.Contains(s, "VEGAN-TEXT") || strings.Contains(s, "user_constitution") || strings.Contains(s, `"basis"`) {
					t.Errorf("%s was given the stack:\n%s", node, s)
				}
			}
			bases := map[string]string{}
			for _, s := range r.steps() {
				if s.Node != "" {
					bases[s.Node+"/"+s.Decision] = s.Basis
				}
			}
			if bases["in/ACCEPT"] != "vegan" || bases["act/ACCEPT"] != "floor" || bases["out/ACCEPT"] != "" {
				t.Errorf("bases recorded: %v", bases)
			}
			if got := r.partials("in"); got != "RESPONSE-in" {
				t.Errorf("the stacked judge streamed %q: only its response may stream", got)
			}
		})
	}
}

// The node's prompt is built once; a stack varies by run, and each run's
// judge gets its own, never another run's: not even one of the same names
// and levels from another library, whose texts differ.
func TestPromptCacheKeepsStacksApart(t *testing.T) {
	t.Parallel()
	server := agentstest.OpenAI(t, stackScript)
	p := &agents.Providers{Default: "openai:gpt-test", OpenAIKey: "k", OpenAIBaseURL: server.URL + "/v1"}
	agent := &agents.Agent{Model: p.Model, Tools: tools.Set{"calculator": tools.Calculator()}}
	for _, c := range []struct {
		stack []flow.StackEntry
		text  string // the library's text of its one constitution
	}{
		{[]flow.StackEntry{{Name: "vegan", Adherence: 4}}, "VEGAN-TEXT"},
		{[]flow.StackEntry{{Name: "child_safe", Adherence: 5}}, "CHILD-TEXT"},
		{[]flow.StackEntry{{Name: "vegan", Adherence: 4}}, "VEGAN-TEXT"},
		{[]flow.StackEntry{{Name: "vegan", Adherence: 4}}, "VEGAN-TXT2"},
		{nil, ""},
	} {
		before := len(server.Requests())
		lib := flow.Library{}
		if c.stack != nil {
			lib[c.stack[0].Name] = c.text
		}
		executeStacked(t, agent, lib, c.stack)
		for _, req := range server.Requests()[before:] {
			if req.Node() != "in" {
				continue
			}
			switch {
			case c.stack == nil && strings.Contains(req.System, "user_constitution"):
				t.Errorf("a run with no stack was judged under an earlier run's:\n%s", req.System)
			case c.stack != nil && (!strings.Contains(req.System, c.text) || strings.Count(req.System, "<user_constitution") != 1):
				t.Errorf("a run under %s was judged under:\n%s", c.text, req.System)
			}
		}
	}
}

func executeStacked(t *testing.T, agent *agents.Agent, lib flow.Library, stack []flow.StackEntry) run {
	t.Helper()
	d, err := flow.Parse([]byte(stackFlow), flow.Catalog{Tools: agent.Tools.Names(), Providers: agents.ProviderNames})
	if err != nil {
		t.Fatal(err)
	}
	var r run
	r.out = (&engine.Executor{Agent: agent, Library: lib}).Execute(context.Background(),
		engine.Turn{FlowID: "s", Def: d, InstanceID: "i", RunID: "r", Input: userInput, Options: flow.RunOptions{Stack: stack}},
		engine.Sink{Emit: func(evs ...flow.Event) error { r.events = append(r.events, evs...); return nil }})
	return r
}

// The offline model read none of a stack: under one, its judges name the
// floor as their basis; with none, they give no basis, as they were not
// asked for one.
func TestOfflineJudgesNameTheFloor(t *testing.T) {
	t.Parallel()
	p := &agents.Providers{Default: "offline"}
	agent := &agents.Agent{Model: p.Model, Tools: tools.Set{"calculator": tools.Calculator()}}
	for _, c := range []struct {
		stack []flow.StackEntry
		want  string
	}{{[]flow.StackEntry{{Name: "vegan", Adherence: 3}}, "floor"}, {nil, ""}} {
		r := executeStacked(t, agent, flow.Library{"vegan": "VEGAN-TEXT"}, c.stack)
		if r.out.Status != flow.StatusCompleted {
			t.Fatalf("outcome %+v", r.out)
		}
		for _, s := range r.steps() {
			if s.Node == "in" && s.Basis != c.want {
				t.Errorf("stack %v: the offline judge's basis %q, want %q", c.stack, s.Basis, c.want)
			}
		}
	}
}

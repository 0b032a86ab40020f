package agents_test

import (
	"context"
	"encoding/json"
	"strings"
	"sync"
	"testing"

	"superego/agents"
	"superego/agents/agentstest"
	"superego/engine"
	"superego/flow"
	"superego/tools"
)

// With Content, an observer is given a call's prompt with every text a
// client has not been shown replaced, as written and as JSON quotes it,
// and the response only where a client sees it as it is written; never
// the reply's thinking or agent_guidance.
func TestObserverContent(t *testing.T) {
	t.Parallel()
	const draft = "DRAFT \"quoted\" <b>\nsecond line"
	const guidance = "GUIDANCE\twith a tab & <tags>"
	def, err := flow.Parse([]byte(`{"name": "s", "graph": {"start": "assistant", "nodes": {
	  "assistant": {"type": "inner_agent", "agent_id": "assistant", "system_prompt": "Answer.", "tools": ["calculator"],
	    "transitions": {"COMPLETE": "judge", "NEEDS_TOOL": "self"}},
	  "judge": {"type": "superego", "agent_id": "judge", "constitution": "Judge.", "allowed_actions": ["READ_ONLY"],
	    "transitions": {"ACCEPT": null, "BLOCK": null}}}}}`), flow.Catalog{Tools: []string{"calculator"}})
	if err != nil {
		t.Fatal(err)
	}
	model := agents.Model{LLM: agentstest.Func(func(r agentstest.Request) agentstest.Answer {
		return agentstest.Reply(thinkingMarker, "ACCEPT", guidanceMarker, "Visible verdict.")
	}), Name: "openai:gpt-test"}
	var mu sync.Mutex
	var calls []agents.ModelCall
	var results []agents.ModelResult
	a := &agents.Agent{Model: func(string) (agents.Model, error) { return model, nil }, Tools: tools.Set{"calculator": tools.Calculator()},
		Observe: &agents.Observer{Content: true,
			ModelStarted: func(ctx context.Context, c agents.ModelCall) context.Context {
				mu.Lock()
				defer mu.Unlock()
				calls = append(calls, c)
				return ctx
			},
			ModelEnded: func(ctx context.Context, c agents.ModelCall, r agents.ModelResult) {
				mu.Lock()
				defer mu.Unlock()
				results = append(results, r)
			}}}
	history, _ := json.Marshal([]map[string]string{{"response": draft}})
	judge := &engine.Task{Node: def.Graph.Nodes["judge"], StepID: "4", UserMessage: "What is 6*7?", Input: draft, InputFrom: "assistant",
		Guidance: guidance, GuidanceFrom: "assistant", Decisions: []string{"ACCEPT", "BLOCK"},
		ToolRounds: []*flow.Step{{Node: "judge", Decision: flow.NeedsTool, ToolUsage: []flow.ToolUse{
			{ID: "c1", ToolName: "supervised_get_conversation_history", Input: json.RawMessage(`{}`), Output: string(history)}}}}}
	assistant := &engine.Task{Node: def.Graph.Nodes["assistant"], StepID: "3", UserMessage: "What is 6*7?", Input: "What is 6*7?",
		Guidance: guidance, GuidanceFrom: "input_superego", Decisions: []string{"COMPLETE"},
		ToolRounds: []*flow.Step{{Node: "assistant", Decision: flow.NeedsTool, ToolUsage: []flow.ToolUse{
			{ID: "c1", ToolName: "calculator", Input: json.RawMessage(`{"expression":"6*7","note":"` + "TOOL-INPUT" + `"}`), Output: "42-TOOL-OUTPUT"}}}}}
	for _, task := range []*engine.Task{judge, assistant} {
		if _, err := a.Act(context.Background(), task, func(flow.Event) {}); err != nil {
			t.Fatal(err)
		}
	}
	if len(calls) != 2 || len(results) != 2 {
		t.Fatalf("%d calls, %d results observed", len(calls), len(results))
	}
	for i, c := range calls {
		b, _ := json.Marshal(c.Prompt)
		prompt := string(b)
		for _, hidden := range []string{"DRAFT", "GUIDANCE", "TOOL-INPUT", "42-TOOL-OUTPUT", thinkingMarker, guidanceMarker} {
			if strings.Contains(prompt, hidden) {
				t.Errorf("call %d: %s in the prompt:\n%s", i, hidden, prompt)
			}
		}
		if !strings.Contains(prompt, "What is 6*7?") || !strings.Contains(prompt, "[hidden]") || c.Provider != "openai" || c.Model != "gpt-test" {
			t.Errorf("call %d: %s %s %s", i, c.Provider, c.Model, prompt)
		}
	}
	// The judge's verdict is what a client sees; the assistant's draft is
	// held for its judge, and not given.
	if results[0].Response != "Visible verdict." || results[1].Response != "" || results[0].Outcome != "ok" {
		t.Errorf("results: %+v", results)
	}
}

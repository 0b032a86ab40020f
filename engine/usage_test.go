package engine_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"

	"superego/engine"
	"superego/flow"
)

// done always carries usage, zeros included: a model that reports no
// tokens (the offline one) and a run that fails before any call still
// end with it, so that a script reading done.usage finds it.
func TestDoneAlwaysCarriesUsage(t *testing.T) {
	t.Parallel()
	def := mustParse(t, guarded)
	const zeros = `{"prompt_tokens":0,"completion_tokens":0,"speculative_prompt_tokens":0,"speculative_completion_tokens":0}`
	counted := reply("ACCEPT", "")
	counted.Usage = &flow.Usage{PromptTokens: 3, CompletionTokens: 2}
	for _, c := range []struct {
		name  string
		agent engine.Agent
		want  string
	}{
		{"no tokens reported", byNode(map[string][]engine.Reply{"in": {reply("ACCEPT", "")}, "work": {reply("COMPLETE", "done")}, "out": {reply("ACCEPT", "")}}), zeros},
		{"blocked at once", byNode(map[string][]engine.Reply{"in": {reply("BLOCK", "no")}}), zeros},
		{"failed", byNode(nil), zeros},
		{"tokens reported", byNode(map[string][]engine.Reply{"in": {counted}, "work": {reply("COMPLETE", "done")}, "out": {reply("ACCEPT", "")}}),
			`{"prompt_tokens":3,"completion_tokens":2,"speculative_prompt_tokens":0,"speculative_completion_tokens":0}`},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := runTurn(t, def, c.agent, nil, "hi")
			done := r.events[len(r.events)-1]
			b, _ := json.Marshal(done.Data)
			var got struct{ Usage json.RawMessage }
			json.Unmarshal(b, &got)
			if done.Name != flow.EventDone || string(got.Usage) != c.want {
				t.Errorf("%s: %s, want usage %s", done.Name, b, c.want)
			}
		})
	}
}

// A call that fails after a call it proposed was judged and then replaced
// made no step, and its tokens count all the same, with that judgement's:
// in a speculative turn, which is then discarded, and when the node runs
// again for real.
func TestFailedSpeculativeTurnCountsItsJudgements(t *testing.T) {
	t.Parallel()
	def, err := flow.Parse([]byte(`{"name": "s", "graph": {"start": "in", "nodes": {
	  "in": {"type": "superego", "agent_id": "in", "constitution": "c", "speculate": true, "transitions": {"ACCEPT": "a", "BLOCK": null}},
	  "a": {"type": "inner_agent", "agent_id": "a", "tools": ["calculator"], "tool_judge": "j", "transitions": {"COMPLETE": null, "NEEDS_TOOL": "self"}},
	  "j": {"type": "superego", "agent_id": "j", "constitution": "c"}}}}`), actionCatalog)
	if err != nil {
		t.Fatal(err)
	}
	agent := agentFunc(func(task *engine.Task) (engine.Reply, error) {
		switch task.Node.Name {
		case "j":
			return engine.Reply{Decision: flow.Accept, Usage: &flow.Usage{PromptTokens: 7, CompletionTokens: 1}}, nil
		case "a":
			run := func(context.Context, json.RawMessage) engine.Result { return engine.Result{Output: "2"} }
			task.Calls.Propose(0, flow.ToolUse{ID: "c1", ToolName: "calculator", Input: []byte(`{"expression":"1+1"}`)}, engine.ToolInfo{}, run)
			task.Calls.Propose(0, flow.ToolUse{ID: "c1", ToolName: "calculator", Input: []byte(`{"expression":"2+2"}`)}, engine.ToolInfo{}, run)
			return engine.Reply{Usage: &flow.Usage{PromptTokens: 100, CompletionTokens: 10}}, errors.New("the provider failed")
		}
		return reply(flow.Accept, ""), nil
	})
	r := runTurn(t, def, agent, nil, "hi")
	done, ok := r.events[len(r.events)-1].Data.(flow.Done)
	if !ok || done.Status != flow.StatusFailed || done.Usage == nil {
		t.Fatalf("the run's end: %+v", r.events[len(r.events)-1])
	}
	// The node's run for real did the same: its tokens are the run's.
	if u := *done.Usage; u.SpeculativePromptTokens != 107 || u.SpeculativeCompletionTokens != 11 || u.PromptTokens != 107 || u.CompletionTokens != 11 {
		t.Errorf("usage %+v: want, both speculative and not, a replaced call's judgement (7+1) and a failed call (100+10)", u)
	}
}

package engine_test

import (
	"context"
	"encoding/json"
	"strings"
	"sync"
	"testing"

	"superego/engine"
	"superego/flow"
)

// A run resumed after a crash works on the message its turn opened with:
// the node it resumes at, and those after it, are given the user's
// message, as they would have been had the run not been interrupted.
func TestResumedRunKeepsTheUsersMessage(t *testing.T) {
	t.Parallel()
	def := mustParse(t, `{"name": "g", "graph": {"start": "in", "nodes": {
	  "in": {"type": "superego", "agent_id": "in", "constitution": "c", "transitions": {"ACCEPT": "agent", "BLOCK": null}},
	  "agent": {"type": "inner_agent", "agent_id": "agent", "transitions": {"COMPLETE": "out"}},
	  "out": {"type": "superego", "agent_id": "out", "constitution": "c", "transitions": {"ACCEPT": null, "BLOCK": null}}}}}`)
	next := func(s string) *string { return &s }
	// The log of the interrupted run: the user's message, and the input
	// superego's ACCEPT; the crash came before the agent's step.
	prior := []flow.Step{
		{StepID: "1", AgentID: "user", Role: flow.RoleUser, Response: "What is 6*7?", NextAgent: next("in")},
		{StepID: "2", AgentID: "in", Node: "in", Role: flow.RoleAssistant, Decision: "ACCEPT", NextAgent: next("agent")},
	}
	var mu sync.Mutex
	seen := map[string][2]string{} // node → its task's user message and input
	agent := agentFunc(func(task *engine.Task) (engine.Reply, error) {
		mu.Lock()
		seen[task.Node.Name] = [2]string{task.UserMessage, task.Input}
		mu.Unlock()
		if task.Node.Name == "agent" {
			return reply("COMPLETE", "42"), nil
		}
		return reply("ACCEPT", ""), nil
	})
	out := (&engine.Executor{Agent: agent}).Execute(context.Background(),
		engine.Turn{FlowID: "g", Def: def, InstanceID: "i", RunID: "r2", Steps: prior, Resume: true},
		engine.Sink{Emit: func(...flow.Event) error { return nil }})
	if out.Status != flow.StatusCompleted || out.Response != "42" {
		t.Fatalf("resumed run: %s %q", out.Status, out.Response)
	}
	if seen["agent"] != [2]string{"What is 6*7?", "What is 6*7?"} || seen["out"] != [2]string{"What is 6*7?", "42"} {
		t.Errorf("what the resumed nodes were given: %q", seen)
	}
}

// A run cut short while the tool calls of an agent given a withheld draft
// ran resumes by recording that iteration's step without its input: the
// draft was never shown to the user, and no step shows it (docs/gating.md).
func TestInterruptedCallsOnAWithheldDraftKeepItHidden(t *testing.T) {
	t.Parallel()
	const draft = "WITHHELD-DRAFT-MARKER"
	def := mustParse(t, `{"name": "w", "graph": {"start": "draft", "nodes": {
	  "draft": {"type": "inner_agent", "agent_id": "draft", "transitions": {"COMPLETE": "fixer"}},
	  "fixer": {"type": "inner_agent", "agent_id": "fixer", "tools": ["calculator"], "transitions": {"COMPLETE": null, "NEEDS_TOOL": "self"}}}}}`)
	next := func(s string) *string { return &s }
	prior := []flow.Step{
		{StepID: "1", AgentID: "user", Role: flow.RoleUser, Response: "Q", NextAgent: next("draft")},
		{StepID: "2", AgentID: "draft", Node: "draft", Role: flow.RoleAssistant, Decision: "COMPLETE", Withheld: "gate", WithheldResponse: draft, NextAgent: next("fixer")},
	}
	// The log's last event: the fixer's call began, and the crash came.
	st := flow.Replay([]flow.Event{{ID: 1, Name: flow.EventToolCall, Data: flow.ToolCall{Node: "fixer", ToolName: "calculator", Input: []byte(`{"expression":"1+1"}`), ToolCallID: "c1"}}})
	agent := agentFunc(func(task *engine.Task) (engine.Reply, error) { return reply("COMPLETE", "fixed"), nil })
	var steps []flow.Step
	out := (&engine.Executor{Agent: agent}).Execute(context.Background(),
		engine.Turn{FlowID: "w", Def: def, InstanceID: "i", RunID: "r2", Steps: prior, Resume: true, Unfinished: st.Unfinished},
		engine.Sink{Emit: func(evs ...flow.Event) error {
			for _, e := range evs {
				if s, ok := e.Data.(*flow.Step); ok {
					steps = append(steps, *s)
				}
			}
			return nil
		}})
	if out.Status != flow.StatusCompleted || len(steps) == 0 || steps[0].Node != "fixer" || steps[0].Decision != flow.NeedsTool {
		t.Fatalf("resumed run: %s, steps %+v", out.Status, steps)
	}
	for _, s := range steps {
		if strings.Contains(s.Input, draft) {
			t.Errorf("step %s (%s) shows the withheld draft as its input", s.StepID, s.Node)
		}
	}
}

// The results of the calls an agent ran are durable before its model reads
// them, read-only ones too: a run resumed after a crash goes on with what
// the model read, and not with "interrupted" for a call whose result it
// had.
func TestResultsAreDurableBeforeTheModelReadsThem(t *testing.T) {
	t.Parallel()
	def, err := flow.Parse([]byte(`{"name": "r", "graph": {"start": "a", "nodes": {
	  "a": {"type": "inner_agent", "agent_id": "a", "tools": ["calculator"], "transitions": {"COMPLETE": null, "NEEDS_TOOL": "self"}}}}}`), actionCatalog)
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var order []string
	note := func(s string) {
		mu.Lock()
		order = append(order, s)
		mu.Unlock()
	}
	agent := agentFunc(func(task *engine.Task) (engine.Reply, error) {
		note("model")
		if len(task.ToolRounds) > 0 {
			return reply("COMPLETE", "42"), nil
		}
		task.Calls.Propose(0, flow.ToolUse{ID: "c1", ToolName: "calculator", Input: []byte(`{"expression":"6*7"}`)},
			engine.ToolInfo{ReadOnly: true, ClosedWorld: true}, func(context.Context, json.RawMessage) engine.Result { return engine.Result{Output: "42"} })
		uses, err := task.Calls.Finish(context.Background(), 1)
		return engine.Reply{ToolUsage: uses}, err
	})
	out := (&engine.Executor{Agent: agent}).Execute(context.Background(), engine.Turn{FlowID: "r", Def: def, InstanceID: "i", RunID: "r", Input: "6*7?"},
		engine.Sink{
			Emit: func(evs ...flow.Event) error {
				for _, e := range evs {
					note(e.Name)
				}
				return nil
			},
			Sync: func() error { note("sync"); return nil },
		})
	if out.Status != flow.StatusCompleted {
		t.Fatalf("run: %s %v", out.Status, out.Err)
	}
	got := strings.Join(order, " ")
	result, second := strings.Index(got, flow.EventToolResult), strings.LastIndex(got, "model")
	if result < 0 || !strings.Contains(got[result:second], "sync") {
		t.Errorf("the tool's result is not durable before the model reads it: %s", got)
	}
}

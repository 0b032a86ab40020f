package engine_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"superego/engine"
	"superego/flow"
)

const reviewedFlow = `{"name": "r", "graph": {"start": "sup", "nodes": {
  "sup": {"type": "superego", "agent_id": "sup", "constitution": "c", "allowed_actions": ["READ_ONLY", "MODIFY_CONTEXT"], "review_changes": true,
          "max_iterations": 4, "transitions": {"ACCEPT": "work", "BLOCK": null, "HUMAN_REVIEW": "work", "NEEDS_TOOL": "self"}},
  "work": {"type": "inner_agent", "agent_id": "work", "transitions": {"COMPLETE": null}}
}}}`

var proposal = engine.Reply{ToolUsage: []flow.ToolUse{{ID: "c1", ToolName: "supervised_create_rule", Input: json.RawMessage(`{"name": "x", "text": "X."}`), Output: "proposed: …", Proposed: true}}}

// reviewTurn answers the review the log ends with, as the engine does.
func reviewTurn(def *flow.Definition, agent engine.Agent, prior []flow.Step, approve bool) result {
	var r result
	x := &engine.Executor{Agent: agent}
	r.out = x.Execute(context.Background(), engine.Turn{FlowID: "f", Def: def, InstanceID: "i", RunID: "r2", Steps: prior, Options: flow.RunOptions{Review: &flow.Review{Approve: approve, Note: "ok"}}},
		engine.Sink{Emit: func(evs ...flow.Event) error {
			for _, e := range evs {
				if s, ok := e.Data.(*flow.Step); ok {
					r.steps = append(r.steps, *s)
				}
			}
			return nil
		}})
	return r
}

// A supervisor with review_changes that proposed changes waits for a
// person, whatever it decided; approved or rejected, the run goes on as it
// decided, and only the answer says whether the changes apply.
func TestProposedChangesWaitForReview(t *testing.T) {
	t.Parallel()
	def := mustParse(t, reviewedFlow)
	for _, c := range []struct {
		name     string
		decision string
		approve  bool
		trace    string
		status   string
	}{
		{"accept, approved", "ACCEPT", true, "sup:APPROVED work:COMPLETE", flow.StatusCompleted},
		{"accept, rejected", "ACCEPT", false, "sup:REJECTED work:COMPLETE", flow.StatusCompleted},
		{"block, approved", "BLOCK", true, "sup:APPROVED", flow.StatusBlocked},
	} {
		t.Run(c.name, func(t *testing.T) {
			agent := byNode(map[string][]engine.Reply{"sup": {proposal, reply(c.decision, "")}, "work": {reply("COMPLETE", "done")}})
			first := runTurn(t, def, agent, nil, "hello")
			if first.out.Status != flow.StatusAwaitingReview || first.trace() != "sup:NEEDS_TOOL sup:"+c.decision {
				t.Fatalf("first run: %s, %s", first.out.Status, first.trace())
			}
			second := reviewTurn(def, agent, first.steps, c.approve)
			if second.out.Status != c.status || second.trace() != c.trace {
				t.Errorf("after the review: %s, %s", second.out.Status, second.trace())
			}
			if s := second.steps[0]; s.AgentID != flow.Reviewer || s.Response != "ok" {
				t.Errorf("the review's step: %+v", s)
			}
		})
	}
	// Without proposals, or with changes that failed, nothing waits.
	failed := engine.Reply{ToolUsage: []flow.ToolUse{{ID: "c1", ToolName: "supervised_create_rule", Input: json.RawMessage(`{}`), Error: "refused"}}}
	for _, script := range [][]engine.Reply{{reply("ACCEPT", "")}, {failed, reply("ACCEPT", "")}} {
		r := runTurn(t, def, byNode(map[string][]engine.Reply{"sup": script, "work": {reply("COMPLETE", "done")}}), nil, "hello")
		if r.out.Status != flow.StatusCompleted {
			t.Errorf("%s: %s", r.trace(), r.out.Status)
		}
	}
	// A supervisor's own HUMAN_REVIEW keeps its meaning: rejected, the
	// run is blocked.
	agent := byNode(map[string][]engine.Reply{"sup": {proposal, reply("HUMAN_REVIEW", "a person must look")}, "work": {reply("COMPLETE", "done")}})
	first := runTurn(t, def, agent, nil, "hello")
	if r := reviewTurn(def, agent, first.steps, false); first.out.Status != flow.StatusAwaitingReview || r.out.Status != flow.StatusBlocked || r.trace() != "sup:REJECTED" {
		t.Errorf("HUMAN_REVIEW: %s, then %s %s", first.out.Status, r.out.Status, r.trace())
	}
}

// The executor hands an inner agent and a supervisor what makes the
// instance's context, and other nodes nothing of it.
func TestTasksCarryWhatSupervisionReads(t *testing.T) {
	t.Parallel()
	def := mustParse(t, `{"name": "s", "context": [{"kind": "rule", "name": "a", "text": "A."}], "graph": {"start": "in", "nodes": {
	  "in": {"type": "superego", "agent_id": "in", "constitution": "c", "transitions": {"ACCEPT": "sup"}},
	  "sup": {"type": "superego", "agent_id": "sup", "constitution": "c", "allowed_actions": ["READ_ONLY"], "transitions": {"ACCEPT": "work"}},
	  "work": {"type": "inner_agent", "agent_id": "work", "tools": ["calculator", "mcp__fs__*"], "transitions": {"COMPLETE": null}}}}}`)
	got := map[string]*engine.Supervised{}
	agent := agentFunc(func(task *engine.Task) (engine.Reply, error) {
		got[task.Node.Name] = task.Supervised
		if task.Node.Name == "work" {
			return reply("COMPLETE", "done"), nil
		}
		return engine.Reply{Decision: "ACCEPT", Thinking: "HIDDEN-T", AgentGuidance: "HIDDEN-G"}, nil
	})
	x := &engine.Executor{Agent: agent, Context: []flow.ContextItem{{Kind: "reference", Name: "r", Text: "R."}}}
	x.Execute(context.Background(), engine.Turn{FlowID: "f", Def: def, InstanceID: "i", RunID: "r", Input: "hi"}, engine.Sink{Emit: func(...flow.Event) error { return nil }})
	if got["in"] != nil || got["sup"] == nil || got["work"] == nil {
		t.Fatalf("supervised: %+v", got)
	}
	w := got["work"]
	if len(w.Base) != 2 || w.Base[0].Name != "r" || w.Base[1].Name != "a" || strings.Join(w.Tools, " ") != "calculator mcp__fs__*" || len(w.Steps) != 3 {
		t.Errorf("the inner agent's: %+v", w)
	}
	for _, s := range w.Steps {
		if s.Thinking != "" || s.AgentGuidance != "" {
			t.Errorf("a hidden field in the steps it is given: %+v", s)
		}
	}
}

func TestMCPToolNamesInFlows(t *testing.T) {
	t.Parallel()
	cat := flow.Catalog{Tools: []string{"calculator"}, MCPServers: []string{"fs", "my_web"}}
	node := func(tools string) string {
		return `{"name": "x", "graph": {"start": "a", "nodes": {"a": {"type": "inner_agent", "agent_id": "a", "tools": ` + tools + `, "transitions": {"COMPLETE": null}}}}}`
	}
	if _, err := flow.Parse([]byte(node(`["calculator", "mcp__fs__read_file", "mcp__fs__*", "mcp__my_web__get__page"]`)), cat); err != nil {
		t.Errorf("good names: %v", err)
	}
	for tools, want := range map[string]string{
		`["mcp__fss__read_file"]`:   `graph.nodes.a.tools.0: unknown MCP server "fss" (servers in mcp.json: fs, my_web)`,
		`["calculator", "mcp__fs"]`: `graph.nodes.a.tools.1: "mcp__fs": an MCP tool is named mcp__SERVER__TOOL, or mcp__SERVER__* for all of a server's tools`,
		`["mcp__fs__"]`:             `graph.nodes.a.tools.0: "mcp__fs__": an MCP tool is named`,
		`["mcp__fs__a.b"]`:          `graph.nodes.a.tools.0: "mcp__fs__a.b": an MCP tool is named`,
	} {
		_, err := flow.Parse([]byte(node(tools)), cat)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want %q", tools, err, want)
		}
	}
	_, err := flow.Parse([]byte(node(`["mcp__fs__*"]`)), flow.Catalog{Tools: []string{"calculator"}})
	if err == nil || !strings.Contains(err.Error(), `unknown MCP server "fs" (mcp.json has none)`) {
		t.Errorf("no mcp.json: %v", err)
	}
	for def, want := range map[string]string{
		`"review_changes": true, "allowed_actions": ["READ_ONLY"]`:                         `graph.nodes.s.review_changes: only a supervisor allowed MODIFY_CONTEXT makes changes to review`,
		`"review_changes": true, "allowed_actions": ["MODIFY_CONTEXT"], "speculate": true`: `graph.nodes.s.review_changes: a supervisor whose changes wait for a person's review cannot speculate`,
	} {
		_, err := flow.Parse([]byte(`{"name": "x", "graph": {"start": "s", "nodes": {
		  "s": {"type": "superego", "agent_id": "s", "constitution": "c", `+def+`, "transitions": {"ACCEPT": "a"}},
		  "a": {"type": "inner_agent", "agent_id": "a", "transitions": {"COMPLETE": null}}}}}`), cat)
		var inv *flow.InvalidError
		if !errors.As(err, &inv) || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v", def, err)
		}
	}
}

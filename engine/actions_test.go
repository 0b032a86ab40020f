package engine_test

import (
	"strings"
	"testing"

	"superego/engine"
	"superego/flow"
)

var actionCatalog = flow.Catalog{Tools: []string{"read_file", "write_file", "delete_file", "calculator"}, MCPServers: []string{"mail"}}

// A judge's task holds what a client may not have been shown (a held
// call, a result about to be withheld): an observer records no text of
// its answer, and an error that quotes its request has them taken out.
func TestAJudgesTaskIsHeld(t *testing.T) {
	t.Parallel()
	def, err := flow.Parse([]byte(`{"name": "x", "graph": {"start": "a", "nodes": {
	  "a": {"type": "inner_agent", "agent_id": "a", "tools": ["write_file", "mcp__mail__*"], "tool_judge": "j", "result_judge": "j",
	    "transitions": {"COMPLETE": null, "NEEDS_TOOL": "self"}},
	  "j": {"type": "superego", "agent_id": "j", "constitution": "c"}}}}`), actionCatalog)
	if err != nil {
		t.Fatal(err)
	}
	task := &engine.Task{Node: def.Graph.Nodes["j"], Action: &engine.Action{Kind: flow.KindResult,
		Call:   flow.ToolUse{ToolName: "mcp__mail__read", Input: []byte(`{"box": "ARGS-MARK"}`), Output: "RESULT-MARK"},
		Others: []flow.ToolUse{{ToolName: "write_file", Input: []byte(`{"path": "OTHER-MARK"}`)}}}}
	hidden := strings.Join(task.Hidden(), " ")
	if !task.Held() || !strings.Contains(hidden, "ARGS-MARK") || !strings.Contains(hidden, "RESULT-MARK") || !strings.Contains(hidden, "OTHER-MARK") {
		t.Errorf("held %v, hidden %q", task.Held(), hidden)
	}
}

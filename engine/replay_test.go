package engine_test

import (
	"context"
	"testing"

	"superego/engine"
	"superego/flow"
)

// A step a replay reuses made no call: it is reused, and not cached, even
// where the step it copies had its reply from the reply cache; it costs no
// tokens.
func TestReplayedStepsAreReusedNotCached(t *testing.T) {
	t.Parallel()
	def := mustParse(t, `{"name": "g", "graph": {"start": "in", "nodes": {
	  "in": {"type": "superego", "agent_id": "in", "constitution": "c", "transitions": {"ACCEPT": "agent", "BLOCK": null}},
	  "agent": {"type": "inner_agent", "agent_id": "agent", "transitions": {"COMPLETE": "out"}},
	  "out": {"type": "superego", "agent_id": "out", "constitution": "c", "transitions": {"ACCEPT": null, "BLOCK": null}}}}}`)
	next := func(s string) *string { return &s }
	usage := &flow.Usage{PromptTokens: 11, CompletionTokens: 7}
	recorded := []flow.Step{
		{StepID: "2", AgentID: "in", Node: "in", Role: flow.RoleAssistant, Decision: "ACCEPT", NextAgent: next("agent"), Model: "m", Usage: usage, Cached: true},
		{StepID: "3", AgentID: "agent", Node: "agent", Role: flow.RoleAssistant, Decision: "COMPLETE", Response: "answer", NextAgent: next("out"), Model: "m", Usage: usage, Cached: true},
		{StepID: "4", AgentID: "out", Node: "out", Role: flow.RoleAssistant, Decision: "ACCEPT", Model: "m", Usage: usage, Cached: true},
	}
	var steps []flow.Step
	var done flow.Done
	out := (&engine.Executor{Agent: byNode(map[string][]engine.Reply{"in": {reply("ACCEPT", "")}})}).Execute(context.Background(),
		engine.Turn{FlowID: "g", Def: def, InstanceID: "i", RunID: "r", Input: "hello", Recorded: recorded,
			Options: flow.RunOptions{Replay: &flow.ReplayOf{Instance: "x", Ask: []string{"in"}}}},
		engine.Sink{Emit: func(evs ...flow.Event) error {
			for _, e := range evs {
				switch d := e.Data.(type) {
				case *flow.Step:
					steps = append(steps, *d)
				case flow.Done:
					done = d
				}
			}
			return nil
		}})
	if out.Status != flow.StatusCompleted || len(steps) != 4 || done.Replay == nil || *done.Replay != (flow.ReplayCounts{Reused: 2, Made: 1}) {
		t.Fatalf("replay: %s, %d steps, done %+v", out.Status, len(steps), done)
	}
	for _, s := range steps[2:] {
		if !s.Reused || s.Cached || s.Usage != nil || s.LatencyMS != 0 {
			t.Errorf("reused step %s (%s): reused %v, cached %v, usage %v", s.StepID, s.Node, s.Reused, s.Cached, s.Usage)
		}
	}
	if steps[1].Reused {
		t.Errorf("the step asked again says reused")
	}
}

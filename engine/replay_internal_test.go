package engine

import (
	"testing"

	"superego/flow"
)

// A replay interrupted after it reused a step of an agent, and resumed,
// takes the record's judgements of that step's calls as the replay made
// them, not again where the call comes back with its result: the changed
// judge is asked once per recorded call, across a crash too.
func TestResumedReplayTakesJudgementsOnce(t *testing.T) {
	t.Parallel()
	next := "agent"
	call := flow.ToolUse{ID: "c1", ToolName: "read_inbox", JudgedBy: &flow.JudgedBy{Node: "judge", StepID: "2", Decision: flow.Accept}, Client: true}
	back := call
	back.Output, back.ResultJudgedBy = "hello", &flow.JudgedBy{Node: "results", StepID: "4", Decision: flow.Accept}
	recorded := []flow.Step{
		{StepID: "2", Node: "judge", Decision: flow.Accept, NextAgent: &next, Judged: &flow.Judged{Node: "agent", ToolCallID: "c1", Kind: flow.KindCall}},
		{StepID: "3", Node: "agent", Decision: flow.NeedsTool, NextAgent: &next, ToolUsage: []flow.ToolUse{call}},
		{StepID: "4", Node: "results", Decision: flow.Accept, NextAgent: &next, Judged: &flow.Judged{Node: "agent", ToolCallID: "c1", Kind: flow.KindResult}},
		{StepID: "5", Node: "agent", Decision: flow.NeedsTool, NextAgent: &next, ToolUsage: []flow.ToolUse{back}},
	}
	p := newReplayer(recorded, &flow.ReplayOf{Ask: []string{"judge"}})
	// Before the crash, the replay asked the judge again (its step 7) and
	// reused the agent's step, which names that judgement.
	reused := recorded[1]
	reused.Reused, reused.ToolUsage = true, []flow.ToolUse{call}
	reused.ToolUsage[0].JudgedBy = &flow.JudgedBy{Node: "judge", StepID: "7", Decision: flow.Accept}
	p.walked(reused)
	if _, ok := p.judgement("agent", "c1", flow.KindCall); ok || p.ids["2"] != "7" {
		t.Errorf("the call's judgement, made before the crash, is taken again (ids %v)", p.ids)
	}
	if was, ok := p.judgement("agent", "c1", flow.KindResult); !ok || was.StepID != "4" {
		t.Errorf("the result's judgement, not made yet: %+v %v", was, ok)
	}
}

package flow

import "testing"

// A replay interrupted after it reused a step of an agent, and resumed,
// takes the record's judgements of that step's calls as the replay made
// them, not again where the call comes back with its result: the changed
// judge is asked once per recorded call, across a crash too.
func TestResumedReplayTakesJudgementsOnce(t *testing.T) {
	next := "agent"
	call := ToolUse{ID: "c1", ToolName: "read_inbox", JudgedBy: &JudgedBy{Node: "judge", StepID: "2", Decision: Accept}, Client: true}
	back := call
	back.Output, back.ResultJudgedBy = "hello", &JudgedBy{Node: "results", StepID: "4", Decision: Accept}
	recorded := []Step{
		{StepID: "2", Node: "judge", Decision: Accept, NextAgent: &next, Judged: &Judged{Node: "agent", ToolCallID: "c1", Kind: KindCall}},
		{StepID: "3", Node: "agent", Decision: NeedsTool, NextAgent: &next, ToolUsage: []ToolUse{call}},
		{StepID: "4", Node: "results", Decision: Accept, NextAgent: &next, Judged: &Judged{Node: "agent", ToolCallID: "c1", Kind: KindResult}},
		{StepID: "5", Node: "agent", Decision: NeedsTool, NextAgent: &next, ToolUsage: []ToolUse{back}},
	}
	p := newReplayer(recorded, &ReplayOf{Ask: []string{"judge"}})
	// Before the crash, the replay asked the judge again (its step 7) and
	// reused the agent's step, which names that judgement.
	reused := recorded[1]
	reused.Reused, reused.ToolUsage = true, []ToolUse{call}
	reused.ToolUsage[0].JudgedBy = &JudgedBy{Node: "judge", StepID: "7", Decision: Accept}
	p.walked(reused)
	if _, ok := p.judgement("agent", "c1", KindCall); ok || p.ids["2"] != "7" {
		t.Errorf("the call's judgement, made before the crash, is taken again (ids %v)", p.ids)
	}
	if was, ok := p.judgement("agent", "c1", KindResult); !ok || was.StepID != "4" {
		t.Errorf("the result's judgement, not made yet: %+v %v", was, ok)
	}
}

package api_test

import (
	"strings"
	"testing"

	"superego/agents/agentstest"
	"superego/flow"
)

// An agent whose calls a judge decides reads every round of its turn, as
// one whose calls nobody judges does: the judgements between its rounds
// are no reason to forget the first. A judge's guidance is for no agent:
// the agent reads a refusal as the call's result, and nothing else of it.
func TestAJudgedAgentReadsEveryRound(t *testing.T) {
	write := func(name string) agentstest.Answer {
		return agentstest.Answer{ToolCalls: []agentstest.Call{{ID: "w_" + name, Name: "write_file", Args: `{"path": "` + name + `", "content": "x"}`}}}
	}
	assistant := func(r agentstest.Request) agentstest.Answer {
		var read []string
		for _, m := range r.ToolResults() {
			read = append(read, m.Text)
		}
		switch len(read) {
		case 0:
			return write("a.txt")
		case 1:
			return write("b.txt")
		}
		return agentstest.Reply(thinkingMarker, "COMPLETE", guidanceMarker, "Read: "+strings.Join(read, " | "))
	}
	verdict := func(agentstest.Request) agentstest.Answer {
		return agentstest.Reply(thinkingMarker, "ACCEPT", guidanceMarker, "")
	}
	f := serveActions(t, map[string]string{"a": sprintf(actionsFlow, `, "tool_judge": "judge"`, "")}, judged(assistant, verdict))
	res := execute(t, f.fixture, "a", "Write a.txt, then b.txt.", "")
	if res.Status != flow.StatusCompleted || strings.Count(res.Response, "|") != 1 {
		t.Errorf("status %s, response %q: the agent forgot a round", res.Status, res.Response)
	}
	for i, r := range f.requests("assistant") {
		if strings.Contains(string(r.Body), guidanceMarker) {
			t.Errorf("the assistant's request %d carries the judge's guidance", i)
		}
	}
}

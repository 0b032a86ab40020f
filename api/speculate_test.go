package api_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"superego/agents"
	"superego/agents/agentstest"
	"superego/flow"
	"superego/memstore"
)

const speculativeFlow = `{"name": "Speculative", "graph": {"start": "input_superego", "nodes": {
  "input_superego": {"type": "superego", "agent_id": "input_superego", "constitution": "Screen.", "speculate": true,
    "transitions": {"BLOCK": null, "ACCEPT": "assistant", "CAUTION": "assistant"}},
  "assistant": {"type": "inner_agent", "agent_id": "assistant", "system_prompt": "Answer.", "tools": ["write_file"],
    "transitions": {"COMPLETE": null, "NEEDS_TOOL": "self"}}}}}`

// specModel plays the speculative flow: the judge decides only once the
// assistant's first call has been answered, so that the speculative turn
// has done what it can before the verdict.
type specModel struct {
	answered  chan struct{} // the assistant's first call was answered
	once      sync.Once
	mu        sync.Mutex
	assistant []agentstest.Request
}

func (m *specModel) script(r agentstest.Request) agentstest.Answer {
	user := r.LastUser()
	switch r.Node() {
	case "assistant":
		m.mu.Lock()
		m.assistant = append(m.assistant, r)
		m.mu.Unlock()
		defer m.once.Do(func() { close(m.answered) })
		if strings.Contains(user, "write") && len(r.ToolResults()) == 0 {
			return agentstest.Answer{ToolCalls: []agentstest.Call{{ID: "w1", Name: "write_file", Args: `{"path": "spec.txt", "content": "` + draftMarker + `"}`}}}
		}
		if strings.Contains(user, "Guidance from input_superego") {
			return agentstest.Reply(thinkingMarker, "COMPLETE", "", "A careful answer.")
		}
		return agentstest.Reply(thinkingMarker, "COMPLETE", "", draftMarker+" a quick answer.")
	case "input_superego":
		<-m.answered
		switch {
		case strings.Contains(user, "block"):
			return agentstest.Reply(thinkingMarker, "BLOCK", guidanceMarker, "I won't help with that.")
		case strings.Contains(user, "caution"):
			return agentstest.Reply(thinkingMarker, "CAUTION", guidanceMarker+" be careful", "")
		}
		return agentstest.Reply(thinkingMarker, "ACCEPT", "", "")
	}
	return agentstest.Answer{Status: 400, Text: "unknown node"}
}

func newSpecFixture(t *testing.T) (*fixture, *specModel) {
	m := &specModel{answered: make(chan struct{})}
	model := agentstest.OpenAI(t, m.script)
	p := &agents.Providers{Default: "openai:gpt-test", OpenAIKey: "k", OpenAIBaseURL: model.URL + "/v1"}
	f := serveFlows(t, map[string]string{"speculative": speculativeFlow}, &memstore.Store{}, p.Model, 0)
	f.model = model
	return f, m
}

// speculate runs the flow and returns its events, named by node.
func speculate(t *testing.T, f *fixture, input string) ([]sseEvent, []string, flow.Done) {
	t.Helper()
	events := readSSE(t, f.do(t, "POST", "/flow/execute", `{"flow_id": "speculative", "input": "`+input+`"}`).Body)
	var names []string
	for _, e := range events {
		var d struct {
			Node    string `json:"node"`
			AgentID string `json:"agent_id"`
		}
		json.Unmarshal([]byte(e.Data), &d)
		names = append(names, e.Name+":"+d.Node+d.AgentID)
	}
	var done flow.Done
	json.Unmarshal([]byte(events[len(events)-1].Data), &done)
	return events, names, done
}

func TestSpeculationAccepted(t *testing.T) {
	t.Parallel()
	f, m := newSpecFixture(t)
	events, names, done := speculate(t, f, "hello")
	got := strings.Join(names, " ")
	// Nothing of the assistant before the judge's step; then its turn, once.
	judged := strings.Index(got, "complete_step:input_superegoinput_superego")
	if judged < 0 || strings.Contains(got[:judged], "assistant") {
		t.Errorf("the assistant's turn went out before the verdict:\n%s", got)
	}
	if strings.Count(got, "complete_step:assistantassistant") != 1 || strings.Count(got, "node_start:assistantassistant") != 1 {
		t.Errorf("the assistant's turn is not there once:\n%s", got)
	}
	if len(m.assistant) != 1 || done.Status != "completed" || done.Response != draftMarker+" a quick answer." {
		t.Errorf("%d assistant calls, done %+v", len(m.assistant), done)
	}
	if done.Usage == nil || done.Usage.SpeculativePromptTokens != 0 || done.Usage.PromptTokens == 0 {
		t.Errorf("usage %+v: an adopted turn's tokens are the run's own", done.Usage)
	}
	for _, e := range events {
		noLeak(t, "the stream", e.Data)
	}
}

func TestSpeculationBlockedWritesNothingAndShowsNothing(t *testing.T) {
	t.Parallel()
	f, m := newSpecFixture(t)
	events, names, done := speculate(t, f, "block: write a file")
	got := strings.Join(names, " ")
	if strings.Contains(got, "assistant") {
		t.Errorf("a discarded turn reached the client:\n%s", got)
	}
	for _, e := range events {
		noDraft(t, "the stream", e.Data)
	}
	if len(m.assistant) != 1 {
		t.Errorf("%d assistant calls, want the speculative one", len(m.assistant))
	}
	if done.Status != "blocked" || done.Usage == nil || done.Usage.SpeculativePromptTokens == 0 {
		t.Errorf("done %+v, usage %+v: the discarded call's tokens are counted apart", done, done.Usage)
	}
	// The write it asked for waited for the verdict, and never ran.
	p := filepath.Join(f.ws.Root, done.InstanceID, "spec.txt")
	if _, err := os.Stat(p); !os.IsNotExist(err) {
		t.Errorf("the speculative write ran: %s: %v", p, err)
	}
	var res runResult
	json.Unmarshal([]byte(body(t, f.do(t, "GET", "/flow/instances/"+done.InstanceID, ""))), &res)
	if len(res.Steps) != 2 {
		t.Errorf("%d steps, want the user's and the judge's: a discarded turn is not a step", len(res.Steps))
	}
	everyClientPath(t, f, done.InstanceID)
}

func TestSpeculationWithCautionRunsAgainWithTheGuidance(t *testing.T) {
	t.Parallel()
	f, m := newSpecFixture(t)
	_, names, done := speculate(t, f, "caution please")
	if got := strings.Join(names, " "); strings.Count(got, "complete_step:assistantassistant") != 1 || strings.Contains(got, draftMarker) {
		t.Errorf("events:\n%s", got)
	}
	if len(m.assistant) != 2 || !strings.Contains(m.assistant[1].LastUser(), "be careful") || strings.Contains(m.assistant[0].LastUser(), "be careful") {
		t.Fatalf("assistant calls: %d", len(m.assistant))
	}
	if done.Response != "A careful answer." || done.Usage.SpeculativePromptTokens == 0 {
		t.Errorf("done %+v, usage %+v", done, done.Usage)
	}
}

func TestSpeculationAcceptedWritesAfterTheVerdict(t *testing.T) {
	t.Parallel()
	f, _ := newSpecFixture(t)
	_, names, done := speculate(t, f, "please write a file")
	got := strings.Join(names, " ")
	judged := strings.Index(got, "complete_step:input_superego")
	if judged < 0 || strings.Contains(got[:judged], "assistant") || !strings.Contains(got[judged:], "tool_call:assistant") {
		t.Errorf("events:\n%s", got)
	}
	if b, err := os.ReadFile(filepath.Join(f.ws.Root, done.InstanceID, "spec.txt")); err != nil || string(b) != draftMarker {
		t.Errorf("the accepted turn's write: %q, %v", b, err)
	}
}

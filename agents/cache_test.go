package agents_test

import (
	"context"
	"strings"
	"testing"

	"superego/agents"
	"superego/agents/agentstest"
	"superego/engine"
	"superego/flow"
	"superego/tools"
)

// A run with a cache scope keeps its model replies; the same run again
// makes no call, and streams and records the same; another scope (another
// repeat) calls again.
func TestRepliesAreCachedByScope(t *testing.T) {
	t.Parallel()
	fake := agentstest.OpenAI(t, calcScript)
	p := &agents.Providers{Default: "openai:gpt-test", OpenAIKey: "k", OpenAIBaseURL: fake.URL + "/v1"}
	agent := &agents.Agent{Model: p.Model, Tools: tools.Set{"calculator": tools.Calculator()}, Cache: &agentstest.Cache{}}
	d, err := flow.Parse([]byte(calcFlow), flow.Catalog{Tools: agent.Tools.Names(), Providers: agents.ProviderNames})
	if err != nil {
		t.Fatal(err)
	}
	runWith := func(scope string) (engine.Outcome, []flow.Step, string) {
		var steps []flow.Step
		var partials strings.Builder
		out := (&engine.Executor{Agent: agent}).Execute(context.Background(),
			engine.Turn{FlowID: "calc", Def: d, InstanceID: "i", RunID: "r", Input: "What is 6*7?", Options: flow.RunOptions{Cache: scope}},
			engine.Sink{Emit: func(evs ...flow.Event) error {
				for _, e := range evs {
					switch d := e.Data.(type) {
					case *flow.Step:
						steps = append(steps, *d)
					case flow.Partial:
						partials.WriteString(d.Delta)
					}
				}
				return nil
			}})
		return out, steps, partials.String()
	}
	first, steps1, partials1 := runWith("repeat:0")
	calls := len(fake.Requests())
	second, steps2, partials2 := runWith("repeat:0")
	if len(fake.Requests()) != calls || calls == 0 {
		t.Errorf("the same run again made %d calls, after %d", len(fake.Requests())-calls, calls)
	}
	if first.Response != second.Response || partials1 != partials2 || len(steps1) != len(steps2) {
		t.Errorf("a cached run differs: %q %q, partials %q %q", first.Response, second.Response, partials1, partials2)
	}
	for _, s := range steps2[1:] {
		if !s.Cached || s.Usage == nil {
			t.Errorf("step %s of the cached run: cached %v, usage %v", s.StepID, s.Cached, s.Usage)
		}
	}
	for _, s := range steps1 {
		if s.Cached {
			t.Errorf("step %s of the first run says cached", s.StepID)
		}
	}
	runWith("repeat:1")
	if len(fake.Requests()) != 2*calls {
		t.Errorf("another repeat made %d calls, want %d", len(fake.Requests())-calls, calls)
	}
}

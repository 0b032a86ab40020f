package agents_test

import (
	"context"
	"encoding/json"
	"testing"

	"superego/agents"
	"superego/agents/agentstest"
	"superego/engine"
	"superego/flow"
	"superego/tools"
)

// Each model-backed step names the model as the provider's reply named
// it, and the sampling parameters its request carried, read from the
// request as the provider received it: OpenAI's client sends temperature
// 0 unasked, Anthropic's a max_tokens. A step served from the cache keeps
// the call's that made it.
func TestStepsSayWhatTheProviderServedAndWasSent(t *testing.T) {
	t.Parallel()
	served := map[string]string{"openai": "gpt-test-2026-01-02", "anthropic": "claude-test-20260102"}
	script := func(r agentstest.Request) agentstest.Answer {
		a := calcScript(r)
		a.Model = served[r.Provider]
		return a
	}
	for _, c := range bothProviders(t, script) {
		t.Run(c.name, func(t *testing.T) {
			agent := &agents.Agent{Model: c.p.Model, Tools: tools.Set{"calculator": tools.Calculator()}, Cache: &agentstest.Cache{}}
			d, err := flow.Parse([]byte(calcFlow), flow.Catalog{Tools: agent.Tools.Names(), Providers: agents.ProviderNames})
			if err != nil {
				t.Fatal(err)
			}
			run := func(opts flow.RunOptions) []flow.Step {
				var steps []flow.Step
				(&engine.Executor{Agent: agent}).Execute(context.Background(),
					engine.Turn{FlowID: "calc", Def: d, InstanceID: "i", RunID: "r", Input: "What is 5*10?", Options: opts},
					engine.Sink{Emit: func(evs ...flow.Event) error {
						for _, e := range evs {
							if s, ok := e.Data.(*flow.Step); ok && s.Model != "" {
								steps = append(steps, *s)
							}
						}
						return nil
					}})
				return steps
			}
			// An experiment's runs are tagged with it, and recorded.
			runOnce := func() []flow.Step {
				return run(flow.RunOptions{Cache: "repeat:0", Tags: map[string]string{"experiment": "e"}})
			}
			made := runOnce()
			reqs := c.server.Requests()
			if len(made) != 4 || len(reqs) != 4 {
				t.Fatalf("%d model-backed steps, %d requests; want 4 of each", len(made), len(reqs))
			}
			var body struct {
				Temperature *float64 `json:"temperature"`
				TopP        *float64 `json:"top_p"`
				Seed        *int64   `json:"seed"`
				MaxTokens   *int64   `json:"max_tokens"`
			}
			if err := json.Unmarshal(reqs[0].Body, &body); err != nil {
				t.Fatal(err)
			}
			want := flow.Parameters{Temperature: body.Temperature, TopP: body.TopP, Seed: body.Seed, MaxTokens: body.MaxTokens}
			if c.name == "openai" && (body.Temperature == nil || *body.Temperature != 0) || c.name == "anthropic" && body.MaxTokens == nil {
				t.Errorf("the request carried %s: not what this test expects of the client", reqs[0].Body)
			}
			cached := runOnce()
			for i, s := range append(made, cached...) {
				if s.ServedModel != served[c.name] || s.Parameters == nil || jsonOf(*s.Parameters) != jsonOf(want) {
					t.Errorf("step %d (%s, cached %v): served %q, parameters %s; want %q, %s", i, s.Node, s.Cached, s.ServedModel, jsonOf(s.Parameters), served[c.name], jsonOf(want))
				}
				if i >= len(made) && (!s.Cached || s.Shared) {
					t.Errorf("step %d of the second run: cached %v, shared %v", i, s.Cached, s.Shared)
				}
			}
			if len(c.server.Requests()) != 4 {
				t.Errorf("the second run made calls")
			}
			// A served run is not: reading what a call sent costs a second
			// reading of its request, which only a report needs.
			for _, s := range run(flow.RunOptions{}) {
				if s.ServedModel != "" || s.Parameters != nil {
					t.Errorf("a served run's step %s records %q, %s", s.Node, s.ServedModel, jsonOf(s.Parameters))
				}
			}
		})
	}
}

func jsonOf(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

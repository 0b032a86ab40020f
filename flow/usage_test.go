package flow_test

import (
	"encoding/json"
	"testing"

	"superego/flow"
)

// done always carries usage, zeros included: a model that reports no
// tokens (the offline one) and a run that fails before any call still
// end with it, so that a script reading done.usage finds it.
func TestDoneAlwaysCarriesUsage(t *testing.T) {
	def := mustParse(t, guarded)
	const zeros = `{"prompt_tokens":0,"completion_tokens":0,"speculative_prompt_tokens":0,"speculative_completion_tokens":0}`
	counted := reply("ACCEPT", "")
	counted.Usage = &flow.Usage{PromptTokens: 3, CompletionTokens: 2}
	for _, c := range []struct {
		name  string
		agent flow.Agent
		want  string
	}{
		{"no tokens reported", byNode(map[string][]flow.Reply{"in": {reply("ACCEPT", "")}, "work": {reply("COMPLETE", "done")}, "out": {reply("ACCEPT", "")}}), zeros},
		{"blocked at once", byNode(map[string][]flow.Reply{"in": {reply("BLOCK", "no")}}), zeros},
		{"failed", byNode(nil), zeros},
		{"tokens reported", byNode(map[string][]flow.Reply{"in": {counted}, "work": {reply("COMPLETE", "done")}, "out": {reply("ACCEPT", "")}}),
			`{"prompt_tokens":3,"completion_tokens":2,"speculative_prompt_tokens":0,"speculative_completion_tokens":0}`},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := runTurn(t, def, c.agent, nil, "hi")
			done := r.events[len(r.events)-1]
			b, _ := json.Marshal(done.Data)
			var got struct{ Usage json.RawMessage }
			json.Unmarshal(b, &got)
			if done.Name != flow.EventDone || string(got.Usage) != c.want {
				t.Errorf("%s: %s, want usage %s", done.Name, b, c.want)
			}
		})
	}
}

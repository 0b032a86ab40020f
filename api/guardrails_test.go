package api_test

import (
	"encoding/json"
	"testing"

	"superego/memstore"
)

// The JSON answer of POST /flow/execute carries a guardrails object in
// promptfoo's shape: what the superegos stopped, and why.
func TestGuardrailsInTheJSONAnswer(t *testing.T) {
	t.Parallel()
	calc := newFixture(t, nil, 0)
	gated, _ := newGateFixture(t, &memstore.Store{})
	for _, c := range []struct {
		f          *fixture
		flow, text string
		want       string
	}{
		// The input superego blocked the message: its refusal is the reason.
		{calc, "calc", "How do I build a bomb?", `{"flagged":true,"flaggedInput":true,"flaggedOutput":false,"reason":"I can't help with that."}`},
		// Nothing stopped.
		{calc, "calc", "What is 6*7?", `{"flagged":false,"flaggedInput":false,"flaggedOutput":false}`},
		// The output superego blocked the assistant's draft, which is withheld.
		{gated, "gated", "block me", `{"flagged":true,"flaggedInput":false,"flaggedOutput":true,"reason":"The draft was not fit to send."}`},
		// A decision of its own that withholds: the run completes, flagged.
		{gated, "gated", "hold me", `{"flagged":true,"flaggedInput":false,"flaggedOutput":true,"reason":"a draft was withheld by output_superego"}`},
	} {
		b := body(t, c.f.do(t, "POST", "/flow/execute", `{"flow_id": "`+c.flow+`", "input": "`+c.text+`"}`, "Accept", "application/json"))
		var res struct {
			Status     string          `json:"status"`
			Guardrails json.RawMessage `json:"guardrails"`
		}
		if err := json.Unmarshal([]byte(b), &res); err != nil || string(res.Guardrails) != c.want {
			t.Errorf("%s %q (%s): guardrails %s, want %s", c.flow, c.text, res.Status, res.Guardrails, c.want)
		}
		if c.f == gated {
			noDraft(t, c.text, b)
		}
	}
}

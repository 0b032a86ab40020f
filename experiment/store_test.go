package experiment_test

import (
	"encoding/json"
	"testing"

	"superego/experiment"
	"superego/experiment/experimenttest"
)

func TestMemStore(t *testing.T) {
	t.Parallel()
	s := &experiment.MemStore{}
	experimenttest.Run(t, s, s)
}

// An outcome stored before agentic samples, whose "calls" held the model
// calls' counts, reads as it was meant; one stored now reads back as it
// was written.
func TestOutcomesOfEveryVersionRead(t *testing.T) {
	t.Parallel()
	var old experiment.Outcome
	if err := json.Unmarshal([]byte(`{"experiment_id": "e", "condition": "c", "sample_id": "s", "status": "completed", "refused": true,
		"calls": {"made": 2, "cached": 1, "reused": 3, "judge": 1}}`), &old); err != nil {
		t.Fatal(err)
	}
	if old.ModelCalls != (experiment.Calls{Made: 2, Cached: 1, Reused: 3, Judge: 1}) || old.ToolCalls != nil || !old.Refused || old.SampleID != "s" {
		t.Errorf("an outcome stored before agentic samples: %+v", old)
	}
	harmed := true
	now := experiment.Outcome{ExperimentID: "e", Condition: "c", Status: "completed", ModelCalls: experiment.Calls{Made: 1},
		ToolCalls: []experiment.ToolCall{{Name: "send_email", Arguments: json.RawMessage(`{"to":"a@b"}`), Ran: true}}, Harmed: &harmed}
	b, err := json.Marshal(now)
	if err != nil {
		t.Fatal(err)
	}
	var back experiment.Outcome
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	if again, _ := json.Marshal(back); string(again) != string(b) {
		t.Errorf("an outcome stored now reads back as\n%s\nnot\n%s", again, b)
	}
}

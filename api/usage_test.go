package api_test

import (
	"encoding/json"
	"strings"
	"testing"

	"superego/agents"
	"superego/flow"
	"superego/memstore"
)

// On the offline model, which reports no tokens, done carries usage all
// the same, zeros included, on the stream and in the JSON answer: a script
// that reads done.usage works on a new user's first run.
func TestDoneCarriesUsageOnTheOfflineModel(t *testing.T) {
	t.Parallel()
	offline := (&agents.Providers{Default: "offline"}).Model
	f := serveFlows(t, testFlows, &memstore.Store{}, offline, 0)
	const zeros = `"usage":{"prompt_tokens":0,"completion_tokens":0,"speculative_prompt_tokens":0,"speculative_completion_tokens":0}`

	events := readSSE(t, f.do(t, "POST", "/flow/execute", `{"flow_id": "calc", "input": "What is 6*7?"}`).Body)
	if last := events[len(events)-1]; last.Name != "done" || !strings.Contains(last.Data, zeros) {
		t.Errorf("the stream's done: %+v", last)
	}
	var res struct {
		Status string          `json:"status"`
		Usage  json.RawMessage `json:"usage"`
	}
	json.Unmarshal([]byte(body(t, f.do(t, "POST", "/flow/execute", `{"flow_id": "calc", "input": "What is 6*7?"}`, "Accept", "application/json"))), &res)
	if res.Status != flow.StatusCompleted || `"usage":`+string(res.Usage) != zeros {
		t.Errorf("the JSON answer: %s, usage %s", res.Status, res.Usage)
	}
}

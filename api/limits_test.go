package api_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"superego/agents"
	"superego/agents/agentstest"
	"superego/api"
	"superego/experiment"
	"superego/gateway"
	"superego/memstore"
)

// limitedLab serves the test flows with a lab whose experiments may have
// at most maxOutcomes outcomes, and set's settings.
func limitedLab(t *testing.T, maxOutcomes int, set func(*api.Server)) (*fixture, *experiment.Lab) {
	t.Helper()
	model := agentstest.OpenAI(t, script(nil))
	p := &agents.Providers{Default: "openai:gpt-test", OpenAIKey: "k", OpenAIBaseURL: model.URL + "/v1"}
	var lab *experiment.Lab
	f := serveWith(t, testFlows, &memstore.Store{}, p.Model, 0, func(s *api.Server) {
		lab = &experiment.Lab{Engine: s.Engine, Store: &experiment.MemStore{}, Log: s.Log, Env: experiment.Env{Flows: s.Engine.Flows,
			Constitutions: map[string]string{"strict": "Refuse more."}, Providers: agents.ProviderNames, Dir: t.TempDir(), Confined: true, MaxOutcomes: maxOutcomes}}
		s.Experiments = lab
		if set != nil {
			set(s)
		}
	})
	t.Cleanup(func() { lab.Stop(experiment.ErrShutdown) })
	return f, lab
}

// document is an experiment of n samples through the conditions named.
func document(n int, conditions ...string) string {
	var samples, conds []string
	for i := range n {
		samples = append(samples, fmt.Sprintf(`{"id": "s%d", "input": "What is %d*7?", "label": "benign"}`, i, i))
	}
	for _, c := range conditions {
		conds = append(conds, fmt.Sprintf(`{"name": %q, "flow": "other"}`, c))
	}
	return `{"samples": [` + strings.Join(samples, ",") + `], "conditions": [` + strings.Join(conds, ",") + `]}`
}

// An operator caps an experiment's outcomes: a document over the cap, and a
// replay that would take one over it, are refused with a 400 that names it.
func TestExperimentOutcomesAreCapped(t *testing.T) {
	t.Parallel()
	f, lab := limitedLab(t, 10, nil)
	resp := f.do(t, "POST", "/experiments", document(4, "a", "b", "c"))
	got := body(t, resp)
	if resp.StatusCode != 400 || !strings.Contains(got, `{"field":"max_outcomes","message":"4 samples × 3 conditions × 1 repeats are 12 outcomes, and this server runs at most 10 an experiment (--max-outcomes, SUPEREGO_MAX_OUTCOMES)"}`) {
		t.Errorf("12 outcomes over a cap of 10: %d %s", resp.StatusCode, got)
	}
	resp = f.do(t, "POST", "/experiments", document(3, "a", "b", "c"))
	got = body(t, resp)
	if resp.StatusCode != 201 {
		t.Fatalf("9 outcomes: %d %s", resp.StatusCode, got)
	}
	var created struct {
		ID string `json:"experiment_id"`
	}
	json.Unmarshal([]byte(got), &created)
	if err := lab.Wait(context.Background(), created.ID); err != nil {
		t.Fatal(err)
	}
	resp = f.do(t, "POST", "/experiments/"+created.ID+"/replay", `{"from": "a", "as": "strict", "constitutions": {"s": "strict"}}`)
	if got := body(t, resp); resp.StatusCode != 400 || !strings.Contains(got, `"field":"max_outcomes"`) {
		t.Errorf("a replay to 12 outcomes: %d %s", resp.StatusCode, got)
	}
}

// Experiments make paid model calls: with SUPEREGO_EXPERIMENTS_AUTH keys or
// admin, starting, resuming, replaying and cancelling one needs a key or
// the admin token, the scheme "Bearer" in any case; reading one does not.
func TestExperimentsCanNeedAKey(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		auth, authorization string
		want                int
	}{
		{"", "", 201},
		{"open", "", 201},
		{"keys", "", 401},
		{"keys", "Bearer wrong", 401},
		{"keys", "Basic a2V5LTE=", 401},
		{"keys", "Bearer key-1", 201},
		{"keys", "bearer admin-secret", 201},
		{"admin", "Bearer key-1", 401},
		{"admin", "BEARER admin-secret", 201},
	} {
		t.Run(c.auth+" "+c.authorization, func(t *testing.T) {
			f, lab := limitedLab(t, 0, func(s *api.Server) { s.ExperimentsAuth, s.APIKeys = c.auth, []string{"key-1"} })
			resp := f.do(t, "POST", "/experiments", document(1, "a"), "Authorization", c.authorization)
			got := body(t, resp)
			if resp.StatusCode != c.want {
				t.Fatalf("POST /experiments: %d %s", resp.StatusCode, got)
			}
			if c.want == 401 {
				if !strings.Contains(got, `"code":"unauthorized"`) || resp.Header.Get("WWW-Authenticate") == "" {
					t.Errorf("%s %v", got, resp.Header)
				}
				for _, path := range []string{"/experiments/x/cancel", "/experiments/x/resume", "/experiments/x/replay"} {
					if resp := f.do(t, "POST", path, `{}`, "Authorization", c.authorization); resp.StatusCode != 401 {
						t.Errorf("POST %s: %d", path, resp.StatusCode)
					}
				}
				if resp := f.do(t, "GET", "/experiments", ""); resp.StatusCode != 200 {
					t.Errorf("GET /experiments: %d", resp.StatusCode)
				}
				return
			}
			var created struct {
				ID string `json:"experiment_id"`
			}
			json.Unmarshal([]byte(got), &created)
			lab.Wait(context.Background(), created.ID)
		})
	}
}

// The research view reads the scheme of Authorization whatever its case,
// as /v1 does (RFC 7235).
func TestBearerInAnyCase(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil, 0)
	id := uuidRe.FindString(body(t, f.do(t, "POST", "/flow/execute", `{"flow_id": "other", "input": "hi"}`, "Accept", "application/json")))
	for _, scheme := range []string{"Bearer", "bearer", "BEARER"} {
		resp := f.do(t, "GET", "/flow/instances/"+id+"?include_hidden=true", "", "Authorization", scheme+" admin-secret")
		if got := body(t, resp); resp.StatusCode != 200 || !strings.Contains(got, `"thinking"`) {
			t.Errorf("%s: %d %.200s", scheme, resp.StatusCode, got)
		}
	}
	if resp := f.do(t, "GET", "/flow/instances/"+id+"?include_hidden=true", "", "Authorization", "bearer  "); resp.StatusCode != 403 {
		t.Errorf("an empty token: %d", resp.StatusCode)
	}
}

// One request cannot take the server's memory: a conversation of more
// than MaxMessages messages is refused before it runs (32,000 messages in
// 1 MB grew the server by 250 MB), a conversation within the bound costs a
// bounded heap, and the input of the runs in flight is bounded across
// requests, with a 429 a client retries.
func TestAConversationIsBounded(t *testing.T) {
	conversation := func(n, size int) string {
		var msgs []string
		for i := range n - 1 {
			msgs = append(msgs, []string{"user", "assistant"}[i%2], strings.TrimSpace(fmt.Sprintf("%d %s", i, strings.Repeat("a", size/n))))
		}
		return chat("other", false, append(msgs, "user", "and now?")...)
	}
	f := newFixture(t, nil, 0)
	var status int
	var answer string
	peak := heapPeak(func() {
		resp := f.do(t, "POST", "/v1/chat/completions", `{"model": "other", "messages": [`+strings.Repeat(`{"role":"user","content":"x"},`, 31_999)+`{"role":"user","content":"x"}]}`)
		status, answer = resp.StatusCode, body(t, resp)
	})
	if status != 400 || !strings.Contains(answer, `"message":"Invalid 'messages': array too long. Expected an array with maximum length 2048, but got an array with length 32000 instead.","type":"invalid_request_error","param":"messages","code":"array_above_max_length"`) {
		t.Errorf("32,000 messages: %d %s", status, answer)
	}
	if peak > 32<<20 {
		t.Errorf("refusing 32,000 messages took %d MB of heap", peak>>20)
	}
	peak = heapPeak(func() {
		resp := f.do(t, "POST", "/v1/chat/completions", conversation(gateway.MaxMessages, 900<<10))
		status, answer = resp.StatusCode, body(t, resp)
	})
	if status != 200 {
		t.Errorf("2,048 messages: %d %.300s", status, answer)
	}
	if peak > 48<<20 {
		t.Errorf("a run of 2,048 messages, 900 KB, took %d MB of heap", peak>>20)
	}
	t.Logf("heap above the start for a run of 2,048 messages, 900 KB: %d MB", peak>>20)

	gate := make(chan struct{})
	g := newFixture(t, gate, 0)
	t.Cleanup(func() { close(gate) })
	g.engine.MaxInput = 1 << 10
	g.engine.Exec.Agent.(*agents.Agent).Timeout = time.Minute // the held run waits at the gate, however slow this machine
	held := g.do(t, "POST", "/flow/execute", `{"flow_id": "calc", "input": "slow `+strings.Repeat("6*7 ", 150)+`"}`)
	defer held.Body.Close()
	if _, err := bufio.NewReader(held.Body).ReadString('\n'); err != nil { // its run_start: the run holds its input
		t.Fatal(err)
	}
	resp := g.do(t, "POST", "/v1/chat/completions", chat("calc", false, "user", strings.Repeat("6*7 ", 150)))
	if got := body(t, resp); resp.StatusCode != 429 || resp.Header.Get("Retry-After") == "" ||
		!strings.Contains(got, `"code":"too_much_input"`) || !strings.Contains(got, "the runs in flight hold 605 bytes of input, and this run's 600 bytes would take them past the server's 1.0 KiB; retry later") {
		t.Errorf("past the input in flight: %d %s", resp.StatusCode, got)
	}
}

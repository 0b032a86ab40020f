package api_test

import (
	"encoding/json"
	"strings"
	"testing"
)

// TestOpenAINodeClient runs OpenAI's own JavaScript client (npm "openai",
// the version api/testdata/package.json pins) against the server: chat
// front ends and evaluation tools are built on it. It needs Node and the
// package installed, with SUPEREGO_OPENAI_NODE naming the directory npm
// installed it in (.ci/run does); without it, the test skips and says so.
// TestOpenAIGoClient covers the same with OpenAI's Go client, always.
func TestOpenAINodeClient(t *testing.T) {
	t.Parallel()
	f := newOpenAIFixture(t, 0)
	out := runNode(t, "openai_client.mjs", nil, f.url+"/v1", apiKey)
	noDraft(t, "what OpenAI's JavaScript client read", string(out))
	noDraft(t, "the server's log", f.logs.String())

	type completion struct {
		ID, Object, Model, Role, Content, Instance string
		Created, Choices                           int64
		Refusal, Logprobs                          any
		FinishReason                               string `json:"finish_reason"`
		Usage                                      map[string]int
	}
	type stream struct {
		Chunks       int
		IDs          []string
		Content      string
		Role         string
		FinishReason string `json:"finish_reason"`
		Usage        map[string]int
		UsageChoices *int `json:"usage_choices"`
	}
	type thrown struct {
		Class, Type, Code, Param, Message, Thrown string
		Status                                    *int
	}
	var res struct {
		Models        []string
		Completion    completion
		Stream        stream
		Helper        completion
		Blocked       completion
		BlockedStream stream     `json:"blocked_stream"`
		MultiTurn     completion `json:"multi_turn"`
		Failed        thrown
		FailedStream  thrown `json:"failed_stream"`
		UnknownFlow   thrown `json:"unknown_flow"`
		BadKey        thrown `json:"bad_key"`
		Tools         thrown
	}
	if err := json.Unmarshal(out, &res); err != nil {
		t.Fatalf("%v:\n%s", err, out)
	}
	t.Logf("the client read:\n%s", out)

	if got := strings.Join(res.Models, " "); got != "calc:model:superego other:model:superego" {
		t.Errorf("models: %s", got)
	}
	c := res.Completion
	if !strings.HasPrefix(c.ID, "chatcmpl-") || c.Object != "chat.completion" || c.Model != "calc" || c.Created == 0 || c.Choices != 1 ||
		c.Role != "assistant" || c.Content != "The answer is 42." || c.Refusal != nil || c.Logprobs != nil || c.FinishReason != "stop" ||
		c.Usage["prompt_tokens"] != 44 || c.Usage["completion_tokens"] != 28 || c.Usage["total_tokens"] != 72 || !uuidRe.MatchString(c.Instance) {
		t.Errorf("completion %+v", c)
	}
	s := res.Stream
	if s.Chunks < 4 || len(s.IDs) != 1 || !strings.HasPrefix(s.IDs[0], "chatcmpl-") || s.Role != "assistant" || s.Content != "The answer is 42." ||
		s.FinishReason != "stop" || s.Usage["total_tokens"] != 72 || s.UsageChoices == nil || *s.UsageChoices != 0 {
		t.Errorf("stream %+v", s)
	}
	if h := res.Helper; h.Content != "The answer is 42." || h.FinishReason != "stop" {
		t.Errorf("the client's stream helper %+v", h)
	}
	if b := res.Blocked; b.Content != "I can't help with that." || b.FinishReason != "content_filter" || b.Refusal != nil {
		t.Errorf("blocked %+v", b)
	}
	if b := res.BlockedStream; b.Content != "I can't help with that." || b.FinishReason != "content_filter" || b.Usage != nil {
		t.Errorf("blocked stream %+v", b)
	}
	if m := res.MultiTurn; m.Content != "The answer is 42." || m.FinishReason != "stop" {
		t.Errorf("second turn %+v", m)
	}
	for _, r := range f.model.Requests() {
		if strings.Contains(string(r.Body), "SYSTEM-PROMPT-7f3a") {
			t.Errorf("the client's system message reached %s's model", r.Node())
		}
	}
	status := func(e thrown) int {
		if e.Status == nil {
			return 0
		}
		return *e.Status
	}
	// The node's model failed: a judge's, by its code, never its model's
	// name or words.
	if e := res.Failed; e.Class != "InternalServerError" || status(e) != 502 || e.Code != "judge_error" || e.Type != "server_error" {
		t.Errorf("failed run %+v", e)
	}
	// An error chunk: the client throws it, with no status.
	if e := res.FailedStream; e.Class != "APIError" || e.Code != "judge_error" || !strings.Contains(e.Message, "The flow's run failed") {
		t.Errorf("failed stream %+v", e)
	}
	if e := res.UnknownFlow; e.Class != "NotFoundError" || status(e) != 404 || e.Code != "model_not_found" || e.Param != "model" || !strings.Contains(e.Message, "`nope`") {
		t.Errorf("unknown flow %+v", e)
	}
	if e := res.BadKey; e.Class != "AuthenticationError" || status(e) != 401 || e.Code != "invalid_api_key" {
		t.Errorf("bad key %+v", e)
	}
	if e := res.Tools; e.Class != "BadRequestError" || status(e) != 400 || e.Code != "unsupported_parameter" || e.Param != "tools" {
		t.Errorf("tools %+v", e)
	}
}

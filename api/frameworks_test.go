package api_test

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"superego/agents/agentstest"
)

// These tests put guarded_agent under the agent frameworks users build
// with, from npm, at the versions api/testdata/package.json pins: OpenAI's
// Agents SDK, the Vercel AI SDK, LangChain and LangGraph, and OpenAI's own
// JavaScript client for the raw protocols, Chat Completions and Responses.

// nodeClients is node and the directory npm installed api/testdata's
// package.json in (SUPEREGO_OPENAI_NODE), each package at its pinned
// version; without it the test skips and says so.
func nodeClients(t *testing.T) (node, dir string) {
	t.Helper()
	dir = os.Getenv("SUPEREGO_OPENAI_NODE")
	if dir == "" {
		t.Skip("skipped: set SUPEREGO_OPENAI_NODE to a directory where npm installed api/testdata/package.json (.ci/run does) to run OpenAI's JavaScript client and the agent frameworks against the server")
	}
	node, err := exec.LookPath("node")
	if err != nil {
		t.Fatalf("SUPEREGO_OPENAI_NODE is set, but: %v", err)
	}
	var pinned struct {
		Dependencies map[string]string `json:"dependencies"`
	}
	readJSON(t, "testdata/package.json", &pinned)
	for _, pkg := range slices.Sorted(maps.Keys(pinned.Dependencies)) {
		var installed struct {
			Version string `json:"version"`
		}
		readJSON(t, filepath.Join(dir, "node_modules", pkg, "package.json"), &installed)
		if installed.Version != pinned.Dependencies[pkg] {
			t.Fatalf("SUPEREGO_OPENAI_NODE has %s %s; api/testdata/package.json pins %s: run npm ci there", pkg, installed.Version, pinned.Dependencies[pkg])
		}
	}
	return node, dir
}

func readJSON(t *testing.T, path string, v any) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err == nil {
		err = json.Unmarshal(b, v)
	}
	if err != nil {
		t.Fatalf("SUPEREGO_OPENAI_NODE: %v", err)
	}
}

// runNode runs a script of testdata as a user's code runs: beside a
// node_modules that npm installed, with env added to the test's
// environment; it returns what the script printed.
func runNode(t *testing.T, script string, env []string, args ...string) []byte {
	t.Helper()
	node, dir := nodeClients(t)
	work := t.TempDir()
	src, err := os.ReadFile(filepath.Join("testdata", script))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(work, script), src, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(dir, "node_modules"), filepath.Join(work, "node_modules")); err != nil {
		t.Fatal(err)
	}
	// Generous: the machine may be busy, and a framework's task is many
	// requests, each judged.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, append([]string{filepath.Join(work, script)}, args...)...)
	cmd.Env = append(os.Environ(), env...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("node %s: %v\n%s", script, err, stderr.String())
	}
	return out
}

// exchange is a request a framework sent, and the response it read.
type exchange struct {
	Sent     string
	Status   int
	Instance string
	Body     string
}

// TestAgentFrameworks runs the agent frameworks users build with on
// guarded_agent, configured as for OpenAI but for the base URL and the
// model's name, each with its own instructions and two function tools,
// with and without streaming: on the Chat Completions API, OpenAI's Agents
// SDK, the Vercel AI SDK (@ai-sdk/openai and @ai-sdk/openai-compatible),
// OpenAI's client and LangGraph's createReactAgent; on the Responses API,
// each one's default, the Agents SDK's, the Vercel AI SDK's and OpenAI's
// client, and LangGraph's with LangChain's useResponsesApi. The task takes
// three requests, which are one instance; the call the action superego
// refuses never reaches the framework, and never runs: its tool's file is
// absent, while the framework ran each accepted call once, on disk; the
// agent's answer says what was refused; the instance records every call
// and how it was decided (checkTask); the agent's model read the
// framework's instructions, and no judge did. A second turn on the
// first's history asks for a recap in structured output: the model read
// the earlier calls and their results (item_reference and
// previous_response_id included), and the framework parsed its JSON.
// Nothing hidden reaches a framework, and nothing goes elsewhere (no
// traces to OpenAI).
func TestAgentFrameworks(t *testing.T) {
	t.Parallel()
	f := newTaskFixture(t)
	work := t.TempDir()
	out := runNode(t, "agent_frameworks.mjs", []string{"OPENAI_BASE_URL=" + f.url + "/v1", "OPENAI_API_KEY=" + apiKey, "OPENAI_AGENTS_DISABLE_TRACING=1"}, "guarded_agent", work)
	type task struct {
		Input          string // the user's message
		Output         string
		Streamed       string
		Steps          []string
		Recap          map[string]string
		Instructions   string
		Exchanges      []exchange
		RecapExchanges []exchange `json:"recap_exchanges"`
		Elsewhere      []string
		Thrown         string
	}
	var res map[string]json.RawMessage
	if err := json.Unmarshal(out, &res); err != nil {
		t.Fatalf("%v:\n%s", err, out)
	}
	t.Logf("versions: %s", res["versions"])
	for _, c := range []struct {
		task      string
		responses bool // the Responses API; Chat Completions otherwise
		stream    bool
		steps     string // the Vercel AI SDK's finish reason of each step
	}{
		{"agents_chat", false, false, ""},
		{"agents_chat_stream", false, true, ""},
		{"ai_chat", false, false, "tool-calls tool-calls stop"},
		{"ai_chat_stream", false, true, "tool-calls tool-calls stop"},
		{"ai_compatible", false, false, "tool-calls tool-calls stop"},
		{"ai_compatible_stream", false, true, "tool-calls tool-calls stop"},
		{"openai_chat", false, false, ""},
		{"openai_chat_stream", false, true, ""},
		{"langgraph", false, false, ""},
		{"langgraph_stream", false, true, ""},
		{"agents", true, false, ""},
		{"agents_stream", true, true, ""},
		{"ai", true, false, "tool-calls tool-calls stop"},
		{"ai_stream", true, true, "tool-calls tool-calls stop"},
		{"langgraph_responses", true, false, ""},
		{"langgraph_responses_stream", true, true, ""},
		{"openai_responses", true, false, ""},
		{"openai_responses_stream", true, true, ""},
	} {
		t.Run(c.task, func(t *testing.T) {
			var got task
			if err := json.Unmarshal(res[c.task], &got); err != nil || got.Thrown != "" {
				t.Fatalf("%v %s", err, res[c.task])
			}
			city := cities[slices.IndexFunc(cities, func(c string) bool { return strings.Contains(got.Input, c) })]
			var read strings.Builder
			for _, e := range append(got.Exchanges, got.RecapExchanges...) {
				read.WriteString(e.Body)
			}
			noLeak(t, "what "+c.task+" read", read.String()+got.Output)
			if strings.Contains(read.String(), "audit@evil.example") {
				t.Errorf("the refused call reached the framework:\n%s", read.String())
			}
			if len(got.Elsewhere) > 0 {
				t.Errorf("the framework sent requests elsewhere: %v", got.Elsewhere)
			}
			if c.stream && got.Streamed != got.Output {
				t.Errorf("the stream's text deltas add up to %q, not the answer %q", got.Streamed, got.Output)
			}
			if steps := strings.Join(got.Steps, " "); steps != c.steps {
				t.Errorf("steps %q; want %q", steps, c.steps)
			}

			// One task, one instance: three requests, the last two
			// continuing what the first started.
			if len(got.Exchanges) != 3 {
				t.Fatalf("%d requests; want 3", len(got.Exchanges))
			}
			id := got.Exchanges[0].Instance
			for i, e := range got.Exchanges {
				if e.Status != 200 || e.Instance != id || !uuidRe.MatchString(id) {
					t.Errorf("response %d: %d, instance %q (the first's %q)", i, e.Status, e.Instance, id)
				}
				if !answers(e.Body, c.responses, c.stream, i < 2) {
					t.Errorf("response %d (stream %v, calls %v):\n%s", i, c.stream, i < 2, e.Body)
				}
			}
			if c.task == "openai_responses" && (!strings.Contains(got.Exchanges[2].Sent, `"previous_response_id":"resp_`) || !strings.Contains(got.RecapExchanges[0].Sent, `"previous_response_id":"resp_`)) {
				t.Errorf("the client did not continue by previous_response_id: %s", got.Exchanges[2].Sent)
			}
			checkTask(t, f, id, city, got.Output, ranOnDisk(t, filepath.Join(work, c.task)))

			// The framework's instructions went to the agent's model, as
			// its system message, in each request of the task, after the
			// input superego's guidance where it gave some (a system
			// message of its own before the client's); no judge's system
			// message has them.
			guidance := "Guidance from input_superego (hidden from the user): " + guidanceMarker
			var asked []agentstest.Request
			for _, r := range f.model.Requests() {
				switch {
				case r.Node() == "" && strings.Contains(r.System, got.Instructions):
					asked = append(asked, r)
					if strings.TrimPrefix(r.System, guidance) != got.Instructions {
						t.Errorf("the agent's model was instructed %q; want %q", r.System, got.Instructions)
					}
				case strings.Contains(r.System, got.Instructions):
					t.Errorf("the framework's instructions reached %s's system message", r.Node())
				}
			}
			if len(asked) < 4 {
				t.Errorf("the framework's instructions reached the agent's model in %d requests; want 3, and the recap's", len(asked))
			}

			// The second turn: a new instance, whose model read the first
			// turn's calls and results, and answered in the format asked.
			if want := map[string]string{"city": city, "weather": "Sunny, 21°C in " + city, "emailed_to": "me@example.com"}; !maps.Equal(got.Recap, want) {
				t.Errorf("the recap %v; want %v", got.Recap, want)
			}
			if len(got.RecapExchanges) != 1 || got.RecapExchanges[0].Status != 200 || got.RecapExchanges[0].Instance == id {
				t.Fatalf("the recap's requests: %+v", got.RecapExchanges)
			}
			if c.task == "ai" || c.task == "ai_stream" {
				// @ai-sdk/openai names its earlier answers by their ids.
				if sent := got.RecapExchanges[0].Sent; !strings.Contains(sent, `"type":"item_reference"`) {
					t.Errorf("the recap's request has no item_reference: %s", sent)
				}
			}
			var recap agentstest.Request
			for _, r := range asked {
				if strings.HasPrefix(r.LastUser(), "Recap") {
					recap = r
				}
			}
			var body struct {
				ResponseFormat struct {
					Type       string `json:"type"`
					JSONSchema struct {
						Schema json.RawMessage `json:"schema"`
					} `json:"json_schema"`
				} `json:"response_format"`
			}
			json.Unmarshal(recap.Body, &body)
			if body.ResponseFormat.Type != "json_schema" || !strings.Contains(string(body.ResponseFormat.JSONSchema.Schema), "emailed_to") || len(recap.ToolResults()) != 2 {
				t.Errorf("the recap's model was asked, with %d results:\n%s", len(recap.ToolResults()), recap.Body)
			}
		})
	}
}

// answers reports whether a response's body is an answer of the protocol,
// streamed or not, with calls or with the final text.
func answers(body string, responses, stream, calls bool) bool {
	streamed := strings.HasPrefix(body, "data: ") && strings.HasSuffix(body, "data: [DONE]\n\n")
	want := []string{`"finish_reason":"stop"`}
	if calls {
		want = []string{`"finish_reason":"tool_calls"`, `"tool_calls":[{`}
	}
	if responses {
		streamed = strings.HasPrefix(body, "event: response.created\n")
		want = []string{`"type":"response.completed"`, `"status":"completed"`}
		if !stream {
			want = want[1:]
		}
		if calls {
			want = append(want, `"type":"function_call"`)
		}
	}
	if streamed != stream {
		return false
	}
	for _, w := range want {
		if !strings.Contains(body, w) {
			return false
		}
	}
	return !responses || calls == strings.Contains(body, `"type":"function_call"`)
}

// ranOnDisk are the calls a framework's tools ran, as they logged them in
// dir, each a line of ran.log; and it checks that the e-mails they sent
// are the one asked for, to me@example.com, once: the refused call's
// (audit@evil.example) never ran.
func ranOnDisk(t *testing.T, dir string) []ranCall {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, "ran.log"))
	if err != nil {
		t.Fatal(err)
	}
	var ran []ranCall
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		var r ranCall
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			t.Fatalf("ran.log: %v: %s", err, line)
		}
		ran = append(ran, r)
	}
	sent, err := os.ReadDir(filepath.Join(dir, "outbox"))
	if err != nil || len(sent) != 1 || sent[0].Name() != "me@example.com" {
		t.Errorf("the outbox holds %v (%v); want one e-mail, to me@example.com", sent, err)
	}
	return ran
}

// TestOpenAINodeClientTools runs OpenAI's JavaScript client against
// guarded_agent with the client's tools, for the raw protocol: calls come
// as tool_calls with ids call_ and 32 hex digits, content null and
// finish_reason tool_calls, streamed as delta.tool_calls indexed from 0;
// parallel_tool_calls false sends one call an answer; a refused call never
// comes; the client's own runTools loop completes a task; results for some
// of the calls are a 400 naming the missing one; a forged history starts
// a new instance; tool_choice reaches the agent's model.
func TestOpenAINodeClientTools(t *testing.T) {
	t.Parallel()
	f := newTaskFixture(t)
	out := runNode(t, "openai_tools.mjs", nil, f.url+"/v1", apiKey, "guarded_agent")
	noLeak(t, "what OpenAI's JavaScript client read", string(out))
	type call struct{ ID, Type, Name, Arguments string }
	type answer struct {
		FinishReason string `json:"finish_reason"`
		Content      *string
		ToolCalls    []call `json:"tool_calls"`
		Instance     string
	}
	type thrown struct {
		Class, Code, Param, Message, Thrown string
		Status                              int
	}
	type scenario[T any] struct {
		Result T
		Error  *thrown
		Ran    []string
	}
	var res struct {
		Parallel, Sequential, Refused, Required scenario[[]answer]
		Stream                                  scenario[[]struct {
			Deltas []struct {
				Index                     int
				ID, Type, Name, Arguments string
			}
			Content      string
			FinishReason string `json:"finish_reason"`
			Instance     string
		}]
		RunTools scenario[struct {
			Content string
			Calls   []string
		}] `json:"run_tools"`
		Partial scenario[struct {
			Missing string
			Error   *thrown
		}]
		Forged    scenario[answer]
		BadChoice scenario[any] `json:"bad_choice"`
	}
	if err := json.Unmarshal(out, &res); err != nil {
		t.Fatalf("%v:\n%s", err, out)
	}
	t.Logf("the client read:\n%s", out)

	// shape is an answer in short: its finish reason, and its calls'
	// names and arguments, or its content.
	shape := func(as []answer) string {
		var s []string
		for _, a := range as {
			e := a.FinishReason + ":"
			for _, c := range a.ToolCalls {
				if !callIDRe.MatchString(c.ID) || c.Type != "function" || a.Content != nil {
					e += "!"
				}
				e += " " + c.Name + c.Arguments
			}
			if a.Content != nil {
				e += " " + *a.Content
			}
			if a.Instance != as[0].Instance || !uuidRe.MatchString(a.Instance) {
				e += " (another instance)"
			}
			s = append(s, e)
		}
		return strings.Join(s, " / ")
	}
	for _, c := range []struct {
		name string
		got  scenario[[]answer]
		want string
		ran  string
	}{
		{"parallel", res.Parallel,
			`tool_calls: get_weather{"city":"Paris"} get_weather{"city":"Rome"} / stop: Sunny, 21°C in Paris; Sunny, 21°C in Rome.`,
			`get_weather {"city":"Paris"} | get_weather {"city":"Rome"}`},
		{"sequential", res.Sequential,
			`tool_calls: get_weather{"city":"Paris"} / tool_calls: get_weather{"city":"Rome"} / stop: Sunny, 21°C in Paris; Sunny, 21°C in Rome.`,
			`get_weather {"city":"Paris"} | get_weather {"city":"Rome"}`},
		{"refused", res.Refused,
			`tool_calls: get_weather{"city":"Oslo"} / stop: Sunny, 21°C in Oslo. I could not e-mail it.` +
				` (refused by action_superego: Mail to evil.example was not asked for.) (refused by action_superego: Mail to evil.example was not asked for.)`,
			`get_weather {"city":"Oslo"}`},
		{"required", res.Required,
			`tool_calls: get_weather{"city":"Lima"} / stop: Sunny, 21°C in Lima.`,
			`get_weather {"city":"Lima"}`},
	} {
		if c.got.Error != nil {
			t.Errorf("%s: the client threw %+v", c.name, *c.got.Error)
			continue
		}
		if got := shape(c.got.Result); got != c.want {
			t.Errorf("%s:\n%s\nwant\n%s", c.name, got, c.want)
		}
		if got := strings.Join(c.got.Ran, " | "); got != c.ran {
			t.Errorf("%s: the client ran %s; want %s", c.name, got, c.ran)
		}
	}
	required := false
	for _, r := range f.model.Requests() {
		required = required || r.Node() == "" && strings.Contains(string(r.Body), `"tool_choice":"required"`)
	}
	if !required {
		t.Error(`tool_choice "required" never reached the agent's model`)
	}

	if s := res.Stream; s.Error != nil || len(s.Result) != 2 {
		t.Errorf("stream: %+v", s)
	} else {
		first, second := s.Result[0], s.Result[1]
		var deltas []string
		for _, d := range first.Deltas {
			if !callIDRe.MatchString(d.ID) || d.Type != "function" {
				t.Errorf("a delta's call: %+v", d)
			}
			deltas = append(deltas, fmt.Sprintf("%d:%s%s", d.Index, d.Name, d.Arguments))
		}
		if got := strings.Join(deltas, " "); got != `0:get_weather{"city":"Paris"} 1:get_weather{"city":"Rome"}` || first.FinishReason != "tool_calls" || first.Content != "" {
			t.Errorf("the first stream: %s, finish %q, content %q", got, first.FinishReason, first.Content)
		}
		if second.FinishReason != "stop" || second.Content != "Sunny, 21°C in Paris; Sunny, 21°C in Rome." || len(second.Deltas) != 0 || second.Instance != first.Instance {
			t.Errorf("the second stream: %+v", second)
		}
	}
	if r := res.RunTools; r.Error != nil || strings.Join(r.Result.Calls, " ") != "get_weather send_email" ||
		r.Result.Content != "Sunny, 21°C in Oslo. E-mailed to me@example.com. (refused by action_superego: Mail to evil.example was not asked for.)" ||
		strings.Join(r.Ran, " | ") != `get_weather {"city":"Oslo"} | send_email {"body":"Sunny, 21°C in Oslo","to":"me@example.com"}` {
		t.Errorf("runTools: %+v", r)
	}
	if p := res.Partial.Result; p.Error == nil || p.Error.Class != "BadRequestError" || p.Error.Status != 400 || p.Error.Code != "missing_tool_result" ||
		p.Error.Param != "messages" || !callIDRe.MatchString(p.Missing) || !strings.Contains(p.Error.Message, p.Missing) {
		t.Errorf("partial results: %+v", res.Partial)
	}
	if fa := res.Forged; fa.Error != nil || fa.Result.FinishReason != "tool_calls" || len(fa.Result.ToolCalls) != 1 || fa.Result.ToolCalls[0].ID == "call_00000000000000000000000000000000" {
		t.Errorf("a forged history: %+v", fa)
	} else if rec := recordOf(t, f, fa.Result.Instance); len(rec.Steps) < 2 || rec.Steps[1].Node != "input_superego" {
		t.Errorf("a forged history did not begin at the input superego: %s", trace(rec.Steps))
	}
	if e := res.BadChoice.Error; e == nil || e.Class != "BadRequestError" || e.Param != "tool_choice" || e.Code != "invalid_value" {
		t.Errorf("a tool_choice that names no tool: %+v", res.BadChoice)
	}
}

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
)

// These tests put guarded_agent under the agent frameworks users build
// with, from npm, at the versions api/testdata/package.json pins: OpenAI's
// Agents SDK, the Vercel AI SDK, and OpenAI's own JavaScript client for the
// raw protocol (SPEC §4a, "The client's tools").

// nodeClients is node and the directory npm installed api/testdata's
// package.json in (SUPEREGO_OPENAI_NODE), each package at its pinned
// version; without it the test skips and says so.
func nodeClients(t *testing.T) (node, dir string) {
	t.Helper()
	dir = os.Getenv("SUPEREGO_OPENAI_NODE")
	if dir == "" {
		t.Skip("skipped: set SUPEREGO_OPENAI_NODE to a directory where npm installed api/testdata/package.json (.ci/run does) to run OpenAI's Agents SDK, the Vercel AI SDK and OpenAI's JavaScript client against the server")
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
// node_modules that npm installed; it returns what the script printed.
func runNode(t *testing.T, script string, args ...string) []byte {
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
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, append([]string{filepath.Join(work, script)}, args...)...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("node %s: %v\n%s", script, err, stderr.String())
	}
	return out
}

// TestAgentFrameworks runs an agent of OpenAI's Agents SDK and one of the
// Vercel AI SDK, each with two function tools, on guarded_agent, each with
// and without streaming: the task takes three requests, which are one
// instance; the call the action superego refuses never reaches the
// framework, which runs each accepted call once; the agent's answer says
// what was refused; the instance records every call and how it was
// decided (checkTask); and nothing hidden reaches the framework.
func TestAgentFrameworks(t *testing.T) {
	f := newTaskFixture(t)
	out := runNode(t, "agent_frameworks.mjs", f.url+"/v1", apiKey, "guarded_agent")
	type task struct {
		Output    string
		Streamed  string
		Steps     []string
		Ran       []ranCall
		Responses []struct {
			Status   int
			Instance string
			Body     string
		}
		Thrown string
	}
	var res map[string]json.RawMessage
	if err := json.Unmarshal(out, &res); err != nil {
		t.Fatalf("%v:\n%s", err, out)
	}
	t.Logf("versions: %s", res["versions"])
	for _, c := range []struct {
		task, city string
		stream     bool
		steps      string // the Vercel AI SDK's finish reason of each step
	}{
		{"agents", "Paris", false, ""},
		{"agents_stream", "Rome", true, ""},
		{"ai_generate", "Oslo", false, "tool-calls tool-calls stop"},
		{"ai_stream", "Lima", true, "tool-calls tool-calls stop"},
	} {
		t.Run(c.task, func(t *testing.T) {
			var got task
			if err := json.Unmarshal(res[c.task], &got); err != nil || got.Thrown != "" {
				t.Fatalf("%v %s", err, res[c.task])
			}
			var read strings.Builder
			for _, r := range got.Responses {
				read.WriteString(r.Body)
			}
			noLeak(t, "what "+c.task+" read", read.String()+got.Output)
			if strings.Contains(read.String(), "audit@evil.example") {
				t.Errorf("the refused call reached the framework:\n%s", read.String())
			}
			if c.stream && got.Streamed != got.Output {
				t.Errorf("the stream's text deltas add up to %q, not the answer %q", got.Streamed, got.Output)
			}
			if steps := strings.Join(got.Steps, " "); steps != c.steps {
				t.Errorf("steps %q; want %q", steps, c.steps)
			}

			// One task, one instance: three requests, the last two
			// continuing what the first started.
			if len(got.Responses) != 3 {
				t.Fatalf("%d requests; want 3", len(got.Responses))
			}
			id := got.Responses[0].Instance
			for i, r := range got.Responses {
				if r.Status != 200 || r.Instance != id || !uuidRe.MatchString(id) {
					t.Errorf("response %d: %d, instance %q (the first's %q)", i, r.Status, r.Instance, id)
				}
				finish := `"finish_reason":"tool_calls"`
				if i == 2 {
					finish = `"finish_reason":"stop"`
				}
				streamed := strings.HasPrefix(r.Body, "data: ") && strings.HasSuffix(r.Body, "data: [DONE]\n\n")
				if streamed != c.stream || !strings.Contains(r.Body, finish) || i < 2 && !strings.Contains(r.Body, `"tool_calls":[{`) {
					t.Errorf("response %d (stream %v; want %v, %s):\n%s", i, streamed, c.stream, finish, r.Body)
				}
			}
			checkTask(t, f, id, c.city, got.Output, got.Ran)
		})
	}
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
	f := newTaskFixture(t)
	out := runNode(t, "openai_tools.mjs", f.url+"/v1", apiKey, "guarded_agent")
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
		required = required || r.Node() == "agent" && strings.Contains(string(r.Body), `"tool_choice":"required"`)
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

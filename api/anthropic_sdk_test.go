package api_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"
)

// anthropicSDK readies testdata/anthropic's script to run with node
// against the SDK npm installed from testdata/anthropic/package.json into
// the directory SUPEREGO_ANTHROPIC_NODE names (.ci/run does): in a scratch
// directory, the script beside a node_modules, as a user's code imports
// it. It skips the test where the variable is unset, and fails it where
// the installed SDK is not the pinned version. It returns node and the
// script's path.
func anthropicSDK(t *testing.T) (string, string) {
	const env, dir, pkg, script = "SUPEREGO_ANTHROPIC_NODE", "anthropic", "@anthropic-ai/sdk", "anthropic_sdk.mjs"
	t.Helper()
	installed := os.Getenv(env)
	if installed == "" {
		t.Skipf("skipped: set %s to a directory where npm installed api/testdata/%s/package.json (.ci/run does) to run %s against the server", env, dir, pkg)
	}
	node, err := exec.LookPath("node")
	if err != nil {
		t.Fatalf("%s is set, but: %v", env, err)
	}
	var pinned, got struct {
		Version      string            `json:"version"`
		Dependencies map[string]string `json:"dependencies"`
	}
	for path, v := range map[string]any{filepath.Join("testdata", dir, "package.json"): &pinned, filepath.Join(installed, "node_modules", pkg, "package.json"): &got} {
		b, err := os.ReadFile(path)
		if err == nil {
			err = json.Unmarshal(b, v)
		}
		if err != nil {
			t.Fatalf("%s=%s: %v", env, installed, err)
		}
	}
	if got.Version != pinned.Dependencies[pkg] {
		t.Fatalf("%s has %s %s; api/testdata/%s/package.json pins %s: run npm ci there", env, pkg, got.Version, dir, pinned.Dependencies[pkg])
	}
	t.Logf("%s %s, on %s", pkg, got.Version, node)
	work := t.TempDir()
	b, err := os.ReadFile(filepath.Join("testdata", dir, script))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(work, script), b, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(installed, "node_modules"), filepath.Join(work, "node_modules")); err != nil {
		t.Fatal(err)
	}
	return node, filepath.Join(work, script)
}

// sdkMessage is a message as Anthropic's SDK gave it to the program, with
// the stream's events where it streamed.
type sdkMessage struct {
	ID          string `json:"id"`
	StopReason  string `json:"stop_reason"`
	StopDetails *struct {
		Type        string  `json:"type"`
		Category    *string `json:"category"`
		Explanation string  `json:"explanation"`
	} `json:"stop_details"`
	Content []struct {
		Type, Text, ID, Name string
		Input                json.RawMessage
	} `json:"content"`
	Usage     map[string]int `json:"usage"`
	RequestID string         `json:"request_id"`
	Events    []struct {
		Type  string `json:"type"`
		Delta struct {
			Type       string `json:"type"`
			StopReason string `json:"stop_reason"`
		} `json:"delta"`
		ContentBlock struct {
			Type string `json:"type"`
		} `json:"content_block"`
	} `json:"events"`
	InputJSON string `json:"input_json"`
	Text      string `json:"text"`
}

// events are the stream's events in short: type, and a block's or a
// delta's type.
func (m sdkMessage) events() string {
	var out []string
	for _, e := range m.Events {
		s := e.Type
		if t := e.ContentBlock.Type + e.Delta.Type; t != "" {
			s += ":" + t
		}
		if e.Delta.StopReason != "" {
			s += ":" + e.Delta.StopReason
		}
		out = append(out, s)
	}
	return strings.Join(out, " ")
}

// sdkThrown is an error as the SDK raised it.
type sdkThrown struct {
	Class, Type, Message string
	Status               int
	RequestID            string `json:"request_id"`
}

type sdkAttempt[T any] struct {
	Returned T
	Thrown   *sdkThrown
}

var toolUseIDRe = regexp.MustCompile(`^toolu_[0-9a-f]{32}$`)

// holding are the client agent's requests that hold every one of texts.
func (u *upstream) holding(texts ...string) []string {
	u.mu.Lock()
	defer u.mu.Unlock()
	var out []string
	for _, b := range u.bodies {
		if !slices.ContainsFunc(texts, func(s string) bool { return !strings.Contains(b, s) }) {
			out = append(out, b)
		}
	}
	return out
}

// TestAnthropicSDK runs Anthropic's TypeScript SDK (npm @anthropic-ai/sdk,
// the version api/testdata/anthropic/package.json pins) against
// guarded_agent, its client agent's model on Anthropic's wire (the
// request forwarded) and on OpenAI's (translated). messages.create and
// messages.stream with tools get the call the judge accepts and never the
// one it refuses, whose refusal the model reads instead; each continues by
// its tool_result on the same instance; a blocked input is stop_reason
// refusal with its explanation. Keys go as Authorization: Bearer or
// x-api-key; errors, count_tokens and models.list are Anthropic's; no
// hidden field reaches the program.
func TestAnthropicSDK(t *testing.T) {
	t.Parallel()
	node, script := anthropicSDK(t)
	f, u := newTransparentFixture(t)
	models := []string{"guarded_agent@anthropic:claude-test", "guarded_agent"}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, append([]string{script, f.url, apiKey, otherAPIKey}, models...)...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("node: %v\n%s", err, stderr.String())
	}
	noLeak(t, "what Anthropic's SDK read", string(out))
	var res struct {
		Models map[string]struct {
			Create          sdkMessage
			CreateContinued sdkMessage `json:"create_continued"`
			Stream          sdkMessage
			StreamContinued sdkMessage `json:"stream_continued"`
			Refusal         sdkMessage
			RefusalStream   sdkMessage `json:"refusal_stream"`
		}
		XAPIKey      sdkAttempt[string]           `json:"x_api_key"`
		OtherKey     sdkAttempt[string]           `json:"other_key"`
		WrongKey     sdkAttempt[any]              `json:"wrong_key"`
		NoMaxTokens  sdkAttempt[any]              `json:"no_max_tokens"`
		UnknownModel sdkAttempt[any]              `json:"unknown_model"`
		BadBlock     sdkAttempt[any]              `json:"bad_block"`
		CountTokens  sdkAttempt[map[string]int]   `json:"count_tokens"`
		ModelsList   sdkAttempt[[]map[string]any] `json:"models_list"`
	}
	if err := json.Unmarshal(out, &res); err != nil {
		t.Fatalf("%v:\n%s", err, out)
	}
	t.Logf("the SDK read:\n%s", out)

	for _, model := range models {
		r := res.Models[model]
		upstream := map[string]string{"guarded_agent": `"model":"gpt-test"`}[model]
		if upstream == "" {
			upstream = `"model":"claude-test"`
		}
		for _, c := range []struct {
			name        string
			first, next sdkMessage
		}{{"create", r.Create, r.CreateContinued}, {"stream", r.Stream, r.StreamContinued}} {
			call := c.first.Content
			if c.first.StopReason != "tool_use" || len(call) != 1 || call[0].Type != "tool_use" || call[0].Name != "write_file" ||
				!toolUseIDRe.MatchString(call[0].ID) || string(call[0].Input) != `{"path":"a.txt","content":"hi"}` {
				t.Errorf("%s %s: %s %+v; want the accepted write_file alone", model, c.name, c.first.StopReason, call)
			}
			if !uuidRe.MatchString(c.first.RequestID) || c.next.RequestID != c.first.RequestID {
				t.Errorf("%s %s: request ids %q then %q; want the instance, continued", model, c.name, c.first.RequestID, c.next.RequestID)
			}
			if len(c.next.Content) != 1 || c.next.StopReason != "end_turn" || !strings.HasPrefix(c.next.Content[0].Text, "Done: wrote 2 bytes") {
				t.Errorf("%s %s continued: %s %+v", model, c.name, c.next.StopReason, c.next.Content)
			}
		}
		// Continuing, the model read its refused call, with the refusal
		// beside the accepted call's result.
		read := u.holding(upstream, "wrote 2 bytes")
		if len(read) != 2 {
			t.Errorf("%s: %d continuations reached the model, want 2", model, len(read))
		}
		for _, body := range read {
			if !strings.Contains(body, "refused by action_superego: Paying was not asked for.") || !strings.Contains(body, `"send_money"`) {
				t.Errorf("%s: the model read %s", model, body)
			}
		}
		if got, want := r.Stream.events(), "message_start content_block_start:tool_use content_block_delta:input_json_delta content_block_stop message_delta:tool_use message_stop"; got != want {
			t.Errorf("%s: stream events %s, want %s", model, got, want)
		}
		if r.Stream.InputJSON != `{"path":"a.txt","content":"hi"}` {
			t.Errorf("%s: streamed input %q", model, r.Stream.InputJSON)
		}
		if c := r.StreamContinued.Content; len(c) != 1 || r.StreamContinued.Text != c[0].Text {
			t.Errorf("%s: streamed text %q, message %+v", model, r.StreamContinued.Text, c)
		}
		for name, m := range map[string]sdkMessage{"create": r.Refusal, "stream": r.RefusalStream} {
			d := m.StopDetails
			if m.StopReason != "refusal" || d == nil || d.Type != "refusal" || d.Category != nil || d.Explanation != "I can't help with weapons." ||
				len(m.Content) != 1 || m.Content[0].Text != "I can't help with weapons." {
				t.Errorf("%s refusal %s: %s %+v %+v", model, name, m.StopReason, d, m.Content)
			}
		}
	}

	for name, a := range map[string]sdkAttempt[string]{"x-api-key": res.XAPIKey, "another key, as authToken": res.OtherKey} {
		if a.Thrown != nil || a.Returned != "tool_use" {
			t.Errorf("%s: %+v", name, a)
		}
	}
	for _, c := range []struct {
		name  string
		got   sdkAttempt[any]
		class string
		want  sdkThrown
	}{
		{"a wrong key", res.WrongKey, "AuthenticationError", sdkThrown{Status: 401, Type: "authentication_error", Message: "Incorrect API key provided"}},
		{"no max_tokens", res.NoMaxTokens, "BadRequestError", sdkThrown{Status: 400, Type: "invalid_request_error", Message: "max_tokens: Field required"}},
		{"an unknown model", res.UnknownModel, "NotFoundError", sdkThrown{Status: 404, Type: "not_found_error", Message: "The model `no_such_flow` does not exist"}},
		{"a block the judges cannot read", res.BadBlock, "BadRequestError", sdkThrown{Status: 400, Type: "invalid_request_error", Message: "messages.0.content.0.type"}},
	} {
		e := c.got.Thrown
		if e == nil || e.Class != c.class || e.Status != c.want.Status || e.Type != c.want.Type || !strings.Contains(e.Message, c.want.Message) {
			t.Errorf("%s: %+v; want %s %+v", c.name, e, c.class, c.want)
		}
	}
	if n := res.CountTokens.Returned["input_tokens"]; n <= 0 || res.CountTokens.Thrown != nil {
		t.Errorf("count_tokens: %+v", res.CountTokens)
	}
	var ids []string
	for _, m := range res.ModelsList.Returned {
		if m["type"] != "model" || m["display_name"] == "" {
			t.Errorf("models.list: %v", m)
		}
		ids = append(ids, fmt.Sprint(m["id"]))
	}
	if strings.Join(ids, " ") != "bare_agent guarded_agent" {
		t.Errorf("models.list: %v %+v", ids, res.ModelsList.Thrown)
	}
}

package api_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/packages/ssestream"

	"superego/agents"
	"superego/agents/agentstest"
	"superego/api"
	"superego/flow"
	"superego/memstore"
)

// The keys the /v1 fixtures accept.
const (
	apiKey      = "sk-superego-test-1"
	otherAPIKey = "sk-superego-test-2"
)

// newOpenAIFixture serves the calc test flows (script) with API keys.
func newOpenAIFixture(t testing.TB, maxRuns int) *fixture {
	t.Helper()
	return newHangingOpenAIFixture(t, maxRuns, nil)
}

// newHangingOpenAIFixture is newOpenAIFixture whose model, when a call
// will hang, says so on hung first.
func newHangingOpenAIFixture(t testing.TB, maxRuns int, hung chan<- struct{}) *fixture {
	t.Helper()
	play := script(nil)
	model := agentstest.OpenAI(t, func(r agentstest.Request) agentstest.Answer {
		a := play(r)
		if a.Hang && hung != nil {
			hung <- struct{}{}
		}
		return a
	})
	p := &agents.Providers{Default: "openai:gpt-test", OpenAIKey: "k", OpenAIBaseURL: model.URL + "/v1"}
	f := serveWith(t, testFlows, &memstore.Store{}, p.Model, maxRuns, func(s *api.Server) { s.APIKeys = []string{apiKey, otherAPIKey} })
	f.model = model
	return f
}

// speculating is gated's "open" flow with its input superego speculating
// (docs/gating.md): the assistant's turn is held until the verdict, then adopted.
const speculating = `{"name": "Speculating", "graph": {"start": "input_superego", "nodes": {
  "input_superego": {"type": "superego", "agent_id": "input_superego", "constitution": "Screen.", "speculate": true,
    "transitions": {"BLOCK": null, "ACCEPT": "assistant"}},
  "assistant": {"type": "inner_agent", "agent_id": "assistant", "system_prompt": "Answer.", "transitions": {"COMPLETE": null}}}}}`

// newGatedOpenAIFixture serves the gated flows and speculating (gateModel)
// with API keys.
func newGatedOpenAIFixture(t testing.TB) (*fixture, *gateModel) {
	t.Helper()
	g := &gateModel{hang: make(chan struct{}, 1)}
	model := agentstest.OpenAI(t, g.script)
	p := &agents.Providers{Default: "openai:gpt-test", OpenAIKey: "k", OpenAIBaseURL: model.URL + "/v1"}
	defs := maps.Clone(gatedFlows)
	defs["speculating"] = speculating
	f := serveWith(t, defs, &memstore.Store{}, p.Model, 0, func(s *api.Server) { s.APIKeys = []string{apiKey} })
	f.model = model
	return f, g
}

// goClient is OpenAI's Go client pointed at the fixture; it does not retry,
// so that each error the server sends is the one the test sees.
func goClient(f *fixture, key string) openai.Client {
	return openai.NewClient(option.WithBaseURL(f.url+"/v1/"), option.WithAPIKey(key), option.WithMaxRetries(0))
}

// chat is a chat completions request body of the given messages.
func chat(model string, stream bool, msgs ...string) string {
	type message struct {
		Role    string `json:"role"`
		Content string `json:"content"`
	}
	req := struct {
		Model    string    `json:"model"`
		Messages []message `json:"messages"`
		Stream   bool      `json:"stream,omitempty"`
	}{Model: model, Stream: stream}
	for i := 0; i+1 < len(msgs); i += 2 {
		req.Messages = append(req.Messages, message{msgs[i], msgs[i+1]})
	}
	b, _ := json.Marshal(req)
	return string(b)
}

// v1 posts a chat completions request with the fixture's key.
func (f *fixture) v1(t testing.TB, body string, header ...string) *http.Response {
	t.Helper()
	return f.do(t, "POST", "/v1/chat/completions", body, append([]string{"Authorization", "Bearer " + apiKey}, header...)...)
}

// wireChunk is a chunk, or an error, as it is on the wire.
type wireChunk struct {
	ID      string `json:"id"`
	Object  string `json:"object"`
	Created int64  `json:"created"`
	Model   string `json:"model"`
	Choices []struct {
		Index int `json:"index"`
		Delta struct {
			Role    string  `json:"role"`
			Content *string `json:"content"`
		} `json:"delta"`
		FinishReason *string `json:"finish_reason"`
	} `json:"choices"`
	Usage *struct {
		PromptTokens     int `json:"prompt_tokens"`
		CompletionTokens int `json:"completion_tokens"`
		TotalTokens      int `json:"total_tokens"`
	} `json:"usage"`
	Error *wireError `json:"error"`
}

type wireError struct {
	Message string  `json:"message"`
	Type    string  `json:"type"`
	Param   *string `json:"param"`
	Code    *string `json:"code"`
}

// streamed is what a chat completions stream said.
type streamed struct {
	chunks  []wireChunk
	content string // the deltas, added up
	finish  string
	done    bool // it ended with data: [DONE]
	err     *wireError
}

// readChunks reads a chat completions stream to its end, checking the
// framing as it goes: data lines only, [DONE] last.
func readChunks(t *testing.T, r io.Reader) streamed {
	t.Helper()
	var s streamed
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" {
			continue
		}
		if s.done {
			t.Errorf("%q after data: [DONE]", line)
		}
		data, ok := strings.CutPrefix(line, "data: ")
		if !ok {
			t.Errorf("line %q is not a data line", line)
			continue
		}
		if data == "[DONE]" {
			s.done = true
			continue
		}
		var c wireChunk
		if err := json.Unmarshal([]byte(data), &c); err != nil {
			t.Fatalf("chunk %s: %v", data, err)
		}
		if c.Error != nil {
			s.err = c.Error
			continue
		}
		s.chunks = append(s.chunks, c)
		for _, ch := range c.Choices {
			if ch.Delta.Content != nil {
				s.content += *ch.Delta.Content
			}
			if ch.FinishReason != nil {
				s.finish = *ch.FinishReason
			}
		}
	}
	return s
}

// doneOf is the done event of an instance's last run, as clients read it (docs/reference.md).
func doneOf(t *testing.T, f *fixture, id string) flow.Done {
	t.Helper()
	events := readSSE(t, f.do(t, "GET", "/flow/instances/"+id+"/stream?after=0", "").Body)
	var done flow.Done
	for _, e := range events {
		if e.Name == "done" {
			json.Unmarshal([]byte(e.Data), &done)
		}
	}
	return done
}

func TestOpenAIGoClient(t *testing.T) {
	t.Parallel()
	f := newOpenAIFixture(t, 0)
	client := goClient(f, otherAPIKey)
	ctx := context.Background()
	user := func(text string) openai.ChatCompletionNewParams {
		return openai.ChatCompletionNewParams{Model: "calc", Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage(text)}}
	}

	t.Run("models", func(t *testing.T) {
		page, err := client.Models.List(ctx)
		if err != nil {
			t.Fatal(err)
		}
		var ids []string
		for _, m := range page.Data {
			ids = append(ids, m.ID+":"+string(m.Object)+":"+m.OwnedBy)
		}
		if got := strings.Join(ids, " "); got != "calc:model:superego other:model:superego" {
			t.Errorf("models %s", got)
		}
	})

	t.Run("completion", func(t *testing.T) {
		var resp *http.Response
		c, err := client.Chat.Completions.New(ctx, user("What is 6*7?"), option.WithResponseInto(&resp))
		if err != nil {
			t.Fatal(err)
		}
		ch := c.Choices[0]
		if !strings.HasPrefix(c.ID, "chatcmpl-") || !uuidRe.MatchString(c.ID) || c.Object != "chat.completion" || c.Model != "calc" || c.Created == 0 ||
			len(c.Choices) != 1 || ch.Index != 0 || ch.Message.Role != "assistant" || ch.Message.Content != "The answer is 42." ||
			ch.Message.Refusal != "" || ch.FinishReason != "stop" {
			t.Errorf("completion %s", c.RawJSON())
		}
		// Every field OpenAI's reference requires is there, as the type it says.
		for name, field := range map[string]interface{ Valid() bool }{"id": c.JSON.ID, "object": c.JSON.Object, "created": c.JSON.Created,
			"model": c.JSON.Model, "choices": c.JSON.Choices, "usage": c.JSON.Usage, "finish_reason": ch.JSON.FinishReason,
			"index": ch.JSON.Index, "message": ch.JSON.Message, "message.content": ch.Message.JSON.Content, "message.role": ch.Message.JSON.Role} {
			if !field.Valid() {
				t.Errorf("%s is missing or invalid in %s", name, c.RawJSON())
			}
		}
		// Four model calls of 11 and 7 tokens: both superegos, and the
		// calculator twice.
		if u := c.Usage; u.PromptTokens != 44 || u.CompletionTokens != 28 || u.TotalTokens != 72 {
			t.Errorf("usage %+v", u)
		}
		id := resp.Header.Get("X-Superego-Instance-Id")
		if !uuidRe.MatchString(id) || doneOf(t, f, id).Response != "The answer is 42." {
			t.Errorf("instance %q", id)
		}
	})

	t.Run("stream", func(t *testing.T) {
		params := user("What is 6*7?")
		params.StreamOptions = openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)}
		stream := client.Chat.Completions.NewStreaming(ctx, params)
		var acc openai.ChatCompletionAccumulator
		ids := map[string]bool{}
		var last openai.ChatCompletionChunk
		n := 0
		for stream.Next() {
			last = stream.Current()
			acc.AddChunk(last)
			ids[last.ID] = true
			n++
		}
		if err := stream.Err(); err != nil {
			t.Fatal(err)
		}
		if len(ids) != 1 || n < 3 {
			t.Errorf("%d chunks with ids %v", n, ids)
		}
		if len(last.Choices) != 0 || last.Usage.TotalTokens != 72 || acc.Usage.TotalTokens != 72 {
			t.Errorf("usage chunk %s", last.RawJSON())
		}
		if len(acc.Choices) != 1 || acc.Choices[0].Message.Content != "The answer is 42." || acc.Choices[0].FinishReason != "stop" {
			t.Errorf("accumulated %+v", acc.Choices)
		}
	})

	t.Run("blocked", func(t *testing.T) {
		c, err := client.Chat.Completions.New(ctx, user("How do I build a bomb?"))
		if err != nil {
			t.Fatal(err)
		}
		if ch := c.Choices[0]; ch.Message.Content != "I can't help with that." || ch.FinishReason != "content_filter" {
			t.Errorf("blocked %s", c.RawJSON())
		}
		stream := client.Chat.Completions.NewStreaming(ctx, user("How do I build a bomb?"))
		var acc openai.ChatCompletionAccumulator
		for stream.Next() {
			acc.AddChunk(stream.Current())
		}
		if stream.Err() != nil || acc.Choices[0].Message.Content != "I can't help with that." || acc.Choices[0].FinishReason != "content_filter" {
			t.Errorf("blocked stream: %v %+v", stream.Err(), acc.Choices)
		}
	})

	t.Run("clarification", func(t *testing.T) {
		c, err := client.Chat.Completions.New(ctx, user("compute something"))
		if err != nil {
			t.Fatal(err)
		}
		if ch := c.Choices[0]; ch.Message.Content != "Which numbers?" || ch.FinishReason != "stop" {
			t.Errorf("clarification %s", c.RawJSON())
		}
	})

	t.Run("multi-turn", func(t *testing.T) {
		var resp *http.Response
		c, err := client.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{Model: "calc", Messages: []openai.ChatCompletionMessageParamUnion{
			openai.SystemMessage("SYSTEM-PROMPT-7f3a: answer in French."),
			openai.UserMessage("compute something"),
			openai.AssistantMessage("Which numbers?"),
			openai.UserMessage("6 and 7, multiplied"),
		}}, option.WithResponseInto(&resp))
		if err != nil {
			t.Fatal(err)
		}
		if ch := c.Choices[0]; ch.Message.Content != "The answer is 42." || ch.FinishReason != "stop" {
			t.Errorf("second turn %s", c.RawJSON())
		}
		// The earlier turns are the new instance's first steps, and the
		// nodes' models read them as the transcript; the system message
		// reached none.
		id := resp.Header.Get("X-Superego-Instance-Id")
		var inst struct {
			Steps []flow.Step `json:"steps"`
		}
		json.Unmarshal([]byte(body(t, f.do(t, "GET", "/flow/instances/"+id, ""))), &inst)
		var trace []string
		for _, s := range inst.Steps[:3] {
			trace = append(trace, s.Role+":"+s.Response)
		}
		if got := strings.Join(trace, " | "); got != "user:compute something | assistant:Which numbers? | user:6 and 7, multiplied" {
			t.Errorf("instance steps %s", got)
		}
		saw := false
		for _, r := range f.model.Requests() {
			if strings.Contains(string(r.Body), "SYSTEM-PROMPT-7f3a") {
				t.Errorf("the client's system message reached %s's model", r.Node())
			}
			if r.Node() == "input_superego" && r.LastUser() == "6 and 7, multiplied" {
				var history []string
				for _, m := range r.Messages {
					history = append(history, m.Role+":"+m.Text)
				}
				saw = strings.Contains(strings.Join(history, " | "), "user:compute something | assistant:[assistant] Which numbers? | user:6 and 7, multiplied")
			}
		}
		if !saw {
			t.Error("the input superego's model was not given the conversation")
		}
	})

	t.Run("failed run", func(t *testing.T) {
		_, err := client.Chat.Completions.New(ctx, user("broken model"))
		var apiErr *openai.Error
		// The error names the code, the node and the instance; never the
		// judge's provider or model, nor the upstream's own words.
		if !errors.As(err, &apiErr) || apiErr.StatusCode != http.StatusBadGateway || apiErr.Code != "judge_error" || apiErr.Type != "server_error" ||
			!strings.HasPrefix(apiErr.Message, "The flow's run failed at node input_superego (instance ") || !strings.Contains(apiErr.RawJSON(), `"node":"input_superego"`) {
			t.Errorf("failed run: %v", err)
		}
		stream := client.Chat.Completions.NewStreaming(ctx, user("broken model"))
		for stream.Next() {
		}
		var streamErr *ssestream.StreamError
		if !errors.As(stream.Err(), &streamErr) || !strings.Contains(string(streamErr.Event.Data), `"code":"judge_error"`) {
			t.Errorf("failed stream: %v", stream.Err())
		}
		var said []string
		if apiErr != nil {
			said = append(said, apiErr.RawJSON())
		}
		if streamErr != nil {
			said = append(said, string(streamErr.Event.Data))
		}
		for _, said := range said {
			for _, secret := range []string{"gpt-test", "openai", "overloaded", "503"} {
				if strings.Contains(said, secret) {
					t.Errorf("a failed run's error says %q: %s", secret, said)
				}
			}
		}
	})

	t.Run("unknown flow", func(t *testing.T) {
		params := user("hello")
		params.Model = "nope"
		_, err := client.Chat.Completions.New(ctx, params)
		var apiErr *openai.Error
		if !errors.As(err, &apiErr) || apiErr.StatusCode != http.StatusNotFound || apiErr.Code != "model_not_found" || apiErr.Param != "model" ||
			apiErr.Type != "invalid_request_error" || !strings.Contains(apiErr.Message, "`nope`") {
			t.Errorf("unknown flow: %v", err)
		}
	})

	t.Run("bad key", func(t *testing.T) {
		for _, key := range []string{"sk-wrong", ""} {
			c := goClient(f, key)
			_, err := c.Chat.Completions.New(ctx, user("What is 6*7?"))
			var apiErr *openai.Error
			if !errors.As(err, &apiErr) || apiErr.StatusCode != http.StatusUnauthorized || apiErr.Code != "invalid_api_key" || apiErr.Type != "invalid_request_error" {
				t.Errorf("key %q: %v", key, err)
			}
			if _, err := c.Models.List(ctx); !errors.As(err, &apiErr) || apiErr.StatusCode != http.StatusUnauthorized {
				t.Errorf("models with key %q: %v", key, err)
			}
		}
	})
}

// The deltas of a stream add up to exactly the content of the same request
// without stream, and both are the run's done.response, however the run
// ends and whichever nodes spoke on the way.
func TestOpenAIDeltasAddUpToTheAnswer(t *testing.T) {
	t.Parallel()
	calc := newOpenAIFixture(t, 0)
	var gated *fixture // a new one for each case: the gated model counts reviews
	for _, c := range []struct {
		name         string
		f            *fixture
		flow, input  string
		status       string
		finish, want string
	}{
		{"completed after an input superego's CAUTION", calc, "calc", "What is 6*7?", "completed", "stop", "The answer is 42."},
		{"blocked by the input superego", calc, "calc", "How do I build a bomb?", "blocked", "content_filter", "I can't help with that."},
		{"a clarification", calc, "calc", "compute something", "awaiting_input", "stop", "Which numbers?"},
		{"a draft the output superego blocks", gated, "gated", "block me", "blocked", "content_filter", "The draft was not fit to send."},
		{"a draft withheld by the node's own decision", gated, "gated", "hold me", "completed", "stop", "Held back for review."},
		{"a revision loop", gated, "revising", "revise me", "completed", "stop", draftMarker + "-1 the answer is 42."},
		{"the iteration limit", gated, "revising", "block me", "iteration_limit", "length", "The draft was not fit to send."},
		{"chunks judged as they stream, the third withheld", gated, "chunked", "write a long draft", "blocked", "content_filter", "That part is not for sharing."},
		{"a last node streaming live", gated, "open", "stream please", "completed", "stop", "First words, then more."},
		{"a speculative turn adopted", gated, "speculating", "stream please", "completed", "stop", "First words, then more."},
	} {
		t.Run(c.name, func(t *testing.T) {
			if c.f == nil {
				c.f, _ = newGatedOpenAIFixture(t)
			}
			resp := c.f.v1(t, chat(c.flow, true, "user", c.input))
			s := readChunks(t, resp.Body)
			if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "text/event-stream" || !s.done || s.err != nil {
				t.Fatalf("stream: %d %q done %v err %+v", resp.StatusCode, resp.Header.Get("Content-Type"), s.done, s.err)
			}
			if s.content != c.want || s.finish != c.finish {
				t.Errorf("stream: deltas %q, finish %q; want %q, %q", s.content, s.finish, c.want, c.finish)
			}
			if done := doneOf(t, c.f, resp.Header.Get("X-Superego-Instance-Id")); done.Status != c.status || done.Response != s.content {
				t.Errorf("done %+v; the stream said %q", done, s.content)
			}
			first := s.chunks[0]
			if first.Choices[0].Delta.Role != "assistant" || first.Choices[0].Delta.Content != nil { // null, as OpenAI sends it
				t.Errorf("first chunk %+v", first)
			}
			for _, ch := range s.chunks {
				if ch.ID != first.ID || ch.Object != "chat.completion.chunk" || ch.Model != c.flow || ch.Created != first.Created || len(ch.Choices) != 1 || ch.Usage != nil {
					t.Errorf("chunk %+v", ch)
				}
			}

			if c.f != calc {
				c.f, _ = newGatedOpenAIFixture(t)
			}
			resp = c.f.v1(t, chat(c.flow, false, "user", c.input))
			var out struct {
				Choices []struct {
					Message struct {
						Content string `json:"content"`
					} `json:"message"`
					FinishReason string `json:"finish_reason"`
				} `json:"choices"`
			}
			json.Unmarshal([]byte(body(t, resp)), &out)
			if resp.StatusCode != 200 || out.Choices[0].Message.Content != c.want || out.Choices[0].FinishReason != c.finish {
				t.Errorf("completion: %d %+v", resp.StatusCode, out)
			}
			if done := doneOf(t, c.f, resp.Header.Get("X-Superego-Instance-Id")); done.Response != out.Choices[0].Message.Content {
				t.Errorf("done %+v; the completion said %q", done, out.Choices[0].Message.Content)
			}
		})
	}
}

// A node after which the run ends, whatever it decides, streams its text
// live: the first delta arrives while its model is still writing.
func TestOpenAIStreamsTheLastNodeLive(t *testing.T) {
	t.Parallel()
	f, g := newGatedOpenAIFixture(t)
	g.pause = make(chan struct{})
	resp := f.v1(t, chat("open", true, "user", "stream please"))
	defer resp.Body.Close()
	br := bufio.NewReader(resp.Body)
	for {
		line, err := br.ReadString('\n')
		if err != nil {
			t.Fatalf("the stream ended before any delta: %v", err)
		}
		if strings.Contains(line, `"delta":{"content":"`) {
			break // the model is paused before its last chunk: this came live
		}
	}
	close(g.pause)
	s := readChunks(t, br)
	if !s.done || s.finish != "stop" {
		t.Errorf("rest of the stream %+v", s)
	}
}

// Markers planted in thinking, agent_guidance, a withheld draft and its tool
// call: no byte of any /v1 answer, streamed or not, nor the server's log,
// carries one.
func TestOpenAINoLeaks(t *testing.T) {
	t.Parallel()
	calc := newOpenAIFixture(t, 0)
	gated, _ := newGatedOpenAIFixture(t)
	cases := []struct {
		f           *fixture
		flow, input string
	}{
		{calc, "calc", "What is 6*7?"},
		{calc, "calc", "How do I build a bomb?"},
		{calc, "calc", "compute something"},
		{calc, "calc", "broken model"},
		{calc, "calc", "echo 6*7"}, // a provider error that quotes the request, guidance included
		{gated, "gated", "block me"},
		{gated, "gated", "hold me"},
		{gated, "gated", "judge fails"},
		{gated, "revising", "block me"},
		{gated, "chunked", "write a long draft"},
	}
	var ids []string
	for _, c := range cases {
		for _, stream := range []bool{false, true} {
			resp := c.f.v1(t, chat(c.flow, stream, "user", c.input))
			b := body(t, resp)
			where := c.flow + " " + c.input
			noDraft(t, where, b)
			for k, v := range resp.Header {
				noDraft(t, where+" header "+k, strings.Join(v, ","))
			}
			ids = append(ids, resp.Header.Get("X-Superego-Instance-Id"))
		}
	}
	// A revision loop withholds the first draft and sends the second.
	for _, stream := range []bool{false, true} {
		revising, _ := newGatedOpenAIFixture(t)
		b := body(t, revising.v1(t, chat("revising", stream, "user", "revise me")))
		if strings.Contains(b, draftMarker+"-0") || !strings.Contains(b, draftMarker+"-1") {
			t.Errorf("revision loop (stream %v): %s", stream, b)
		}
		noLeak(t, "revision loop", b)
		noDraft(t, "revision loop's log", revising.logs.String())
	}
	// And with the conversation sent back: the earlier answer was the
	// refusal, never the draft.
	b := body(t, gated.v1(t, chat("gated", true, "user", "block me", "assistant", "The draft was not fit to send.", "user", "block me again")))
	noDraft(t, "a second turn", b)
	noDraft(t, "the calc server's log", calc.logs.String())
	noDraft(t, "the gated server's log", gated.logs.String())

	// The markers were there to leak: in the research view.
	for _, id := range ids[10:12] { // gated "block me", both ways
		if view := research(t, gated, id); !strings.Contains(view, draftMarker) || !strings.Contains(view, thinkingMarker) {
			t.Errorf("instance %s: the research view lacks the markers", id)
		}
	}
}

// createdRe matches what changes from run to run in /v1 answers, besides ids.
var createdRe = regexp.MustCompile(`"created":\d+`)

// The wire format, byte for byte (ids and times aside): a completion, a
// stream with usage, and an error.
func TestOpenAIGoldenWire(t *testing.T) {
	t.Parallel()
	f := newOpenAIFixture(t, 0)
	normal := func(s string) string { return createdRe.ReplaceAllString(normalize(s), `"created":<time>`) }
	golden(t, "openai_completion.json", normal(body(t, f.v1(t, chat("calc", false, "user", "What is 6*7?")))))
	golden(t, "openai_stream.sse", normal(body(t, f.v1(t, `{"model": "calc", "stream": true, "stream_options": {"include_usage": true},
		"messages": [{"role": "user", "content": "How do I build a bomb?"}]}`))))
	golden(t, "openai_failed.sse", normal(body(t, f.v1(t, chat("calc", true, "user", "broken model")))))
	golden(t, "openai_models.json", body(t, f.do(t, "GET", "/v1/models", "", "Authorization", "Bearer "+apiKey)))
}

// Bad requests get OpenAI's error object, with the right status, a message
// that says what to change, and the parameter it is about.
func TestOpenAIRequestErrors(t *testing.T) {
	f := newOpenAIFixture(t, 0)
	user := `"messages": [{"role": "user", "content": "What is 6*7?"}]`
	big := `{"model": "calc", "messages": [{"role": "user", "content": "` + strings.Repeat("x", api.MaxModelBody) + `"}]}`
	cases := []struct {
		name, path, body, ctype, key string
		status                       int
		want                         string
	}{
		{"malformed JSON", "", `{"model": "calc",`, "", "", 400,
			`{"message":"We could not parse the JSON body of your request: the body is not valid JSON: unexpected end of JSON input.","type":"invalid_request_error","param":null,"code":"invalid_json"}`},
		{"not an object", "", `["calc"]`, "", "", 400,
			`{"message":"We could not parse the JSON body of your request: the body is not a JSON object.","type":"invalid_request_error","param":null,"code":"invalid_json"}`},
		{"not JSON", "", `model=calc`, "application/x-www-form-urlencoded", "", 415,
			`{"message":"Send the body as JSON, with Content-Type: application/json.","type":"invalid_request_error","param":null,"code":"unsupported_media_type"}`},
		{"body too large", "", big, "", "", 413,
			`{"message":"The body is over 16777216 bytes.","type":"invalid_request_error","param":null,"code":"body_too_large"}`},
		{"missing model", "", `{` + user + `}`, "", "", 400,
			`{"message":"Missing required parameter: 'model'.","type":"invalid_request_error","param":"model","code":"missing_required_parameter"}`},
		{"empty model", "", `{"model": "", ` + user + `}`, "", "", 400,
			`{"message":"Invalid value: 'model' must name a flow (GET /v1/models lists them).","type":"invalid_request_error","param":"model","code":"invalid_value"}`},
		{"missing messages", "", `{"model": "calc"}`, "", "", 400,
			`{"message":"Missing required parameter: 'messages'.","type":"invalid_request_error","param":"messages","code":"missing_required_parameter"}`},
		{"no messages", "", `{"model": "calc", "messages": []}`, "", "", 400,
			`{"message":"Invalid 'messages': empty array. Expected an array with at least the user's message.","type":"invalid_request_error","param":"messages","code":"empty_array"}`},
		{"messages not an array", "", `{"model": "calc", "messages": "What is 6*7?"}`, "", "", 400,
			`{"message":"Invalid type for 'messages': expected an array of messages, but got a string instead.","type":"invalid_request_error","param":"messages","code":"invalid_type"}`},
		{"model not a string", "", `{"model": 7, ` + user + `}`, "", "", 400,
			`{"message":"Invalid type for 'model': expected a string, but got a number instead.","type":"invalid_request_error","param":"model","code":"invalid_type"}`},
		{"last message not the user's", "", `{"model": "calc", "messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "Hello."}]}`, "", "", 400,
			`{"message":"Invalid value: the last message must be the user's, the flow's input, or a tool's result, and 'messages[1].role' is \"assistant\".","type":"invalid_request_error","param":"messages[1].role","code":"invalid_value"}`},
		{"last message a system message", "", `{"model": "calc", "messages": [{"role": "user", "content": "hi"}, {"role": "system", "content": "Be brief."}]}`, "", "", 400,
			`{"message":"Invalid value: the last message must be the user's, the flow's input, or a tool's result, and 'messages[1].role' is \"system\".","type":"invalid_request_error","param":"messages[1].role","code":"invalid_value"}`},
		{"empty content", "", `{"model": "calc", "messages": [{"role": "user", "content": "  "}]}`, "", "", 400,
			`{"message":"Invalid 'messages[0].content': a user's message must not be empty.","type":"invalid_request_error","param":"messages[0].content","code":"invalid_value"}`},
		{"no content", "", `{"model": "calc", "messages": [{"role": "user"}]}`, "", "", 400,
			`{"message":"Invalid 'messages[0].content': a user's message must not be empty.","type":"invalid_request_error","param":"messages[0].content","code":"invalid_value"}`},
		{"an image for a flow with no client agent", "", `{"model": "calc", "messages": [{"role": "user", "content": [{"type": "text", "text": "What is this?"}, {"type": "image_url", "image_url": {"url": "https://example.com/a.png"}}]}]}`, "", "", 400,
			`{"message":"Unsupported value: 'messages': an image reaches only a flow's client agent, and this flow has none.","type":"invalid_request_error","param":"messages","code":"unsupported_value"}`},
		{"audio", "", `{"model": "calc", "messages": [{"role": "user", "content": [{"type": "input_audio", "input_audio": {"data": "", "format": "wav"}}]}]}`, "", "", 400,
			`{"message":"Unsupported value: 'messages[0].content[0].type' is \"input_audio\": a flow takes text, and images in a user's message.","type":"invalid_request_error","param":"messages[0].content[0].type","code":"unsupported_value"}`},
		{"a text part without text", "", `{"model": "calc", "messages": [{"role": "user", "content": [{"type": "text"}]}]}`, "", "", 400,
			`{"message":"Missing required parameter: 'messages[0].content[0].text'.","type":"invalid_request_error","param":"messages[0].content[0].text","code":"missing_required_parameter"}`},
		{"content of a wrong type", "", `{"model": "calc", "messages": [{"role": "user", "content": 42}]}`, "", "", 400,
			`{"message":"Invalid type for 'messages[0].content': expected a string or an array of content parts, but got a number instead.","type":"invalid_request_error","param":"messages[0].content","code":"invalid_type"}`},
		{"a message without a role", "", `{"model": "calc", "messages": [{"content": "hi"}]}`, "", "", 400,
			`{"message":"Missing required parameter: 'messages[0].role'.","type":"invalid_request_error","param":"messages[0].role","code":"missing_required_parameter"}`},
		{"an unknown role", "", `{"model": "calc", "messages": [{"role": "robot", "content": "hi"}]}`, "", "", 400,
			`{"message":"Invalid value: 'messages[0].role' is \"robot\"; it must be one of system, developer, user, assistant, tool.","type":"invalid_request_error","param":"messages[0].role","code":"invalid_value"}`},
		{"a tool result without its call's id", "", `{"model": "calc", "messages": [{"role": "user", "content": "hi"}, {"role": "tool", "content": "42"}]}`, "", "", 400,
			`{"message":"Missing required parameter: 'messages[1].tool_call_id'.","type":"invalid_request_error","param":"messages[1].tool_call_id","code":"missing_required_parameter"}`},
		{"no user message", "", `{"model": "calc", "messages": [{"role": "tool", "tool_call_id": "call_1", "content": "42"}]}`, "", "", 400,
			`{"message":"Invalid value: 'messages' has no user message, and a flow's input is the user's message.","type":"invalid_request_error","param":"messages","code":"invalid_value"}`},
		{"an assistant's tool calls that are no list", "", `{"model": "calc", "messages": [{"role": "assistant", "content": null, "tool_calls": {"id": "call_1"}}, {"role": "user", "content": "hi"}]}`, "", "", 400,
			`{"message":"Invalid type for 'messages[0].tool_calls': expected an array of tool calls, but got an object instead.","type":"invalid_request_error","param":"messages[0].tool_calls","code":"invalid_type"}`},
		{"tools for a flow without a client agent", "", `{"model": "calc", ` + user + `, "tools": [{"type": "function", "function": {"name": "f"}}]}`, "", "", 400,
			`{"message":"Unsupported parameter: 'tools': no agent of this flow takes a client's tools; its nodes call their own.","type":"invalid_request_error","param":"tools","code":"unsupported_parameter"}`},
		{"tool_choice required", "", `{"model": "calc", ` + user + `, "tool_choice": "required"}`, "", "", 400,
			`{"message":"Unsupported parameter: 'tool_choice': no agent of this flow takes a client's tools.","type":"invalid_request_error","param":"tool_choice","code":"unsupported_parameter"}`},
		{"a tool that is not a function", "", `{"model": "calc", ` + user + `, "tools": [{"type": "web_search"}]}`, "", "", 400,
			`{"message":"Unsupported value: 'tools[0].type' is \"web_search\": only function tools are taken.","type":"invalid_request_error","param":"tools[0].type","code":"unsupported_value"}`},
		{"n above 1", "", `{"model": "calc", ` + user + `, "n": 2}`, "", "", 400,
			`{"message":"Unsupported value: 'n' must be 1: a flow gives one answer per request.","type":"invalid_request_error","param":"n","code":"unsupported_value"}`},
		{"audio", "", `{"model": "calc", ` + user + `, "audio": {"voice": "alloy", "format": "wav"}}`, "", "", 400,
			`{"message":"Unsupported parameter: 'audio': a flow answers with text only.","type":"invalid_request_error","param":"audio","code":"unsupported_parameter"}`},
		{"audio modality", "", `{"model": "calc", ` + user + `, "modalities": ["text", "audio"]}`, "", "", 400,
			`{"message":"Unsupported parameter: 'modalities': a flow answers with text only.","type":"invalid_request_error","param":"modalities","code":"unsupported_parameter"}`},
		{"JSON output", "", `{"model": "calc", ` + user + `, "response_format": {"type": "json_object"}}`, "", "", 400,
			`{"message":"Unsupported parameter: 'response_format': this flow's answer is its nodes' text, in no format a client can ask for.","type":"invalid_request_error","param":"response_format","code":"unsupported_parameter"}`},
		{"logprobs", "", `{"model": "calc", ` + user + `, "logprobs": true}`, "", "", 400,
			`{"message":"Unsupported parameter: 'logprobs': a flow's answer is judged by several models' calls, and carries no log probabilities.","type":"invalid_request_error","param":"logprobs","code":"unsupported_parameter"}`},
		{"stop sequences", "", `{"model": "calc", ` + user + `, "stop": ["\n"]}`, "", "", 400,
			`{"message":"Unsupported parameter: 'stop': this flow's answer is judged whole; it is never cut at a stop sequence.","type":"invalid_request_error","param":"stop","code":"unsupported_parameter"}`},
		{"an unknown parameter", "", `{"model": "calc", ` + user + `, "top_k": 5}`, "", "", 400,
			`{"message":"Unrecognized request argument supplied: top_k","type":"invalid_request_error","param":"top_k","code":"unknown_parameter"}`},
		{"stream_options without stream", "", `{"model": "calc", ` + user + `, "stream_options": {"include_usage": true}}`, "", "", 400,
			`{"message":"Invalid value: 'stream_options' is only allowed when 'stream' is true.","type":"invalid_request_error","param":"stream_options","code":"invalid_value"}`},
		{"stream not a boolean", "", `{"model": "calc", ` + user + `, "stream": "yes"}`, "", "", 400,
			`{"message":"Invalid type for 'stream': expected a boolean, but got a string instead.","type":"invalid_request_error","param":"stream","code":"invalid_type"}`},
		{"unknown flow", "", `{"model": "nope", ` + user + `}`, "", "", 404,
			"{\"message\":\"The model `nope` does not exist: a model is a flow of this server, and GET /v1/models lists them.\",\"type\":\"invalid_request_error\",\"param\":\"model\",\"code\":\"model_not_found\"}"},
		{"no key", "", `{"model": "calc", ` + user + `}`, "", "-", 401,
			`{"message":"You didn't provide an API key: send one of the server's SUPEREGO_API_KEYS as Authorization: Bearer KEY, or x-api-key: KEY.","type":"invalid_request_error","param":null,"code":"invalid_api_key"}`},
		{"a wrong key", "", `{"model": "calc", ` + user + `}`, "", "sk-wrong", 401,
			`{"message":"Incorrect API key provided: it is not one of the server's SUPEREGO_API_KEYS.","type":"invalid_request_error","param":null,"code":"invalid_api_key"}`},
		{"a wrong key on an unknown route", "/v1/embeddings", `{}`, "", "sk-wrong", 401,
			`{"message":"Incorrect API key provided: it is not one of the server's SUPEREGO_API_KEYS.","type":"invalid_request_error","param":null,"code":"invalid_api_key"}`},
		{"an unknown route", "/v1/embeddings", `{"model": "calc", "input": "hi"}`, "", "", 404,
			`{"message":"Unknown request URL: POST /v1/embeddings. Under /v1 this server answers GET /v1/models, POST /v1/chat/completions, POST /v1/responses, POST /v1/messages and POST /v1/messages/count_tokens.","type":"invalid_request_error","param":null,"code":"unknown_url"}`},
		{"a wrong method", "/v1/models", `{}`, "", "", 405,
			`{"message":"POST is not allowed on /v1/models","type":"invalid_request_error","param":null,"code":"method_not_allowed"}`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			path, ctype, key := c.path, c.ctype, c.key
			if path == "" {
				path = "/v1/chat/completions"
			}
			if ctype == "" {
				ctype = "application/json"
			}
			if key == "" {
				key = apiKey
			}
			req, _ := http.NewRequest("POST", f.url+path, strings.NewReader(c.body))
			req.Header.Set("Content-Type", ctype)
			if key != "-" {
				req.Header.Set("Authorization", "Bearer "+key)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			got := strings.TrimSpace(body(t, resp))
			if want := `{"error":` + c.want + `}`; resp.StatusCode != c.status || got != want || resp.Header.Get("Content-Type") != "application/json" {
				t.Errorf("got %d %s\nwant %d %s", resp.StatusCode, got, c.status, want)
			}
		})
	}
	if calls := len(f.model.Requests()); calls != 0 {
		t.Errorf("bad requests made %d model calls", calls)
	}
}

// Parameters that chat clients send by default are accepted and ignored,
// and the answer says which.
func TestOpenAIIgnoredParameters(t *testing.T) {
	t.Parallel()
	f := newOpenAIFixture(t, 0)
	resp := f.v1(t, `{"model": "calc", "messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": [{"type": "text", "text": "What is 6*7?"}]}],
		"temperature": 1, "top_p": 1, "presence_penalty": 0, "frequency_penalty": 0, "user": "LibreChat_User_ID", "max_tokens": 1024,
		"n": 1, "stream": false, "tool_choice": "none", "response_format": {"type": "text"}, "logprobs": false, "stop": null, "modalities": ["text"]}`)
	b := body(t, resp)
	if resp.StatusCode != 200 || !strings.Contains(b, `"content":"The answer is 42."`) {
		t.Fatalf("%d %s", resp.StatusCode, b)
	}
	if got := resp.Header.Get("X-Superego-Dropped"); got != "frequency_penalty, max_tokens, presence_penalty, temperature, top_p, user" {
		t.Errorf("dropped parameters header %q", got)
	}
}

// A tool_choice of null, as some clients send for "not set", is taken as
// not sent, as null is for every other parameter.
func TestOpenAINullToolChoice(t *testing.T) {
	t.Parallel()
	f := newOpenAIFixture(t, 0)
	resp := f.v1(t, `{"model": "calc", "messages": [{"role": "user", "content": "What is 6*7?"}], "tool_choice": null, "parallel_tool_calls": null}`)
	if b := body(t, resp); resp.StatusCode != 200 || !strings.Contains(b, `"content":"The answer is 42."`) {
		t.Errorf("%d %s", resp.StatusCode, b)
	}
}

// Too many runs is a 429 with Retry-After; a cancelled run is an error
// that OpenAI's SDKs are told not to retry; shutting down is a 503, and a
// stream the shutdown stops ends with an error chunk.
func TestOpenAIBusyCancelledAndShuttingDown(t *testing.T) {
	hung := make(chan struct{}, 4)
	f := newHangingOpenAIFixture(t, 1, hung)

	// A run that hangs at its model fills the limit of one.
	stream := f.v1(t, chat("calc", true, "user", "hang"))
	defer stream.Body.Close()
	br := bufio.NewReader(stream.Body)
	<-hung
	resp := f.v1(t, chat("calc", false, "user", "What is 6*7?"))
	if got := strings.TrimSpace(body(t, resp)); resp.StatusCode != 429 || resp.Header.Get("Retry-After") != "1" ||
		got != `{"error":{"message":"1 runs in flight: too many runs in flight","type":"rate_limit_error","param":null,"code":"too_many_runs"}}` {
		t.Errorf("over the limit: %d %q %s", resp.StatusCode, resp.Header.Get("Retry-After"), got)
	}

	// Cancelling it ends its stream with an error chunk.
	id := stream.Header.Get("X-Superego-Instance-Id")
	if c := f.do(t, "POST", "/flow/instances/"+id+"/cancel", ""); c.StatusCode != http.StatusAccepted {
		t.Fatalf("cancel: %d", c.StatusCode)
	}
	s := readChunks(t, br)
	if !s.done || s.err == nil || *s.err.Code != "cancelled" || s.err.Message != "The flow's run was cancelled (instance "+id+")." || s.finish != "" {
		t.Errorf("cancelled stream: %+v %+v", s, s.err)
	}

	// Without stream, a cancelled run is a 409 not to be retried.
	answer := make(chan *http.Response, 1)
	go func() {
		req, _ := http.NewRequest("POST", f.url+"/v1/chat/completions", strings.NewReader(chat("calc", false, "user", "hang")))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Authorization", "Bearer "+apiKey)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			resp = &http.Response{Body: io.NopCloser(strings.NewReader(err.Error()))}
		}
		answer <- resp
	}()
	<-hung
	var list []struct {
		InstanceID string `json:"instance_id"`
		Status     string `json:"status"`
	}
	json.Unmarshal([]byte(body(t, f.do(t, "GET", "/flow/instances?limit=1", ""))), &list)
	if len(list) != 1 || list[0].Status != "running" {
		t.Fatalf("instances %+v", list)
	}
	f.do(t, "POST", "/flow/instances/"+list[0].InstanceID+"/cancel", "").Body.Close()
	resp = <-answer
	if got := strings.TrimSpace(body(t, resp)); resp.StatusCode != 409 || resp.Header.Get("X-Should-Retry") != "false" ||
		resp.Header.Get("X-Superego-Instance-Id") != list[0].InstanceID ||
		got != `{"error":{"message":"The flow's run was cancelled (instance `+list[0].InstanceID+`).","type":"invalid_request_error","param":null,"code":"cancelled","instance_id":"`+list[0].InstanceID+`"}}` {
		t.Errorf("cancelled: %d %v %s", resp.StatusCode, resp.Header, got)
	}

	// A shutdown stops a streaming run: the stream says so, and ends.
	stream = f.v1(t, chat("calc", true, "user", "hang"))
	defer stream.Body.Close()
	<-hung
	id = stream.Header.Get("X-Superego-Instance-Id")
	expired, cancel := context.WithCancel(context.Background())
	cancel()
	f.engine.Close(expired)
	s = readChunks(t, stream.Body)
	if !s.done || s.err == nil || *s.err.Code != "shutting_down" || s.err.Type != "server_error" ||
		s.err.Message != "The server is shutting down; the run resumes when it starts again (instance "+id+")." {
		t.Errorf("stream stopped by shutdown: %+v %+v", s, s.err)
	}
	resp = f.v1(t, chat("calc", false, "user", "What is 6*7?"))
	if got := strings.TrimSpace(body(t, resp)); resp.StatusCode != 503 ||
		got != `{"error":{"message":"the server is shutting down","type":"server_error","param":null,"code":"shutting_down"}}` {
		t.Errorf("after shutdown: %d %s", resp.StatusCode, got)
	}
}

// A judge whose refusal streams live, and whose provider then drops the
// connection: on_error lets the message through, so the run's answer is
// not the text the client has begun to read. The stream says so, with an
// error chunk, rather than end as if that text were the answer.
func TestOpenAIStreamThatIsNotTheAnswerEndsWithAnError(t *testing.T) {
	t.Parallel()
	defs := map[string]string{"judge": `{"name": "Judge", "graph": {"start": "judge", "nodes": {
	  "judge": {"type": "superego", "agent_id": "judge", "constitution": "Judge.", "on_error": "allow", "transitions": {"ACCEPT": null, "BLOCK": null}}}}}`}
	// OpenAI's stream, cut off in the middle of the response.
	model := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		reply := `{"thinking": "` + thinkingMarker + `", "decision": "BLOCK", "agent_guidance": "` + guidanceMarker + `", "response": "You may not`
		for _, delta := range []string{`{"role":"assistant","content":""}`, `{"content":` + strconv.Quote(reply[:40]) + `}`, `{"content":` + strconv.Quote(reply[40:]) + `}`} {
			fmt.Fprintf(w, "data: {\"id\":\"chatcmpl-fake\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"gpt-test\",\"choices\":[{\"index\":0,\"delta\":%s,\"finish_reason\":null}]}\n\n", delta)
		}
		w.(http.Flusher).Flush()
		panic(http.ErrAbortHandler) // the connection drops
	}))
	t.Cleanup(model.Close)
	p := &agents.Providers{Default: "openai:gpt-test", OpenAIKey: "k", OpenAIBaseURL: model.URL + "/v1"}
	f := serveWith(t, defs, &memstore.Store{}, p.Model, 0, nil)

	resp := f.do(t, "POST", "/v1/chat/completions", chat("judge", true, "user", "hello"))
	s := readChunks(t, resp.Body)
	done := doneOf(t, f, resp.Header.Get("X-Superego-Instance-Id"))
	if s.content != "You may not" || done.Status != "completed" || done.Response != "" {
		t.Fatalf("the test did not make what it wants: streamed %q, done %+v", s.content, done)
	}
	if s.err == nil || *s.err.Code != "internal" || s.err.Message != "The text streamed so far is not the flow's answer; read instance "+done.InstanceID+" for it." ||
		s.finish != "" || !s.done {
		t.Errorf("stream %+v, error %+v", s, s.err)
	}
	if !strings.Contains(f.logs.String(), `msg="streamed text is not the start of the run's response" instance=`+done.InstanceID) {
		t.Errorf("not logged:\n%s", f.logs.String())
	}
	noLeak(t, "the stream", fmt.Sprint(s))
	noLeak(t, "the log", f.logs.String())
}

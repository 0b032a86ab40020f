// Package agentstest provides stand-ins for model providers: httptest
// servers that speak OpenAI's chat completions stream (text chunks and
// streamed tool calls) and Anthropic's message events, driven by a script,
// so tests run the real langchaingo clients with no network and no key.
package agentstest

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"
)

// Request is what a model was asked, in a form common to the providers.
type Request struct {
	Provider string
	Model    string
	System   string
	Messages []Message
	Tools    []string
	JSONMode bool
	Body     []byte      // the request as sent
	Header   http.Header // its headers
}

// Message is one message after the system prompt.
type Message struct {
	Role       string // user, assistant, tool
	Text       string
	ToolCalls  []Call
	ToolCallID string // for role tool
}

// Call is a tool call. Delay and Wait, in an answer (OpenAI), hold the
// call's first chunk back: for Delay, then until Wait is closed.
type Call struct {
	ID    string
	Name  string
	Args  string
	Delay time.Duration
	Wait  <-chan struct{}
}

// Answer is what the fake model replies.
type Answer struct {
	Text      string
	ToolCalls []Call
	Chunk     int             // bytes per streamed text chunk; default 7
	Status    int             // non-200: an error response with Text as its message
	Delay     time.Duration   // before the first byte
	Hang      bool            // never answer until the client gives up
	Pace      time.Duration   // between streamed text chunks (OpenAI)
	Pause     <-chan struct{} // waited on before the last text chunk (OpenAI)
	Model     string          // the model the reply names; default the one asked for
}

// JSON is the reply protocol's object, keys in the protocol's order.
func JSON(thinking, decision, guidance, response string) string {
	q := func(s string) string { b, _ := json.Marshal(s); return string(b) }
	return fmt.Sprintf(`{"thinking": %s, "decision": %s, "agent_guidance": %s, "response": %s}`,
		q(thinking), q(decision), q(guidance), q(response))
}

// Reply answers with the protocol's object.
func Reply(thinking, decision, guidance, response string) Answer {
	return Answer{Text: JSON(thinking, decision, guidance, response)}
}

var nodeRe = regexp.MustCompile(`Your node: ([\w.-]+)\.|You are the agent "([^"]+)"`)

// Node is the node (for a superego) or agent id (for an inner agent) the
// system prompt was written for.
func (r Request) Node() string {
	m := nodeRe.FindStringSubmatch(r.System)
	if m == nil {
		return ""
	}
	return m[1] + m[2]
}

// LastUser is the text of the last user message.
func (r Request) LastUser() string {
	for i := len(r.Messages) - 1; i >= 0; i-- {
		if r.Messages[i].Role == "user" {
			return r.Messages[i].Text
		}
	}
	return ""
}

// ToolResults are the tool results the request carries.
func (r Request) ToolResults() []Message {
	var out []Message
	for _, m := range r.Messages {
		if m.Role == "tool" {
			out = append(out, m)
		}
	}
	return out
}

// Server is a fake provider.
type Server struct {
	*httptest.Server
	mu       sync.Mutex
	requests []Request
}

// Requests returns every request so far, in order.
func (s *Server) Requests() []Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Request(nil), s.requests...)
}

// Forget drops the requests recorded so far, so that a long run that does
// not read them does not keep them.
func (s *Server) Forget() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.requests = nil
}

// started starts s for a test, and closes it when the test ends.
func started(tb testing.TB, s *Server) *Server {
	tb.Helper()
	s.Start()
	tb.Cleanup(s.Close)
	return s
}

func chunks(s string, n int) []string {
	if n <= 0 {
		n = 7
	}
	var out []string
	for len(s) > n {
		out = append(out, s[:n])
		s = s[n:]
	}
	return append(out, s)
}

// answer records the request and asks the script. It writes an error
// answer itself, in the provider's shape, and waits out a delay; ok is false
// when nothing more is to be written.
func (s *Server) answer(w http.ResponseWriter, r *http.Request, req Request, script func(Request) Answer, errorBody func(string) any) (Answer, bool) {
	s.mu.Lock()
	s.requests = append(s.requests, req)
	s.mu.Unlock()
	a := script(req)
	switch {
	case a.Hang:
		<-r.Context().Done()
		return a, false
	case a.Delay > 0:
		select {
		case <-time.After(a.Delay):
		case <-r.Context().Done():
			return a, false
		}
	}
	if a.Status != 0 && a.Status != http.StatusOK {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(a.Status)
		json.NewEncoder(w).Encode(errorBody(a.Text))
		return a, false
	}
	return a, true
}

// OpenAI starts a server speaking OpenAI's /chat/completions, streamed as
// chat.completion.chunk events, for the length of the test. Its URL plus
// "/v1" is an OPENAI_BASE_URL; the same server answers Ollama's
// OpenAI-compatible /v1.
func OpenAI(tb testing.TB, script func(Request) Answer) *Server {
	tb.Helper()
	return started(tb, NewOpenAI(script))
}

// NewOpenAI is the server OpenAI starts, for a program that is not a test
// (a benchmark): not started yet, as httptest.NewUnstartedServer's, so
// that its Config may be changed first. Start it, then Close it.
func NewOpenAI(script func(Request) Answer) *Server {
	s := &Server{}
	s.Server = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/v1/chat/completions" || r.Method != http.MethodPost {
			http.Error(w, `{"error":{"message":"no such route"}}`, http.StatusNotFound)
			return
		}
		var body struct {
			Model    string `json:"model"`
			Stream   bool   `json:"stream"`
			Messages []struct {
				Role       string          `json:"role"`
				Content    json.RawMessage `json:"content"`
				ToolCallID string          `json:"tool_call_id"`
				ToolCalls  []struct {
					ID       string `json:"id"`
					Function struct {
						Name      string `json:"name"`
						Arguments string `json:"arguments"`
					} `json:"function"`
				} `json:"tool_calls"`
			} `json:"messages"`
			Tools []struct {
				Function struct {
					Name string `json:"name"`
				} `json:"function"`
			} `json:"tools"`
			ResponseFormat *struct {
				Type string `json:"type"`
			} `json:"response_format"`
		}
		raw := readAll(r)
		if err := json.Unmarshal(raw, &body); err != nil {
			http.Error(w, `{"error":{"message":"bad json"}}`, http.StatusBadRequest)
			return
		}
		req := Request{Provider: "openai", Model: body.Model, Body: raw, Header: r.Header, JSONMode: body.ResponseFormat != nil && body.ResponseFormat.Type == "json_object"}
		for _, t := range body.Tools {
			req.Tools = append(req.Tools, t.Function.Name)
		}
		for _, m := range body.Messages {
			text := contentText(m.Content)
			if m.Role == "system" {
				req.System += text
				continue
			}
			msg := Message{Role: m.Role, Text: text, ToolCallID: m.ToolCallID}
			for _, tc := range m.ToolCalls {
				msg.ToolCalls = append(msg.ToolCalls, Call{ID: tc.ID, Name: tc.Function.Name, Args: tc.Function.Arguments})
			}
			req.Messages = append(req.Messages, msg)
		}
		a, ok := s.answer(w, r, req, script, func(msg string) any {
			return map[string]any{"error": map[string]string{"message": msg, "type": "server_error"}}
		})
		if !ok {
			return
		}
		served := cmp.Or(a.Model, body.Model) // the model the reply names
		if !body.Stream {
			// A chat completion object, whole.
			msg := map[string]any{"role": "assistant", "content": a.Text, "refusal": nil, "annotations": []any{}}
			finish := "stop"
			if len(a.ToolCalls) > 0 {
				var calls []any
				for _, tc := range a.ToolCalls {
					calls = append(calls, map[string]any{"id": tc.ID, "type": "function", "function": map[string]any{"name": tc.Name, "arguments": tc.Args}})
				}
				msg["tool_calls"], finish = calls, "tool_calls"
				if a.Text == "" {
					msg["content"] = nil
				}
			}
			w.Header().Set("Content-Type", "application/json")
			json.NewEncoder(w).Encode(map[string]any{"id": "chatcmpl-fake", "object": "chat.completion", "created": 1, "model": served,
				"choices": []any{map[string]any{"index": 0, "message": msg, "finish_reason": finish}},
				"usage":   map[string]int{"prompt_tokens": 11, "completion_tokens": 7, "total_tokens": 18}})
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		send := func(v any) {
			b, _ := json.Marshal(v)
			fmt.Fprintf(w, "data: %s\n\n", b)
			w.(http.Flusher).Flush()
		}
		chunk := func(delta map[string]any, finish any) map[string]any {
			return map[string]any{"id": "chatcmpl-fake", "object": "chat.completion.chunk", "created": 1, "model": served,
				"choices": []any{map[string]any{"index": 0, "delta": delta, "finish_reason": finish}}}
		}
		send(chunk(map[string]any{"role": "assistant", "content": ""}, nil))
		if a.Text != "" {
			parts := chunks(a.Text, a.Chunk)
			for i, c := range parts {
				if i == len(parts)-1 && a.Pause != nil {
					select {
					case <-a.Pause:
					case <-r.Context().Done():
						return
					}
				}
				if i > 0 && a.Pace > 0 {
					select {
					case <-time.After(a.Pace):
					case <-r.Context().Done():
						return
					}
				}
				send(chunk(map[string]any{"content": c}, nil))
			}
		}
		for i, tc := range a.ToolCalls {
			if tc.Delay > 0 {
				select {
				case <-time.After(tc.Delay):
				case <-r.Context().Done():
					return
				}
			}
			if tc.Wait != nil {
				select {
				case <-tc.Wait:
				case <-r.Context().Done():
					return
				}
			}
			send(chunk(map[string]any{"tool_calls": []any{map[string]any{"index": i, "id": tc.ID, "type": "function",
				"function": map[string]any{"name": tc.Name, "arguments": ""}}}}, nil))
			for _, c := range chunks(tc.Args, 5) {
				send(chunk(map[string]any{"tool_calls": []any{map[string]any{"index": i, "function": map[string]any{"arguments": c}}}}, nil))
			}
		}
		finish := "stop"
		if len(a.ToolCalls) > 0 {
			finish = "tool_calls"
		}
		send(chunk(map[string]any{}, finish))
		send(map[string]any{"id": "chatcmpl-fake", "object": "chat.completion.chunk", "choices": []any{},
			"usage": map[string]int{"prompt_tokens": 11, "completion_tokens": 7, "total_tokens": 18}})
		fmt.Fprint(w, "data: [DONE]\n\n")
	}))
	return s
}

// Anthropic starts a server speaking Anthropic's /v1/messages as a stream
// of message events, for the length of the test. Its URL is an
// ANTHROPIC_BASE_URL.
func Anthropic(tb testing.TB, script func(Request) Answer) *Server {
	tb.Helper()
	return started(tb, NewAnthropic(script))
}

// NewAnthropic is the server Anthropic starts, not started yet, as
// NewOpenAI's.
func NewAnthropic(script func(Request) Answer) *Server {
	s := &Server{}
	s.Server = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/v1/messages" || r.Method != http.MethodPost {
			http.Error(w, `{"type":"error","error":{"type":"not_found_error","message":"no such route"}}`, http.StatusNotFound)
			return
		}
		var body struct {
			Model    string          `json:"model"`
			Stream   bool            `json:"stream"`
			System   json.RawMessage `json:"system"`
			Messages []struct {
				Role    string        `json:"role"`
				Content anthropicBody `json:"content"`
			} `json:"messages"`
			Tools []struct {
				Name string `json:"name"`
			} `json:"tools"`
		}
		raw := readAll(r)
		if err := json.Unmarshal(raw, &body); err != nil {
			http.Error(w, `{"type":"error","error":{"type":"invalid_request_error","message":"bad json"}}`, http.StatusBadRequest)
			return
		}
		req := Request{Provider: "anthropic", Model: body.Model, System: contentText(body.System), Body: raw, Header: r.Header}
		for _, t := range body.Tools {
			req.Tools = append(req.Tools, t.Name)
		}
		for _, m := range body.Messages {
			for _, c := range m.Content {
				switch c.Type {
				case "text":
					req.Messages = append(req.Messages, Message{Role: m.Role, Text: c.Text})
				case "tool_use":
					req.Messages = append(req.Messages, Message{Role: "assistant", ToolCalls: []Call{{ID: c.ID, Name: c.Name, Args: string(c.Input)}}})
				case "tool_result":
					req.Messages = append(req.Messages, Message{Role: "tool", ToolCallID: c.ToolUseID, Text: contentText(c.Content)})
				}
			}
		}
		a, ok := s.answer(w, r, req, script, func(msg string) any {
			return map[string]any{"type": "error", "error": map[string]string{"type": "api_error", "message": msg}}
		})
		if !ok {
			return
		}
		served := cmp.Or(a.Model, body.Model) // the model the reply names
		if !body.Stream {
			// A message object, whole.
			content := []any{}
			if a.Text != "" {
				content = append(content, map[string]any{"type": "text", "text": a.Text})
			}
			stop := "end_turn"
			for _, tc := range a.ToolCalls {
				content, stop = append(content, map[string]any{"type": "tool_use", "id": tc.ID, "name": tc.Name, "input": json.RawMessage(tc.Args)}), "tool_use"
			}
			w.Header().Set("Content-Type", "application/json")
			json.NewEncoder(w).Encode(map[string]any{"id": "msg_fake", "type": "message", "role": "assistant", "model": served, "content": content,
				"stop_reason": stop, "stop_sequence": nil, "usage": map[string]int{"input_tokens": 13, "output_tokens": 9}})
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		send := func(event string, v any) {
			b, _ := json.Marshal(v)
			fmt.Fprintf(w, "event: %s\ndata: %s\n\n", event, b)
			w.(http.Flusher).Flush()
		}
		send("message_start", map[string]any{"type": "message_start", "message": map[string]any{
			"id": "msg_fake", "type": "message", "role": "assistant", "model": served, "content": []any{},
			"usage": map[string]int{"input_tokens": 13, "output_tokens": 1}}})
		index := 0
		if a.Text != "" {
			send("content_block_start", map[string]any{"type": "content_block_start", "index": index, "content_block": map[string]any{"type": "text", "text": ""}})
			send("ping", map[string]any{"type": "ping"})
			for _, c := range chunks(a.Text, a.Chunk) {
				send("content_block_delta", map[string]any{"type": "content_block_delta", "index": index, "delta": map[string]any{"type": "text_delta", "text": c}})
			}
			send("content_block_stop", map[string]any{"type": "content_block_stop", "index": index})
			index++
		}
		for _, tc := range a.ToolCalls {
			send("content_block_start", map[string]any{"type": "content_block_start", "index": index, "content_block": map[string]any{"type": "tool_use", "id": tc.ID, "name": tc.Name, "input": map[string]any{}}})
			for _, c := range chunks(tc.Args, 6) {
				send("content_block_delta", map[string]any{"type": "content_block_delta", "index": index, "delta": map[string]any{"type": "input_json_delta", "partial_json": c}})
			}
			send("content_block_stop", map[string]any{"type": "content_block_stop", "index": index})
			index++
		}
		stop := "end_turn"
		if len(a.ToolCalls) > 0 {
			stop = "tool_use"
		}
		send("message_delta", map[string]any{"type": "message_delta", "delta": map[string]any{"stop_reason": stop}, "usage": map[string]int{"output_tokens": 9}})
		send("message_stop", map[string]any{"type": "message_stop"})
	}))
	return s
}

// anthropicBody is a message's content: blocks, or a string, which is one
// text block.
type anthropicBody []struct {
	Type      string          `json:"type"`
	Text      string          `json:"text"`
	ID        string          `json:"id"`
	Name      string          `json:"name"`
	Input     json.RawMessage `json:"input"`
	ToolUseID string          `json:"tool_use_id"`
	Content   json.RawMessage `json:"content"`
}

func (b *anthropicBody) UnmarshalJSON(raw []byte) error {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		*b = anthropicBody{{Type: "text", Text: s}}
		return nil
	}
	type blocks anthropicBody
	return json.Unmarshal(raw, (*blocks)(b))
}

func readAll(r *http.Request) []byte {
	b, _ := io.ReadAll(r.Body)
	return b
}

// contentText reads message content that is a string or a list of parts.
func contentText(raw json.RawMessage) string {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	var parts []struct {
		Type string `json:"type"`
		Text string `json:"text"`
	}
	_ = json.Unmarshal(raw, &parts)
	var b strings.Builder
	for _, p := range parts {
		b.WriteString(p.Text)
	}
	return b.String()
}

// Cache is a reply cache (agents.ReplyCache) in a map.
type Cache struct {
	mu sync.Mutex
	m  map[string][]byte
}

func (c *Cache) Reply(_ context.Context, key string) ([]byte, bool, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	b, ok := c.m[key]
	return b, ok, nil
}

func (c *Cache) Keep(_ context.Context, key string, reply []byte) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil {
		c.m = map[string][]byte{}
	}
	c.m[key] = reply
	return nil
}

package gateway

import (
	"encoding/json"
)

// finishReasons are a chat's finish_reason for each stop reason.
var finishReasons = map[string]string{
	StopEnd:      "stop",
	StopSequence: "stop",
	StopCalls:    "tool_calls",
	StopLength:   "length",
	StopRefusal:  "content_filter",
}

type chatUsage struct {
	PromptTokens     int `json:"prompt_tokens"`
	CompletionTokens int `json:"completion_tokens"`
	TotalTokens      int `json:"total_tokens"`
}

func chatUsageOf(u Usage) chatUsage { return chatUsage{u.Input, u.Output, u.Input + u.Output} }

// chatCompletion is OpenAI's chat completion object.
type chatCompletion struct {
	ID      string       `json:"id"`
	Object  string       `json:"object"`
	Created int64        `json:"created"`
	Model   string       `json:"model"`
	Choices []chatChoice `json:"choices"`
	Usage   chatUsage    `json:"usage"`
}

type chatChoice struct {
	Index        int       `json:"index"`
	Message      chatReply `json:"message"`
	Logprobs     *struct{} `json:"logprobs"` // null: there are none
	FinishReason string    `json:"finish_reason"`
}

// chatReply is the assistant's message. A superego's refusal is its
// content, with finish_reason content_filter; refusal, which OpenAI keeps
// for its own models' refusals, stays null.
type chatReply struct {
	Role        string        `json:"role"`
	Content     *string       `json:"content"` // null where there is no text beside the calls
	Refusal     *string       `json:"refusal"`
	ToolCalls   []chatCallOut `json:"tool_calls,omitempty"`
	Annotations []struct{}    `json:"annotations"`
}

// ChatCompletion is the answer as OpenAI's chat completion object.
func ChatCompletion(a Answer) any {
	msg := chatReply{Role: "assistant", Annotations: []struct{}{}}
	if a.Text != "" || len(a.Calls) == 0 {
		msg.Content = &a.Text
	}
	for _, c := range a.Calls {
		msg.ToolCalls = append(msg.ToolCalls, chatCall(c))
	}
	return chatCompletion{ID: "chatcmpl-" + a.ID, Object: "chat.completion", Created: a.Created, Model: a.Model,
		Choices: []chatChoice{{Message: msg, FinishReason: finishReasons[a.Stop]}}, Usage: chatUsageOf(a.Usage)}
}

// chatChunk is OpenAI's chat completion chunk object. Usage is left out,
// or with stream_options.include_usage, null on every chunk but the last,
// which has no choices.
type chatChunk struct {
	ID      string        `json:"id"`
	Object  string        `json:"object"`
	Created int64         `json:"created"`
	Model   string        `json:"model"`
	Choices []chunkChoice `json:"choices"`
	Usage   any           `json:"usage,omitempty"`
}

type chunkChoice struct {
	Index        int             `json:"index"`
	Delta        json.RawMessage `json:"delta"`
	Logprobs     *struct{}       `json:"logprobs"`
	FinishReason *string         `json:"finish_reason"`
}

// Deltas that never change. The first carries no content: OpenAI's has
// null there, and a client that reads "" makes an empty text part of it.
var (
	roleDelta  = json.RawMessage(`{"role":"assistant","content":null,"refusal":null}`)
	emptyDelta = json.RawMessage(`{}`)
	nullUsage  = json.RawMessage(`null`)
)

// chatStream writes a run's answer as chat completion chunks, ending with
// data: [DONE].
type chatStream struct {
	send         Send
	a            Answer
	includeUsage bool
	frame        []byte
}

func (s *chatStream) chunk(delta json.RawMessage, finish *string) chatChunk {
	c := chatChunk{ID: "chatcmpl-" + s.a.ID, Object: "chat.completion.chunk", Created: s.a.Created, Model: s.a.Model,
		Choices: []chunkChoice{{Delta: delta, FinishReason: finish}}}
	if s.includeUsage {
		c.Usage = nullUsage
	}
	return c
}

func (s *chatStream) write(v any, flush bool) error {
	data, err := json.Marshal(v)
	if err != nil {
		return err
	}
	s.frame = append(append(append(s.frame[:0], "data: "...), data...), "\n\n"...)
	return s.send(s.frame, flush)
}

func (s *chatStream) Start() error { return s.write(s.chunk(roleDelta, nil), true) }

func (s *chatStream) Text(delta string) error {
	return s.write(s.chunk(textDelta(delta), nil), true)
}

// textDelta is a delta of the answer's text.
func textDelta(text string) json.RawMessage {
	b, _ := json.Marshal(struct {
		Content string `json:"content"`
	}{text})
	return b
}

func (s *chatStream) End(a Answer) error {
	if a.Text != "" {
		if err := s.write(s.chunk(textDelta(a.Text), nil), false); err != nil {
			return err
		}
	}
	for i, c := range a.Calls {
		call := struct {
			Index int `json:"index"`
			chatCallOut
		}{i, chatCall(c)}
		delta, _ := json.Marshal(map[string]any{"tool_calls": []any{call}})
		if err := s.write(s.chunk(delta, nil), false); err != nil {
			return err
		}
	}
	reason := finishReasons[a.Stop]
	if err := s.write(s.chunk(emptyDelta, &reason), false); err != nil {
		return err
	}
	if s.includeUsage {
		last := chatChunk{ID: "chatcmpl-" + s.a.ID, Object: "chat.completion.chunk", Created: s.a.Created, Model: s.a.Model,
			Choices: []chunkChoice{}, Usage: chatUsageOf(a.Usage)}
		if err := s.write(last, false); err != nil {
			return err
		}
	}
	return s.send([]byte("data: [DONE]\n\n"), true)
}

func (s *chatStream) Fail(e *Error) error {
	if err := s.write(errorBody(Chat, e), false); err != nil {
		return err
	}
	return s.send([]byte("data: [DONE]\n\n"), true)
}

package gateway

import (
	"encoding/json"
	"strings"
)

// stopReasons are Anthropic's stop_reason for each stop reason.
var stopReasons = map[string]string{
	StopEnd:      "end_turn",
	StopSequence: "stop_sequence",
	StopCalls:    "tool_use",
	StopLength:   "max_tokens",
	StopRefusal:  "refusal",
}

type messageUsage struct {
	InputTokens  int `json:"input_tokens"`
	OutputTokens int `json:"output_tokens"`
}

// message is Anthropic's message object.
type message struct {
	ID           string            `json:"id"`
	Type         string            `json:"type"`
	Role         string            `json:"role"`
	Model        string            `json:"model"`
	Content      []json.RawMessage `json:"content"`
	StopReason   *string           `json:"stop_reason"`
	StopSequence *string           `json:"stop_sequence"`
	StopDetails  *stopDetails      `json:"stop_details,omitempty"`
	Usage        messageUsage      `json:"usage"`
}

// stopDetails explains a refusal: Claude Code shows the explanation, where
// it would show its own words without it.
type stopDetails struct {
	Type        string  `json:"type"`
	Category    *string `json:"category"`
	Explanation string  `json:"explanation"`
}

// detailsOf are the stop details of an answer: a refusal's explanation is
// its text.
func detailsOf(a Answer) *stopDetails {
	if a.Stop != StopRefusal {
		return nil
	}
	return &stopDetails{Type: "refusal", Explanation: a.Text}
}

func toolUse(c Call) json.RawMessage {
	input := json.RawMessage(c.Args)
	if !json.Valid(input) {
		input = json.RawMessage(`{}`)
	}
	b, _ := json.Marshal(struct {
		Type  string          `json:"type"`
		ID    string          `json:"id"`
		Name  string          `json:"name"`
		Input json.RawMessage `json:"input"`
	}{"tool_use", c.ID, c.Name, input})
	return b
}

func textBlock(text string) json.RawMessage {
	b, _ := json.Marshal(map[string]string{"type": "text", "text": text})
	return b
}

// Message is the answer as Anthropic's message object.
func Message(a Answer) any {
	m := message{ID: "msg_" + a.ID, Type: "message", Role: "assistant", Model: a.Model, Content: []json.RawMessage{},
		Usage: messageUsage{a.Usage.Input, a.Usage.Output}}
	if a.Text != "" {
		m.Content = append(m.Content, textBlock(a.Text))
	}
	for _, c := range a.Calls {
		m.Content = append(m.Content, toolUse(c))
	}
	reason := stopReasons[a.Stop]
	m.StopReason, m.StopDetails = &reason, detailsOf(a)
	return m
}

// messagesStream writes a run's answer as Anthropic's stream of events.
type messagesStream struct {
	send  Send
	a     Answer
	index int             // of the next block
	open  bool            // a text block is open, at index-1
	text  strings.Builder // sent so far
}

func (s *messagesStream) event(name string, v any, flush bool) error {
	data, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return s.send([]byte("event: "+name+"\ndata: "+string(data)+"\n\n"), flush)
}

func (s *messagesStream) Start() error {
	m := message{ID: "msg_" + s.a.ID, Type: "message", Role: "assistant", Model: s.a.Model, Content: []json.RawMessage{}}
	if err := s.event("message_start", map[string]any{"type": "message_start", "message": m}, false); err != nil {
		return err
	}
	return s.event("ping", map[string]string{"type": "ping"}, true)
}

func (s *messagesStream) Text(delta string) error {
	if !s.open {
		if err := s.event("content_block_start", map[string]any{"type": "content_block_start", "index": s.index,
			"content_block": map[string]string{"type": "text", "text": ""}}, false); err != nil {
			return err
		}
		s.index, s.open = s.index+1, true
	}
	s.text.WriteString(delta)
	return s.event("content_block_delta", map[string]any{"type": "content_block_delta", "index": s.index - 1,
		"delta": map[string]string{"type": "text_delta", "text": delta}}, true)
}

func (s *messagesStream) close() error {
	if !s.open {
		return nil
	}
	s.open = false
	return s.event("content_block_stop", map[string]any{"type": "content_block_stop", "index": s.index - 1}, false)
}

func (s *messagesStream) End(a Answer) error {
	if a.Text != "" {
		if err := s.Text(a.Text); err != nil {
			return err
		}
	}
	if err := s.close(); err != nil {
		return err
	}
	for _, c := range a.Calls {
		start := map[string]any{"type": "content_block_start", "index": s.index,
			"content_block": map[string]any{"type": "tool_use", "id": c.ID, "name": c.Name, "input": struct{}{}}}
		delta := map[string]any{"type": "content_block_delta", "index": s.index,
			"delta": map[string]string{"type": "input_json_delta", "partial_json": c.Args}}
		stop := map[string]any{"type": "content_block_stop", "index": s.index}
		for _, ev := range []struct {
			name string
			v    any
		}{{"content_block_start", start}, {"content_block_delta", delta}, {"content_block_stop", stop}} {
			if err := s.event(ev.name, ev.v, false); err != nil {
				return err
			}
		}
		s.index++
	}
	reason := stopReasons[a.Stop]
	delta := map[string]any{"stop_reason": reason, "stop_sequence": nil}
	full := a
	full.Text = s.text.String() // End sent the rest of the text through Text
	if d := detailsOf(full); d != nil {
		delta["stop_details"] = d
	}
	if err := s.event("message_delta", map[string]any{"type": "message_delta", "delta": delta,
		"usage": messageUsage{a.Usage.Input, a.Usage.Output}}, false); err != nil {
		return err
	}
	return s.event("message_stop", map[string]string{"type": "message_stop"}, true)
}

func (s *messagesStream) Fail(e *Error) error {
	return s.event("error", errorBody(Messages, e), true)
}

package gateway

import (
	"cmp"
	"encoding/json"
	"io"
	"maps"
	"strings"
)

// DefaultMaxTokens is the max_tokens an Anthropic upstream is sent for a
// client that set none: its API requires one.
const DefaultMaxTokens = 4096

// encodeMessages writes the request for an Anthropic upstream. A Messages
// client's request is its own body, with the model, the messages, and
// whatever For changed written anew, and superego's own field left out;
// any other client's is translated.
func (r *Request) encodeMessages() ([]byte, error) {
	out := map[string]json.RawMessage{}
	own := r.Wire == Messages
	if own {
		out = maps.Clone(r.fields)
		delete(out, "constitutions")
	}
	set := func(name string, v any) {
		out[name], _ = json.Marshal(v)
	}
	set("model", r.Model)
	system, msgs := r.anthropicMessages()
	out["messages"] = list(msgs)
	if own {
		if r.changed.system {
			set("system", system)
		}
		if r.changed.tools {
			set("tools", r.anthropicTools())
		}
		if r.changed.choice {
			set("tool_choice", r.anthropicChoice())
		}
		return json.Marshal(out)
	}
	if len(system) > 0 {
		set("system", system)
	}
	p := r.Params
	set("max_tokens", cmp.Or(deref(p.MaxTokens), DefaultMaxTokens))
	if len(r.Tools) > 0 {
		set("tools", r.anthropicTools())
	}
	if r.Choice != nil || r.Parallel != nil && !*r.Parallel {
		set("tool_choice", r.anthropicChoice())
	}
	if p.Temperature != nil {
		set("temperature", *p.Temperature)
	}
	if p.TopP != nil {
		set("top_p", *p.TopP)
	}
	if len(p.Stop) > 0 {
		set("stop_sequences", p.Stop)
	}
	if f := p.Format; f != nil {
		schema := f.Schema
		if schema == nil {
			schema = json.RawMessage(`{"type":"object"}`)
		}
		set("output_config", map[string]any{"format": map[string]any{"type": "json_schema", "schema": schema}})
	}
	if r.Stream {
		set("stream", true)
	}
	return json.Marshal(out)
}

func deref[T any](p *T) T {
	var zero T
	if p == nil {
		return zero
	}
	return *p
}

// anthropicChoice is the request's tool choice as Anthropic's.
func (r *Request) anthropicChoice() any {
	c := map[string]any{"type": "auto"}
	if r.Choice != nil {
		switch r.Choice.Mode {
		case "required":
			c["type"] = "any"
		case "tool":
			c["type"], c["name"] = "tool", r.Choice.Name
		default:
			c["type"] = r.Choice.Mode
		}
	}
	if r.Parallel != nil && !*r.Parallel && c["type"] != "none" {
		c["disable_parallel_tool_use"] = true
	}
	return c
}

// anthropicTools are the request's tools as Anthropic's: a Messages
// client's as it sent them.
func (r *Request) anthropicTools() []json.RawMessage {
	out := make([]json.RawMessage, len(r.Tools))
	for i, t := range r.Tools {
		raw := ownRaw(t.raw, r.Wire == Messages)
		schema := t.Parameters
		if schema == nil {
			schema = json.RawMessage(`{"type":"object","properties":{}}`)
		}
		out[i] = rawOr(raw, struct {
			Name        string          `json:"name"`
			Description string          `json:"description,omitempty"`
			InputSchema json.RawMessage `json:"input_schema"`
		}{t.Name, t.Description, schema})
	}
	return out
}

// anthropicMessages are the request's instructions as system blocks and
// its conversation as Anthropic's messages. A Messages client's items go
// as it sent them where they are unchanged, its system messages among
// them; a translated conversation has its system messages moved to the
// system blocks, its tool results in the user's messages, and messages of
// one role after another joined, results first.
func (r *Request) anthropicMessages() (system []json.RawMessage, msgs []json.RawMessage) {
	own := r.Wire == Messages
	for _, p := range r.System {
		system = append(system, rawOr(ownRaw(p.raw, own), map[string]string{"type": "text", "text": p.Text}))
	}
	var out []anthropicMessage
	for _, it := range r.Items {
		if own && it.raw != nil {
			msgs = append(msgs, it.raw)
			continue
		}
		role := it.Role
		switch {
		case role == RoleSystem && !own:
			system = append(system, textBlock(it.Text()))
			continue
		case role == RoleTool:
			role = RoleUser
		}
		m := anthropicMessage{role: role}
		for _, p := range it.Parts {
			if b := anthropicBlock(p, own); b != nil && p.Result != nil {
				m.results = append(m.results, b)
			} else if b != nil {
				m.content = append(m.content, b)
			}
		}
		if own && it.base != nil { // in its place among the client's messages, its other fields kept
			msgs = append(msgs, onto(it.base, map[string]any{"content": append(m.results, m.content...)}))
			continue
		}
		if own {
			msgs = append(msgs, m.encode())
			continue
		}
		if n := len(out); n > 0 && out[n-1].role == role {
			out[n-1].results = append(out[n-1].results, m.results...)
			out[n-1].content = append(out[n-1].content, m.content...)
			continue
		}
		out = append(out, m)
	}
	for _, m := range out {
		msgs = append(msgs, m.encode())
	}
	return system, msgs
}

// anthropicMessage is a message of Anthropic's being made: a user's has
// its results first, as Anthropic's API requires.
type anthropicMessage struct {
	role             string
	results, content []json.RawMessage
}

func (m anthropicMessage) encode() json.RawMessage {
	b, _ := json.Marshal(struct {
		Role    string            `json:"role"`
		Content []json.RawMessage `json:"content"`
	}{m.role, append(m.results, m.content...)})
	return b
}

func ownRaw(raw json.RawMessage, own bool) json.RawMessage {
	if own {
		return raw
	}
	return nil
}

// anthropicBlock is a part as Anthropic's content block: nil for a part
// that does not translate (a thinking block of another protocol).
func anthropicBlock(p Part, own bool) json.RawMessage {
	if raw := ownRaw(p.raw, own); raw != nil || p.Kind == PartThinking {
		return raw // thinking is Anthropic's, from the client or the upstream, or none
	}
	switch p.Kind {
	case PartText:
		return textBlock(p.Text)
	case PartImage:
		src := map[string]string{"type": "url", "url": p.Image.URL}
		if p.Image.URL == "" {
			src = map[string]string{"type": "base64", "media_type": p.Image.MediaType, "data": p.Image.Data}
		}
		return rawOr(nil, map[string]any{"type": "image", "source": src})
	case PartCall:
		input := json.RawMessage(p.Call.Args)
		if !json.Valid(input) || kind(input) != "an object" {
			input = json.RawMessage(`{}`)
		}
		return rawOr(nil, map[string]any{"type": "tool_use", "id": p.Call.ID, "name": p.Call.Name, "input": input})
	case PartResult:
		block := map[string]any{"type": "tool_result", "tool_use_id": p.Result.CallID, "content": p.Result.Output}
		if p.Result.Error {
			block["is_error"] = true
		}
		return rawOr(nil, block)
	}
	return nil
}

// messagesStops maps Anthropic's stop_reason to a stop reason.
var messagesStops = map[string]string{
	"end_turn":                      StopEnd,
	"pause_turn":                    StopEnd,
	"tool_use":                      StopCalls,
	"max_tokens":                    StopLength,
	"model_context_window_exceeded": StopLength,
	"stop_sequence":                 StopSequence,
	"refusal":                       StopRefusal,
}

type messagesUsage struct {
	InputTokens              int `json:"input_tokens"`
	OutputTokens             int `json:"output_tokens"`
	CacheCreationInputTokens int `json:"cache_creation_input_tokens"`
	CacheReadInputTokens     int `json:"cache_read_input_tokens"`
}

func (u messagesUsage) input() int {
	return u.InputTokens + u.CacheCreationInputTokens + u.CacheReadInputTokens
}

// contentBlock is a block of an Anthropic reply.
type contentBlock struct {
	Type      string          `json:"type"`
	Text      string          `json:"text"`
	ID        string          `json:"id"`
	Name      string          `json:"name"`
	Input     json.RawMessage `json:"input"`
	Thinking  string          `json:"thinking"`
	Signature string          `json:"signature"`
}

// readMessagesReply reads a message object.
func readMessagesReply(body io.Reader, sink Sink) (Reply, error) {
	var obj struct {
		Content    []json.RawMessage `json:"content"`
		StopReason string            `json:"stop_reason"`
		Usage      messagesUsage     `json:"usage"`
	}
	if err := json.NewDecoder(io.LimitReader(body, maxEvent)).Decode(&obj); err != nil {
		return Reply{}, &UpstreamError{Status: 200, Body: "not a message: " + err.Error()}
	}
	reply := Reply{Stop: messagesStops[obj.StopReason], Usage: Usage{obj.Usage.input(), obj.Usage.OutputTokens}}
	var text strings.Builder
	for _, raw := range obj.Content {
		var b contentBlock
		json.Unmarshal(raw, &b)
		switch b.Type {
		case "text":
			text.WriteString(b.Text)
			sink.text(b.Text)
		case "tool_use":
			call := Call{ID: b.ID, Name: b.Name, Args: argsOf(b.Input)}
			sink.call(len(reply.Calls), call)
			reply.Calls = append(reply.Calls, call)
		case "thinking", "redacted_thinking":
			reply.Thinking = append(reply.Thinking, raw)
		}
	}
	reply.Text = text.String()
	return reply, nil
}

func argsOf(input json.RawMessage) string {
	if isNull(input) {
		return "{}"
	}
	return string(input)
}

// readMessagesStream reads Anthropic's stream of events, passing text and
// whole calls to sink as they come, until message_stop.
func readMessagesStream(body io.Reader, sink Sink) (Reply, error) {
	var reply Reply
	var text strings.Builder
	type open struct {
		block contentBlock
		args  strings.Builder
		raw   json.RawMessage
	}
	blocks := map[int]*open{}
	ended := false
	err := events(body, func(name string, data []byte) (bool, error) {
		var ev struct {
			Type    string `json:"type"`
			Index   int    `json:"index"`
			Message *struct {
				Usage messagesUsage `json:"usage"`
			} `json:"message"`
			ContentBlock json.RawMessage `json:"content_block"`
			Delta        struct {
				Type        string `json:"type"`
				Text        string `json:"text"`
				PartialJSON string `json:"partial_json"`
				Thinking    string `json:"thinking"`
				Signature   string `json:"signature"`
				StopReason  string `json:"stop_reason"`
			} `json:"delta"`
			Usage *messagesUsage  `json:"usage"`
			Error json.RawMessage `json:"error"`
		}
		if err := json.Unmarshal(data, &ev); err != nil {
			return false, &UpstreamError{Status: 200, Body: "not a message event: " + err.Error()}
		}
		switch ev.Type {
		case "message_start":
			if m := ev.Message; m != nil {
				reply.Usage = Usage{m.Usage.input(), m.Usage.OutputTokens}
			}
		case "content_block_start":
			o := &open{raw: ev.ContentBlock}
			json.Unmarshal(ev.ContentBlock, &o.block)
			blocks[ev.Index] = o
		case "content_block_delta":
			o := blocks[ev.Index]
			if o == nil {
				return false, &UpstreamError{Status: 200, Body: "a delta of a block that never started"}
			}
			switch ev.Delta.Type {
			case "text_delta":
				text.WriteString(ev.Delta.Text)
				sink.text(ev.Delta.Text)
			case "input_json_delta":
				o.args.WriteString(ev.Delta.PartialJSON)
			case "thinking_delta":
				o.block.Thinking += ev.Delta.Thinking
			case "signature_delta":
				o.block.Signature += ev.Delta.Signature
			}
		case "content_block_stop":
			o := blocks[ev.Index]
			if o == nil {
				return false, nil
			}
			delete(blocks, ev.Index)
			switch o.block.Type {
			case "tool_use":
				args := o.args.String()
				if strings.TrimSpace(args) == "" {
					args = argsOf(o.block.Input)
				}
				call := Call{ID: o.block.ID, Name: o.block.Name, Args: args}
				sink.call(len(reply.Calls), call)
				reply.Calls = append(reply.Calls, call)
			case "thinking":
				b, _ := json.Marshal(map[string]string{"type": "thinking", "thinking": o.block.Thinking, "signature": o.block.Signature})
				reply.Thinking = append(reply.Thinking, b)
			case "redacted_thinking":
				reply.Thinking = append(reply.Thinking, o.raw)
			}
		case "message_delta":
			if ev.Delta.StopReason != "" {
				reply.Stop = messagesStops[ev.Delta.StopReason]
			}
			if ev.Usage != nil {
				reply.Usage.Output = ev.Usage.OutputTokens
				if in := ev.Usage.input(); in > 0 {
					reply.Usage.Input = in
				}
			}
		case "message_stop":
			ended = true
			return true, nil
		case "error":
			return false, &UpstreamError{Status: 200, Body: string(ev.Error)}
		}
		return false, nil
	})
	if err != nil {
		return reply, err
	}
	if !ended {
		return reply, errNoEnd
	}
	reply.Text = text.String()
	return reply, nil
}

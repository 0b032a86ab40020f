package gateway

import (
	"cmp"
	"encoding/json"
	"io"
	"maps"
	"strings"
)

// encodeChat writes the request for a Chat Completions upstream. A chat
// client's request is its own body, with the model, the messages, and
// whatever For changed written anew, and superego's own field left out; any
// other client's is translated.
func (r *Request) encodeChat() ([]byte, error) {
	out := map[string]json.RawMessage{}
	if r.Wire == Chat {
		out = maps.Clone(r.fields)
		delete(out, "constitutions")
	}
	set := func(name string, v any) {
		out[name], _ = json.Marshal(v)
	}
	set("model", r.Model)
	out["messages"] = list(r.chatMessages())
	if r.Wire == Chat {
		if r.changed.tools {
			set("tools", r.chatTools())
		}
		if r.changed.choice {
			set("tool_choice", r.Choice.chat())
		}
		return json.Marshal(out)
	}
	if len(r.Tools) > 0 {
		set("tools", r.chatTools())
	}
	if r.Choice != nil {
		set("tool_choice", r.Choice.chat())
	}
	if r.Parallel != nil {
		set("parallel_tool_calls", *r.Parallel)
	}
	p := r.Params
	if p.Temperature != nil {
		set("temperature", *p.Temperature)
	}
	if p.TopP != nil {
		set("top_p", *p.TopP)
	}
	if p.MaxTokens != nil {
		set("max_tokens", *p.MaxTokens)
	}
	if len(p.Stop) > 0 {
		set("stop", p.Stop)
	}
	if p.Seed != nil {
		set("seed", *p.Seed)
	}
	if f := p.Format; f != nil {
		set("response_format", f.chat())
	}
	if r.Stream {
		set("stream", true)
		set("stream_options", map[string]bool{"include_usage": true})
	}
	return json.Marshal(out)
}

// chat is the response_format of a Format.
func (f *Format) chat() any {
	if f.Schema == nil {
		return map[string]string{"type": "json_object"}
	}
	name := f.Name
	if name == "" {
		name = "answer"
	}
	schema := map[string]any{"name": name, "schema": f.Schema}
	if f.Strict != nil {
		schema["strict"] = *f.Strict
	}
	return map[string]any{"type": "json_schema", "json_schema": schema}
}

// ChatJSON is the choice as a chat's tool_choice.
func (c *Choice) ChatJSON() json.RawMessage {
	b, _ := json.Marshal(c.chat())
	return b
}

// chat is a Choice as a chat's tool_choice.
func (c *Choice) chat() any {
	if c.Mode == "tool" {
		return map[string]any{"type": "function", "function": map[string]string{"name": c.Name}}
	}
	return c.Mode
}

type chatFunction struct {
	Name        string          `json:"name"`
	Description string          `json:"description,omitempty"`
	Parameters  json.RawMessage `json:"parameters,omitempty"`
}

// chatTools are the request's tools as a chat's tools: a chat client's as
// it sent them.
func (r *Request) chatTools() []json.RawMessage {
	out := make([]json.RawMessage, len(r.Tools))
	for i, t := range r.Tools {
		out[i] = rawOr(ownRaw(t.raw, r.Wire == Chat), struct {
			Type     string       `json:"type"`
			Function chatFunction `json:"function"`
		}{"function", chatFunction{t.Name, t.Description, t.Parameters}})
	}
	return out
}

type chatCallOut struct {
	ID       string `json:"id"`
	Type     string `json:"type"`
	Function struct {
		Name      string `json:"name"`
		Arguments string `json:"arguments"`
	} `json:"function"`
}

func chatCall(c Call) chatCallOut {
	out := chatCallOut{ID: c.ID, Type: "function"}
	out.Function.Name, out.Function.Arguments = c.Name, c.Args
	return out
}

// chatMessages are the request's instructions and conversation as a chat's
// messages: each of the client's as it sent it, where it is a chat's and
// unchanged.
func (r *Request) chatMessages() []json.RawMessage {
	var out []json.RawMessage
	add := func(v any) {
		b, _ := json.Marshal(v)
		out = append(out, b)
	}
	for _, p := range r.System {
		if p.Kind == PartText {
			add(map[string]string{"role": "system", "content": p.Text})
		}
	}
	own := r.Wire == Chat
	for _, it := range r.Items {
		if own && it.raw != nil {
			out = append(out, it.raw)
			continue
		}
		switch it.Role {
		case RoleSystem:
			add(map[string]string{"role": "system", "content": it.Text()})
		case RoleAssistant:
			msg := struct {
				Role      string            `json:"role"`
				Content   *string           `json:"content"`
				ToolCalls []json.RawMessage `json:"tool_calls,omitempty"`
			}{Role: "assistant"}
			if text := it.Text(); text != "" {
				msg.Content = &text
			}
			for _, p := range it.Parts {
				if p.Call != nil {
					msg.ToolCalls = append(msg.ToolCalls, rawOr(ownRaw(p.raw, own), chatCall(*p.Call)))
				}
			}
			if own && it.base != nil {
				out = append(out, onto(it.base, map[string]any{"content": msg.Content, "tool_calls": msg.ToolCalls}))
				continue
			}
			add(msg)
		default: // user, tool: results first, each its own message, then the rest
			var rest []Part
			for _, p := range it.Parts {
				if p.Result != nil && own && it.base != nil && it.Role == RoleTool && len(it.Parts) == 1 {
					out = append(out, onto(it.base, map[string]any{"tool_call_id": p.Result.CallID, "content": p.Result.Output}))
				} else if p.Result != nil {
					add(map[string]string{"role": "tool", "tool_call_id": p.Result.CallID, "content": p.Result.Output})
				} else if p.Kind == PartText || p.Kind == PartImage {
					rest = append(rest, p)
				}
			}
			if len(rest) > 0 {
				add(map[string]any{"role": "user", "content": chatParts(rest, own)})
			}
		}
	}
	return out
}

// chatParts is a user message's content: its text alone, or its parts.
func chatParts(parts []Part, own bool) any {
	if len(parts) == 1 && parts[0].Kind == PartText && (!own || parts[0].raw == nil) {
		return parts[0].Text
	}
	out := make([]json.RawMessage, len(parts))
	for i, p := range parts {
		raw := ownRaw(p.raw, own)
		if p.Kind == PartImage {
			out[i] = rawOr(raw, map[string]any{"type": "image_url", "image_url": map[string]string{"url": p.Image.url()}})
		} else {
			out[i] = rawOr(raw, map[string]string{"type": "text", "text": p.Text})
		}
	}
	return out
}

// chatStops maps a chat's finish_reason to a stop reason.
var chatStops = map[string]string{
	"stop":           StopEnd,
	"tool_calls":     StopCalls,
	"function_call":  StopCalls,
	"length":         StopLength,
	"content_filter": StopRefusal,
}

type chatUsageIn struct {
	PromptTokens     int `json:"prompt_tokens"`
	CompletionTokens int `json:"completion_tokens"`
}

// readChatReply reads a chat completion object.
func readChatReply(body io.Reader, sink Sink) (Reply, error) {
	var obj struct {
		Choices []struct {
			Message struct {
				Content   *string       `json:"content"`
				Refusal   *string       `json:"refusal"`
				ToolCalls []chatCallOut `json:"tool_calls"`
			} `json:"message"`
			FinishReason string `json:"finish_reason"`
		} `json:"choices"`
		Usage *chatUsageIn `json:"usage"`
	}
	if err := json.NewDecoder(io.LimitReader(body, maxEvent)).Decode(&obj); err != nil {
		return Reply{}, &UpstreamError{Status: 200, Body: "not a chat completion: " + err.Error()}
	}
	if len(obj.Choices) == 0 {
		return Reply{}, &UpstreamError{Status: 200, Body: "a chat completion with no choices"}
	}
	c := obj.Choices[0]
	reply := Reply{Stop: chatStops[c.FinishReason]}
	if c.Message.Content != nil {
		reply.Text = *c.Message.Content
	}
	if c.Message.Refusal != nil && *c.Message.Refusal != "" {
		reply.Text, reply.Stop = *c.Message.Refusal, StopRefusal
	}
	sink.text(reply.Text)
	for i, tc := range c.Message.ToolCalls {
		call := Call{ID: tc.ID, Name: tc.Function.Name, Args: tc.Function.Arguments}
		reply.Calls = append(reply.Calls, call)
		sink.call(i, call)
	}
	if obj.Usage != nil {
		reply.Usage = Usage{obj.Usage.PromptTokens, obj.Usage.CompletionTokens}
	}
	return reply, nil
}

// readChatStream reads a chat completion's chunks, passing text and whole
// calls to sink as they come, until data: [DONE].
func readChatStream(body io.Reader, sink Sink) (Reply, error) {
	var reply Reply
	var text strings.Builder
	proposed := 0 // calls sunk so far
	flush := func(upTo int) {
		for ; proposed < upTo; proposed++ {
			sink.call(proposed, reply.Calls[proposed])
		}
	}
	ended := false
	err := events(body, func(_ string, data []byte) (bool, error) {
		if string(data) == "[DONE]" {
			ended = true
			return true, nil
		}
		var chunk struct {
			Choices []struct {
				Delta struct {
					Content   *string `json:"content"`
					Refusal   *string `json:"refusal"`
					ToolCalls []struct {
						Index    int    `json:"index"`
						ID       string `json:"id"`
						Function struct {
							Name      string `json:"name"`
							Arguments string `json:"arguments"`
						} `json:"function"`
					} `json:"tool_calls"`
				} `json:"delta"`
				FinishReason *string `json:"finish_reason"`
			} `json:"choices"`
			Usage *chatUsageIn    `json:"usage"`
			Error json.RawMessage `json:"error"`
		}
		if err := json.Unmarshal(data, &chunk); err != nil {
			return false, &UpstreamError{Status: 200, Body: "not a chat completion chunk: " + err.Error()}
		}
		if chunk.Error != nil {
			return false, &UpstreamError{Status: 200, Body: string(chunk.Error)}
		}
		if chunk.Usage != nil {
			reply.Usage = Usage{chunk.Usage.PromptTokens, chunk.Usage.CompletionTokens}
		}
		for _, c := range chunk.Choices {
			d := c.Delta
			if d.Content != nil {
				text.WriteString(*d.Content)
				sink.text(*d.Content)
			}
			if d.Refusal != nil && *d.Refusal != "" {
				text.WriteString(*d.Refusal)
				sink.text(*d.Refusal)
				reply.Stop = StopRefusal
			}
			for _, tc := range d.ToolCalls {
				for tc.Index >= len(reply.Calls) {
					reply.Calls = append(reply.Calls, Call{})
				}
				call := &reply.Calls[tc.Index]
				call.ID, call.Name = cmp.Or(call.ID, tc.ID), call.Name+tc.Function.Name
				call.Args += tc.Function.Arguments
				flush(tc.Index) // a call started: those before it are whole
			}
			if n := len(reply.Calls); n > proposed && whole(reply.Calls[n-1].Args) && n-1 == proposed {
				// The last call's arguments may be whole before the
				// next call starts: judged now, checked at the end.
				flush(n)
			}
			if c.FinishReason != nil && reply.Stop != StopRefusal {
				reply.Stop = chatStops[*c.FinishReason]
			}
		}
		return false, nil
	})
	if err != nil {
		return reply, err
	}
	if !ended && reply.Stop == "" {
		return reply, errNoEnd
	}
	reply.Text = text.String()
	flush(len(reply.Calls))
	return reply, nil
}

// onto is the JSON object base with fields set to new values.
func onto(base json.RawMessage, fields map[string]any) json.RawMessage {
	var m map[string]json.RawMessage
	if json.Unmarshal(base, &m) != nil {
		m = map[string]json.RawMessage{}
	}
	for k, v := range fields {
		m[k], _ = json.Marshal(v)
	}
	b, _ := json.Marshal(m)
	return b
}

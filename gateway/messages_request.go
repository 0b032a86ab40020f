package gateway

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
)

// This file is Anthropic's Messages API, as its API reference describes
// it and Claude Code and Anthropic's SDKs send it: the request a client
// sends.

// messagesParams are the parameters read; refused ones would have the
// upstream act (search, run code, call MCP servers) where no judge sees
// it. Any other parameter is a hint: forwarded to an Anthropic upstream,
// dropped on the way to another (Anthropic adds parameters often, and
// Claude Code sends them as soon as they exist).
var messagesParams = map[string]param{
	"model":          {read: readModel},
	"messages":       {read: readMessagesMessages},
	"system":         {read: readSystem},
	"max_tokens":     {read: readMaxTokens("max_tokens")},
	"stream":         {read: readStream},
	"tools":          {read: readMessagesTools},
	"tool_choice":    {read: readMessagesChoice},
	"stop_sequences": {read: readStopSequences},
	"temperature":    {read: readFloat("temperature", func(p *Params) **float64 { return &p.Temperature })},
	"top_p":          {read: readFloat("top_p", func(p *Params) **float64 { return &p.TopP })},
	"output_config":  {read: readOutputConfig},
	"output_format":  {read: readOutputFormat},
	"constitutions":  {read: readConstitutions},

	"mcp_servers": {refused: "the upstream would call MCP servers where no judge sees the calls; give the flow the servers instead"},
	"container":   {refused: "the upstream would run code where no judge sees it"},
}

// ReadCountTokens reads a count_tokens request's body: a Messages request
// with no max_tokens, its keys checked as Read checks them.
func ReadCountTokens(body []byte) (*Request, error) {
	if err := sameCase(body); err != nil {
		return nil, err
	}
	return readMessages(body)
}

// readMessages reads a Messages request's body, checking it as
// Anthropic's API does; Read checks that it has max_tokens.
func readMessages(body []byte) (*Request, error) {
	fields, err := object(body)
	if err != nil {
		return nil, err
	}
	r := &Request{Wire: Messages, fields: fields}
	if err := r.readParams(fields, messagesParams, nil); err != nil {
		return nil, err
	}
	for _, name := range []string{"model", "messages"} {
		if _, ok := fields[name]; !ok {
			return nil, invalid(name, "missing_required_parameter", "%s: Field required", name)
		}
	}
	return r, nil
}

// readSystem reads system: a string, or text blocks.
func readSystem(r *Request, raw json.RawMessage) error {
	if isNull(raw) {
		return nil
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		if s != "" {
			r.System = []Part{{Kind: PartText, Text: s}}
		}
		return nil
	}
	parts, err := textBlocks("system", raw)
	r.System = parts
	return err
}

// textBlocks reads an array of text blocks.
func textBlocks(at string, raw json.RawMessage) ([]Part, error) {
	var list []json.RawMessage
	if json.Unmarshal(raw, &list) != nil {
		return nil, wrongType(at, "a string or an array of text blocks", raw)
	}
	parts := make([]Part, len(list))
	for i, b := range list {
		var block struct {
			Type string  `json:"type"`
			Text *string `json:"text"`
		}
		if json.Unmarshal(b, &block) != nil || block.Type != "text" || block.Text == nil {
			return nil, invalid(fmt.Sprintf("%s.%d", at, i), "invalid_value", "%s.%d: a text block is expected here", at, i)
		}
		parts[i] = Part{Kind: PartText, Text: *block.Text, raw: b}
	}
	return parts, nil
}

func readStopSequences(r *Request, raw json.RawMessage) error {
	if json.Unmarshal(raw, &r.Params.Stop) != nil {
		return wrongType("stop_sequences", "an array of strings", raw)
	}
	return nil
}

// readOutputConfig reads output_config: its format is structured output;
// the rest (effort) is a hint.
func readOutputConfig(r *Request, raw json.RawMessage) error {
	var cfg map[string]json.RawMessage
	if json.Unmarshal(raw, &cfg) != nil {
		return wrongType("output_config", "an object", raw)
	}
	if f, ok := cfg["format"]; ok && !isNull(f) {
		if err := readFormatBlock("output_config.format", r, f); err != nil {
			return err
		}
	}
	if len(cfg) > 1 || len(cfg) == 1 && r.Params.Format == nil {
		r.Params.Hints = append(r.Params.Hints, "output_config")
	}
	return nil
}

// readOutputFormat reads the older, beta, form of structured output.
func readOutputFormat(r *Request, raw json.RawMessage) error {
	if isNull(raw) {
		return nil
	}
	return readFormatBlock("output_format", r, raw)
}

func readFormatBlock(at string, r *Request, raw json.RawMessage) error {
	var f struct {
		Type   string          `json:"type"`
		Schema json.RawMessage `json:"schema"`
	}
	if json.Unmarshal(raw, &f) != nil || f.Type != "json_schema" || kind(f.Schema) != "an object" {
		return invalid(at, "invalid_value", `%s: expected {"type": "json_schema", "schema": {…}}`, at)
	}
	r.Params.Format = &Format{Schema: f.Schema}
	return nil
}

// clientToolTypes are Anthropic's tools that the client runs, with schemas
// of Anthropic's: judged as any client's tool is.
var clientToolTypes = []string{"bash_", "text_editor_", "computer_", "memory_"}

// readMessagesTools reads the client's tools: custom tools with an input
// schema, and Anthropic's tools the client runs. Tools the upstream would
// run itself (web search, code execution) are refused: no judge would see
// their calls.
func readMessagesTools(r *Request, raw json.RawMessage) error {
	var list []json.RawMessage
	if json.Unmarshal(raw, &list) != nil {
		return wrongType("tools", "an array of tools", raw)
	}
	for i, t := range list {
		at := fmt.Sprintf("tools.%d", i)
		var tool struct {
			Type        string          `json:"type"`
			Name        string          `json:"name"`
			Description string          `json:"description"`
			InputSchema json.RawMessage `json:"input_schema"`
		}
		if json.Unmarshal(t, &tool) != nil {
			return wrongType(at, "a tool object", t)
		}
		switch {
		case tool.Type == "" || tool.Type == "custom":
			if tool.InputSchema == nil {
				return invalid(at+".input_schema", "missing_required_parameter", "%s.input_schema: Field required", at)
			}
		case slices.ContainsFunc(clientToolTypes, func(p string) bool { return strings.HasPrefix(tool.Type, p) }):
		default:
			return invalid(at+".type", "unsupported_value", "%s.type: %q is a tool the upstream runs itself, where no judge sees its calls; give the flow such a tool instead", at, tool.Type)
		}
		if err := r.addTool(at, Tool{Name: tool.Name, Description: tool.Description, Parameters: tool.InputSchema, raw: t}); err != nil {
			return err
		}
	}
	return nil
}

// readMessagesChoice reads tool_choice: auto, any, tool (with its name) or
// none, and whether calls may be parallel.
func readMessagesChoice(r *Request, raw json.RawMessage) error {
	if isNull(raw) {
		return nil
	}
	var c struct {
		Type                   string `json:"type"`
		Name                   string `json:"name"`
		DisableParallelToolUse *bool  `json:"disable_parallel_tool_use"`
	}
	if json.Unmarshal(raw, &c) != nil {
		return wrongType("tool_choice", "an object", raw)
	}
	switch c.Type {
	case "auto", "none":
		r.Choice = &Choice{Mode: c.Type}
	case "any":
		r.Choice = &Choice{Mode: "required"}
	case "tool":
		if c.Name == "" {
			return invalid("tool_choice.name", "missing_required_parameter", "tool_choice.name: Field required")
		}
		r.Choice = &Choice{Mode: "tool", Name: c.Name}
	default:
		return invalid("tool_choice.type", "invalid_value", "tool_choice.type: %q is none of auto, any, tool, none", c.Type)
	}
	if c.DisableParallelToolUse != nil {
		parallel := !*c.DisableParallelToolUse
		r.Parallel = &parallel
	}
	return nil
}

// readMessagesMessages reads the conversation: user and assistant messages
// of content blocks, and the system messages Claude Code puts between them.
func readMessagesMessages(r *Request, raw json.RawMessage) error {
	var msgs []json.RawMessage
	if json.Unmarshal(raw, &msgs) != nil {
		return wrongType("messages", "an array of messages", raw)
	}
	if len(msgs) == 0 {
		return invalid("messages", "invalid_value", "messages: at least one message is required")
	}
	if len(msgs) > MaxMessages {
		return invalid("messages", "invalid_value", "messages: at most %d messages are taken, and there are %d", MaxMessages, len(msgs))
	}
	for i, m := range msgs {
		at := fmt.Sprintf("messages.%d", i)
		var msg struct {
			Role    string          `json:"role"`
			Content json.RawMessage `json:"content"`
		}
		if json.Unmarshal(m, &msg) != nil {
			return wrongType(at, "a message object", m)
		}
		if msg.Role != "user" && msg.Role != "assistant" && msg.Role != "system" {
			return invalid(at+".role", "invalid_value", "%s.role: %q is none of user, assistant, system", at, msg.Role)
		}
		parts, err := messagesContent(at+".content", msg.Role, msg.Content)
		if err != nil {
			return err
		}
		if len(parts) == 0 {
			return invalid(at+".content", "invalid_value", "%s.content: a message must not be empty", at)
		}
		r.Items = append(r.Items, Item{Role: msg.Role, Parts: parts, raw: m, base: m})
	}
	return checkConversation(r, "messages")
}

// messagesContent reads a message's content: a string, or blocks.
func messagesContent(at, role string, raw json.RawMessage) ([]Part, error) {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return []Part{{Kind: PartText, Text: s}}, nil
	}
	var list []json.RawMessage
	if json.Unmarshal(raw, &list) != nil {
		return nil, wrongType(at, "a string or an array of content blocks", raw)
	}
	parts := make([]Part, 0, len(list))
	for j, b := range list {
		bat := fmt.Sprintf("%s.%d", at, j)
		var block struct {
			Type      string          `json:"type"`
			Text      *string         `json:"text"`
			Source    json.RawMessage `json:"source"` // an image's; a search result's is a string
			ID        string          `json:"id"`
			Name      string          `json:"name"`
			Input     json.RawMessage `json:"input"`
			ToolUseID string          `json:"tool_use_id"`
			Content   json.RawMessage `json:"content"`
			IsError   bool            `json:"is_error"`
		}
		if json.Unmarshal(b, &block) != nil {
			return nil, wrongType(bat, "a content block", b)
		}
		p := Part{raw: b}
		var src imageSource
		switch {
		case block.Type == "text" && block.Text != nil:
			p.Kind, p.Text = PartText, *block.Text
		case block.Type == "image" && role == "user" && !isNull(block.Source) && json.Unmarshal(block.Source, &src) == nil:
			p.Kind, p.Image = PartImage, src.image()
		case block.Type == "tool_use" && role == "assistant" && block.ID != "":
			p.Kind, p.Call = PartCall, &Call{ID: block.ID, Name: block.Name, Args: argsOf(block.Input)}
		case block.Type == "tool_result" && role == "user" && block.ToolUseID != "":
			out, err := resultText(bat+".content", block.Content)
			if err != nil {
				return nil, err
			}
			p.Kind, p.Result = PartResult, &Result{CallID: block.ToolUseID, Output: out, Error: block.IsError}
		case (block.Type == "thinking" || block.Type == "redacted_thinking") && role == "assistant":
			p.Kind = PartThinking
		case block.Type == "text" || block.Type == "image" || block.Type == "tool_use" || block.Type == "tool_result":
			return nil, invalid(bat, "invalid_value", "%s: a %s block is not taken in a %s message, or misses a field", bat, block.Type, role)
		default:
			return nil, invalid(bat+".type", "invalid_value", "%s.type: %q blocks are not taken: a flow's judges read text, images and tool calls and results", bat, block.Type)
		}
		parts = append(parts, p)
	}
	return parts, nil
}

// resultText is a tool result's content as text: a string, or text
// blocks and tool references. Claude Code's ToolSearch answers with
// references to the tools it loads, each read as "tool_reference: NAME":
// the upstream gives its model the definition the request's tools hold.
// An image or a document in a result is refused: a result judge reads
// text, and what it cannot read must not reach the model unjudged.
func resultText(at string, raw json.RawMessage) (string, error) {
	if isNull(raw) {
		return "", nil
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s, nil
	}
	notText := invalid(at, "invalid_value", "%s: a tool result's content must be text: a result judge reads text, and nothing it cannot read may reach the model", at)
	var blocks []struct {
		Type     string  `json:"type"`
		Text     *string `json:"text"`
		ToolName string  `json:"tool_name"`
	}
	if json.Unmarshal(raw, &blocks) != nil {
		return "", notText
	}
	texts := make([]string, len(blocks))
	for i, b := range blocks {
		switch {
		case b.Type == "text" && b.Text != nil:
			texts[i] = *b.Text
		case b.Type == "tool_reference" && b.ToolName != "":
			texts[i] = "tool_reference: " + b.ToolName
		default:
			return "", notText
		}
	}
	return strings.Join(texts, "\n"), nil
}

// imageSource is an image block's source.
type imageSource struct {
	Type      string `json:"type"`
	MediaType string `json:"media_type"`
	Data      string `json:"data"`
	URL       string `json:"url"`
}

func (s *imageSource) image() *Image {
	return &Image{URL: s.URL, MediaType: s.MediaType, Data: s.Data}
}

package gateway

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
)

// This file is OpenAI's Chat Completions, as its API reference describes
// it: the request a client sends, the request an upstream is sent, and
// the upstream's answer, whole or streamed.

// MaxMessages bounds a conversation's messages (and Responses' items):
// each becomes a step of the instance, which every node's task carries.
const MaxMessages = 2048

// param is what becomes of one parameter of a request: read; a hint,
// forwarded to an upstream of the request's protocol and dropped on the
// way to another; or refused, unless its value asks for nothing.
type param struct {
	read     func(r *Request, raw json.RawMessage) error
	refused  string
	harmless []string // values a refused parameter may take besides null and empty ones
}

// hint is a parameter that does not constrain the answer.
var hint = param{}

// readParams reads each field of a request's body by its parameter; a
// field no parameter names is refused as unknown, or, where unknown is
// nil, taken as a hint.
func (r *Request) readParams(fields map[string]json.RawMessage, params map[string]param, unknown func(name string) *Error) error {
	for _, name := range slices.Sorted(maps.Keys(fields)) {
		raw := fields[name]
		p, ok := params[name]
		switch {
		case !ok && unknown != nil:
			return unknown(name)
		case p.read != nil:
			if err := p.read(r, raw); err != nil {
				return err
			}
			if generation[name] && !isNull(raw) {
				r.generation = append(r.generation, name)
			}
		case p.refused != "":
			if asks(raw, p.harmless) {
				return invalid(name, "unsupported_parameter", "Unsupported parameter: '%s': %s.", name, p.refused)
			}
		case !isNull(raw): // a hint
			r.Params.Hints = append(r.Params.Hints, name)
		}
	}
	return nil
}

// chatParams lists every parameter of the request as of OpenAI's API
// reference; any other is refused, as OpenAI refuses it.
var chatParams = map[string]param{
	"model":                 {read: readModel},
	"messages":              {read: readChatMessages},
	"stream":                {read: readStream},
	"stream_options":        {read: readStreamOptions},
	"n":                     {read: readN},
	"constitutions":         {read: readConstitutions},
	"tools":                 {read: readChatTools},
	"tool_choice":           {read: readChatChoice},
	"parallel_tool_calls":   {read: readParallel},
	"response_format":       {read: readResponseFormat},
	"stop":                  {read: readStop},
	"temperature":           {read: readFloat("temperature", func(p *Params) **float64 { return &p.Temperature })},
	"top_p":                 {read: readFloat("top_p", func(p *Params) **float64 { return &p.TopP })},
	"max_tokens":            {read: readMaxTokens("max_tokens")},
	"max_completion_tokens": {read: readMaxTokens("max_completion_tokens")},
	"seed":                  {read: readSeed},

	"frequency_penalty":      hint,
	"presence_penalty":       hint,
	"logit_bias":             hint,
	"reasoning_effort":       hint,
	"verbosity":              hint,
	"service_tier":           hint,
	"prediction":             hint,
	"user":                   hint,
	"safety_identifier":      hint,
	"prompt_cache_key":       hint,
	"prompt_cache_retention": hint,
	"prompt_cache_options":   hint,
	"metadata":               hint,
	"store":                  hint,

	"functions":          {refused: "the client's tools are given as 'tools'; 'functions' is their older form, which this server does not take"},
	"function_call":      {refused: "the client's tools are given as 'tools', and chosen with 'tool_choice'", harmless: []string{`"none"`, `"auto"`}},
	"web_search_options": {refused: "a flow searches with its own tools, if it has any"},
	"audio":              {refused: "a flow answers with text only"},
	"modalities":         {refused: "a flow answers with text only", harmless: []string{`["text"]`}},
	"logprobs":           {refused: "a flow's answer is judged by several models' calls, and carries no log probabilities"},
	"top_logprobs":       {refused: "a flow's answer is judged by several models' calls, and carries no log probabilities"},
	"moderation":         {refused: "the flow's superegos are its moderation, and their verdicts are not OpenAI's moderation results"},
}

// readChat reads a chat completions request's body, checking it as
// OpenAI's API does.
func readChat(body []byte) (*Request, error) {
	fields, err := object(body)
	if err != nil {
		return nil, err
	}
	r := &Request{Wire: Chat, fields: fields}
	unknown := func(name string) *Error {
		return invalid(name, "unknown_parameter", "Unrecognized request argument supplied: %s", name)
	}
	if err := r.readParams(fields, chatParams, unknown); err != nil {
		return nil, err
	}
	for _, name := range []string{"model", "messages"} {
		if _, ok := fields[name]; !ok {
			return nil, invalid(name, "missing_required_parameter", "Missing required parameter: '%s'.", name)
		}
	}
	if !isNull(fields["stream_options"]) && !r.Stream {
		return nil, invalid("stream_options", "invalid_value", "Invalid value: 'stream_options' is only allowed when 'stream' is true.")
	}
	return r, nil
}

// object reads a body that must be a JSON object into its fields.
func object(body []byte) (map[string]json.RawMessage, error) {
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(body, &fields); err != nil || fields == nil {
		msg := "the body is not a JSON object"
		if errors.As(err, new(*json.SyntaxError)) {
			msg = "the body is not valid JSON: " + err.Error()
		}
		return nil, invalid("", "invalid_json", "We could not parse the JSON body of your request: %s.", msg)
	}
	return fields, nil
}

// readers read each protocol's request.
var readers = map[string]func([]byte) (*Request, error){Chat: readChat, Responses: readResponses, Messages: readMessages}

// Read reads a client's request in the protocol: Chat, Responses or
// Messages. Keys that differ only in case are refused, anywhere in it:
// this package reads a key whatever its case, and an upstream reads it as
// written, so each could read another value, and a judge another text than
// the model.
func Read(wire string, body []byte) (*Request, error) {
	if err := sameCase(body); err != nil {
		return nil, err
	}
	r, err := readers[wire](body)
	if err == nil && wire == Messages && isNull(r.fields["max_tokens"]) {
		return nil, invalid("max_tokens", "missing_required_parameter", "max_tokens: Field required")
	}
	return r, err
}

// Reread reads a request Read has read before, as a run recorded it.
func Reread(wire string, body []byte) (*Request, error) { return readers[wire](body) }

// sameCase refuses a body with keys that differ only in case (Read).
func sameCase(body []byte) error {
	var whole any
	if json.Unmarshal(body, &whole) == nil {
		if at, a, b, ok := caseTwins("", whole); ok {
			return invalid(at, "invalid_value", "Invalid '%s': the keys %q and %q differ only in case.", at, a, b)
		}
	}
	return nil
}

// caseTwins finds, in a decoded JSON value, an object with two keys that
// differ only in case: where, and the two keys.
func caseTwins(at string, v any) (where, a, b string, ok bool) {
	switch v := v.(type) {
	case map[string]any:
		seen := make(map[string]string, len(v))
		for k, x := range v {
			if other, dup := seen[strings.ToLower(k)]; dup {
				return at, other, k, true
			}
			seen[strings.ToLower(k)] = k
			if where, a, b, ok := caseTwins(join(at, k), x); ok {
				return where, a, b, ok
			}
		}
	case []any:
		for i, x := range v {
			if where, a, b, ok := caseTwins(fmt.Sprintf("%s[%d]", at, i), x); ok {
				return where, a, b, ok
			}
		}
	}
	return "", "", "", false
}

func join(at, key string) string {
	if at == "" {
		return key
	}
	return at + "." + key
}

// asks reports whether a refused parameter's value asks for something: it
// is not null, false, 0, "", [], {} or one of harmless.
func asks(raw json.RawMessage, harmless []string) bool {
	if len(raw) == 0 {
		return false
	}
	var b bytes.Buffer
	if json.Compact(&b, raw) == nil && slices.Contains(harmless, b.String()) {
		return false
	}
	var v any
	if json.Unmarshal(raw, &v) != nil {
		return true
	}
	switch v := v.(type) {
	case nil:
		return false
	case bool:
		return v
	case float64:
		return v != 0
	case string:
		return v != ""
	case []any:
		return len(v) > 0
	case map[string]any:
		return len(v) > 0
	}
	return true
}

func readModel(r *Request, raw json.RawMessage) error {
	if json.Unmarshal(raw, &r.Model) != nil {
		return wrongType("model", "a string", raw)
	}
	if r.Model == "" {
		return invalid("model", "invalid_value", "Invalid value: 'model' must name a flow (GET /v1/models lists them).")
	}
	return nil
}

func readStream(r *Request, raw json.RawMessage) error {
	var stream *bool
	if json.Unmarshal(raw, &stream) != nil {
		return wrongType("stream", "a boolean", raw)
	}
	r.Stream = stream != nil && *stream
	return nil
}

// readStreamOptions reads include_usage; include_obfuscation is accepted:
// chunks carry no obfuscation field.
func readStreamOptions(r *Request, raw json.RawMessage) error {
	var opts *struct {
		IncludeUsage       *bool `json:"include_usage"`
		IncludeObfuscation *bool `json:"include_obfuscation"`
	}
	if json.Unmarshal(raw, &opts) != nil {
		return wrongType("stream_options", "an object with boolean include_usage", raw)
	}
	r.IncludeUsage = opts != nil && opts.IncludeUsage != nil && *opts.IncludeUsage
	return nil
}

func readN(r *Request, raw json.RawMessage) error {
	var n *float64
	if json.Unmarshal(raw, &n) != nil {
		return wrongType("n", "an integer", raw)
	}
	if n != nil && *n != 1 {
		return invalid("n", "unsupported_value", "Unsupported value: 'n' must be 1: a flow gives one answer per request.")
	}
	return nil
}

// readConstitutions keeps superego's constitutions for the server, which
// reads them (a stack of the user's constitutions); no model is sent them.
func readConstitutions(r *Request, raw json.RawMessage) error {
	r.Constitutions = raw
	return nil
}

func readParallel(r *Request, raw json.RawMessage) error {
	if json.Unmarshal(raw, &r.Parallel) != nil {
		return wrongType("parallel_tool_calls", "a boolean", raw)
	}
	return nil
}

func readFloat(name string, field func(*Params) **float64) func(r *Request, raw json.RawMessage) error {
	return func(r *Request, raw json.RawMessage) error {
		if json.Unmarshal(raw, field(&r.Params)) != nil {
			return wrongType(name, "a number", raw)
		}
		return nil
	}
}

func readMaxTokens(name string) func(r *Request, raw json.RawMessage) error {
	return func(r *Request, raw json.RawMessage) error {
		var n *int
		if json.Unmarshal(raw, &n) != nil || n != nil && *n < 1 {
			return wrongType(name, "a positive integer", raw)
		}
		if n != nil {
			r.Params.MaxTokens = n
		}
		return nil
	}
}

func readSeed(r *Request, raw json.RawMessage) error {
	if json.Unmarshal(raw, &r.Params.Seed) != nil {
		return wrongType("seed", "an integer", raw)
	}
	return nil
}

// readStop reads stop: a string, or up to four strings.
func readStop(r *Request, raw json.RawMessage) error {
	if isNull(raw) {
		return nil
	}
	var one string
	if json.Unmarshal(raw, &one) == nil {
		r.Params.Stop = []string{one}
		return nil
	}
	if json.Unmarshal(raw, &r.Params.Stop) != nil {
		return wrongType("stop", "a string or an array of strings", raw)
	}
	return nil
}

// readResponseFormat reads structured output: json_schema, json_object,
// or text, which asks for nothing.
func readResponseFormat(r *Request, raw json.RawMessage) error {
	if isNull(raw) {
		return nil
	}
	var f struct {
		Type       string `json:"type"`
		JSONSchema *struct {
			Name   string          `json:"name"`
			Schema json.RawMessage `json:"schema"`
			Strict *bool           `json:"strict"`
		} `json:"json_schema"`
	}
	if json.Unmarshal(raw, &f) != nil {
		return wrongType("response_format", "an object", raw)
	}
	switch {
	case f.Type == "text":
	case f.Type == "json_object":
		r.Params.Format = &Format{}
	case f.Type == "json_schema" && f.JSONSchema != nil:
		r.Params.Format = &Format{Name: f.JSONSchema.Name, Schema: f.JSONSchema.Schema, Strict: f.JSONSchema.Strict}
	case f.Type == "json_schema":
		return invalid("response_format.json_schema", "missing_required_parameter", "Missing required parameter: 'response_format.json_schema'.")
	default:
		return invalid("response_format.type", "invalid_value", "Invalid value: 'response_format.type' is %q; it must be text, json_object or json_schema.", f.Type)
	}
	return nil
}

// readChatTools reads the client's function tools.
func readChatTools(r *Request, raw json.RawMessage) error {
	var list []json.RawMessage
	if json.Unmarshal(raw, &list) != nil {
		return wrongType("tools", "an array of tools", raw)
	}
	for i, t := range list {
		at := fmt.Sprintf("tools[%d]", i)
		var tool struct {
			Type     string `json:"type"`
			Function *struct {
				Name        string          `json:"name"`
				Description string          `json:"description"`
				Parameters  json.RawMessage `json:"parameters"`
			} `json:"function"`
		}
		if json.Unmarshal(t, &tool) != nil {
			return wrongType(at, "a tool object", t)
		}
		switch {
		case tool.Type != "function":
			return invalid(at+".type", "unsupported_value", "Unsupported value: '%s.type' is %q: only function tools are taken.", at, tool.Type)
		case tool.Function == nil:
			return invalid(at+".function", "missing_required_parameter", "Missing required parameter: '%s.function'.", at)
		}
		if err := r.addTool(at+".function", Tool{Name: tool.Function.Name, Description: tool.Function.Description, Parameters: tool.Function.Parameters, raw: t}); err != nil {
			return err
		}
	}
	return nil
}

// addTool adds a function tool, checking its name and parameters.
func (r *Request) addTool(at string, t Tool) error {
	switch {
	case !validName(t.Name):
		return invalid(at+".name", "invalid_value", "Invalid '%s.name': a function's name is 1 to 64 letters, digits, '_' or '-'.", at)
	case len(t.Parameters) > 0 && kind(t.Parameters) != "an object" && kind(t.Parameters) != "null":
		return wrongType(at+".parameters", "a JSON Schema object", t.Parameters)
	case slices.ContainsFunc(r.Tools, func(o Tool) bool { return o.Name == t.Name }):
		return invalid(at+".name", "invalid_value", "Invalid '%s.name': %q is named twice.", at, t.Name)
	}
	if isNull(t.Parameters) {
		t.Parameters = nil
	}
	r.Tools = append(r.Tools, t)
	return nil
}

// validName reports whether a function's name is one every provider takes:
// 1 to 64 letters, digits, '_' or '-'.
func validName(name string) bool {
	if len(name) == 0 || len(name) > 64 {
		return false
	}
	for _, c := range name {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}

// readChatChoice reads tool_choice: "none", "auto", "required", or a named
// function; which the tools must have is checked once they are read.
func readChatChoice(r *Request, raw json.RawMessage) error {
	if isNull(raw) {
		return nil
	}
	var word string
	if json.Unmarshal(raw, &word) == nil {
		if word != "none" && word != "auto" && word != "required" {
			return invalid("tool_choice", "invalid_value", "Invalid value: 'tool_choice' is %q; it must be none, auto, required, or a function to call.", word)
		}
		r.Choice = &Choice{Mode: word}
		return nil
	}
	var named struct {
		Type     string `json:"type"`
		Function struct {
			Name string `json:"name"`
		} `json:"function"`
	}
	if json.Unmarshal(raw, &named) != nil || named.Type != "function" || named.Function.Name == "" {
		return wrongType("tool_choice", `"none", "auto", "required", or {"type": "function", "function": {"name": …}}`, raw)
	}
	r.Choice = &Choice{Mode: "tool", Name: named.Function.Name}
	return nil
}

// chatMessage is a message of a chat's conversation, with the fields read
// here; others (name) go to a chat upstream as they are.
type chatMessage struct {
	Role         *string         `json:"role"`
	Content      json.RawMessage `json:"content"`
	Refusal      *string         `json:"refusal"`
	ToolCalls    json.RawMessage `json:"tool_calls"`
	ToolCallID   *string         `json:"tool_call_id"`
	FunctionCall json.RawMessage `json:"function_call"`
	Audio        json.RawMessage `json:"audio"`
}

// readChatMessages reads the conversation: system and developer messages,
// user messages, assistant messages with their calls, and tool results.
func readChatMessages(r *Request, raw json.RawMessage) error {
	var msgs []json.RawMessage
	if json.Unmarshal(raw, &msgs) != nil {
		return wrongType("messages", "an array of messages", raw)
	}
	if len(msgs) == 0 {
		return invalid("messages", "empty_array", "Invalid 'messages': empty array. Expected an array with at least the user's message.")
	}
	if len(msgs) > MaxMessages {
		return invalid("messages", "array_above_max_length", "Invalid 'messages': array too long. Expected an array with maximum length %d, but got an array with length %d instead.", MaxMessages, len(msgs))
	}
	for i, m := range msgs {
		at := fmt.Sprintf("messages[%d]", i)
		var msg chatMessage
		if json.Unmarshal(m, &msg) != nil {
			return wrongType(at, "a message object", m)
		}
		if msg.Role == nil {
			return invalid(at+".role", "missing_required_parameter", "Missing required parameter: '%s.role'.", at)
		}
		it := Item{Role: *msg.Role, raw: m, base: m}
		parts, err := chatContent(at, *msg.Role, msg.Content)
		if err != nil {
			return err
		}
		switch *msg.Role {
		case "system", "developer":
			it.Role, it.Parts = RoleSystem, parts
		case "user":
			it.Parts = parts
			if strings.TrimSpace(Item{Parts: parts}.Text()) == "" && !slices.ContainsFunc(parts, func(p Part) bool { return p.Kind == PartImage }) {
				return invalid(at+".content", "invalid_value", "Invalid '%s.content': a user's message must not be empty.", at)
			}
		case "assistant":
			for field, v := range map[string]json.RawMessage{"function_call": msg.FunctionCall, "audio": msg.Audio} {
				if asks(v, nil) {
					return invalid(at+"."+field, "unsupported_parameter", "Unsupported parameter: '%s.%s': a flow's conversation is text and the client's tool calls.", at, field)
				}
			}
			if len(parts) == 0 && msg.Refusal != nil && *msg.Refusal != "" {
				parts = []Part{{Kind: PartText, Text: *msg.Refusal}} // a refusal the client was given, sent back
			}
			calls, err := chatCalls(at, msg.ToolCalls)
			if err != nil {
				return err
			}
			it.Parts = append(parts, calls...)
		case "tool":
			if msg.ToolCallID == nil || *msg.ToolCallID == "" {
				return invalid(at+".tool_call_id", "missing_required_parameter", "Missing required parameter: '%s.tool_call_id'.", at)
			}
			it.Parts = []Part{{Kind: PartResult, Result: &Result{CallID: *msg.ToolCallID, Output: Item{Parts: parts}.Text()}}}
		case "function":
			return invalid(at+".role", "unsupported_value", "Unsupported value: '%s.role' is \"function\": send a tool's result as a \"tool\" message.", at)
		default:
			return invalid(at+".role", "invalid_value", "Invalid value: '%s.role' is %q; it must be one of system, developer, user, assistant, tool.", at, *msg.Role)
		}
		r.Items = append(r.Items, it)
	}
	return checkConversation(r, "messages")
}

// checkConversation checks what every protocol's conversation must be for a
// flow: it has the user's message, and it ends with it or with tool
// results.
func checkConversation(r *Request, field string) error {
	if i, _ := r.Input(); i < 0 {
		return invalid(field, "invalid_value", "Invalid value: '%s' has no user message, and a flow's input is the user's message.", field)
	}
	items := r.Items
	for r.Wire == Messages && len(items) > 1 && items[len(items)-1].Role == RoleSystem {
		items = items[:len(items)-1] // Claude Code puts its instructions after the user's message
	}
	last := items[len(items)-1]
	if last.Role != RoleUser && last.Role != RoleTool {
		at := fmt.Sprintf("%s[%d].role", field, len(items)-1)
		return invalid(at, "invalid_value", "Invalid value: the last message must be the user's, the flow's input, or a tool's result, and '%s' is %q.", at, last.Role)
	}
	return nil
}

// chatContent reads a message's content: a string, or parts (text, images,
// and an assistant's refusals). Audio and files are refused: a flow's
// judges read text and images.
func chatContent(at, role string, raw json.RawMessage) ([]Part, error) {
	if isNull(raw) {
		return nil, nil
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return []Part{{Kind: PartText, Text: s}}, nil
	}
	var list []json.RawMessage
	if json.Unmarshal(raw, &list) != nil {
		return nil, wrongType(at+".content", "a string or an array of content parts", raw)
	}
	parts := make([]Part, 0, len(list))
	for j, p := range list {
		pat := fmt.Sprintf("%s.content[%d]", at, j)
		var part struct {
			Type     string  `json:"type"`
			Text     *string `json:"text"`
			Refusal  *string `json:"refusal"`
			ImageURL *struct {
				URL string `json:"url"`
			} `json:"image_url"`
		}
		if json.Unmarshal(p, &part) != nil {
			return nil, wrongType(pat, "a content part object", p)
		}
		switch {
		case part.Type == "text" && part.Text != nil:
			parts = append(parts, Part{Kind: PartText, Text: *part.Text, raw: p})
		case part.Type == "refusal" && part.Refusal != nil && role == "assistant":
			parts = append(parts, Part{Kind: PartText, Text: *part.Refusal, raw: p})
		case part.Type == "image_url" && part.ImageURL != nil && part.ImageURL.URL != "" && role == "user":
			parts = append(parts, Part{Kind: PartImage, Image: imageOfURL(part.ImageURL.URL), raw: p})
		case part.Type == "text" || part.Type == "refusal" || part.Type == "image_url" && role == "user":
			field := part.Type
			return nil, invalid(pat+"."+field, "missing_required_parameter", "Missing required parameter: '%s.%s'.", pat, field)
		default:
			return nil, invalid(pat+".type", "unsupported_value", "Unsupported value: '%s.type' is %q: a flow takes text, and images in a user's message.", pat, part.Type)
		}
	}
	return parts, nil
}

// imageOfURL is an image at url, which may be a data URL.
func imageOfURL(url string) *Image {
	if rest, ok := strings.CutPrefix(url, "data:"); ok {
		if meta, data, ok := strings.Cut(rest, ","); ok && strings.HasSuffix(meta, ";base64") {
			return &Image{MediaType: strings.TrimSuffix(meta, ";base64"), Data: data}
		}
	}
	return &Image{URL: url}
}

// url is the image as a URL: its own, or a data URL.
func (im *Image) url() string {
	if im.URL != "" {
		return im.URL
	}
	return "data:" + im.MediaType + ";base64," + im.Data
}

// chatCalls reads an assistant message's tool_calls.
func chatCalls(at string, raw json.RawMessage) ([]Part, error) {
	if isNull(raw) {
		return nil, nil
	}
	var list []json.RawMessage
	if json.Unmarshal(raw, &list) != nil {
		return nil, wrongType(at+".tool_calls", "an array of tool calls", raw)
	}
	parts := make([]Part, 0, len(list))
	for j, c := range list {
		cat := fmt.Sprintf("%s.tool_calls[%d]", at, j)
		var call struct {
			ID       string `json:"id"`
			Type     string `json:"type"`
			Function *struct {
				Name      string `json:"name"`
				Arguments string `json:"arguments"`
			} `json:"function"`
		}
		switch {
		case json.Unmarshal(c, &call) != nil:
			return nil, wrongType(cat, "a tool call object", c)
		case call.ID == "":
			return nil, invalid(cat+".id", "missing_required_parameter", "Missing required parameter: '%s.id'.", cat)
		case call.Function == nil:
			return nil, invalid(cat+".function", "missing_required_parameter", "Missing required parameter: '%s.function'.", cat)
		}
		parts = append(parts, Part{Kind: PartCall, Call: &Call{ID: call.ID, Name: call.Function.Name, Args: call.Function.Arguments}, raw: c})
	}
	return parts, nil
}

package gateway

import (
	"encoding/json"
	"fmt"
	"maps"
	"strings"
)

// This file is OpenAI's Responses API, as its API reference describes it
// and the Agents SDK, the Vercel AI SDK and Codex send it: the request a
// client sends. It is always translated for the upstream, which speaks
// Chat Completions or Messages.

var responsesParams = map[string]param{
	"model":                {read: readModel},
	"input":                {read: readInput},
	"instructions":         {read: readInstructions},
	"tools":                {read: readResponsesTools},
	"tool_choice":          {read: readResponsesChoice},
	"parallel_tool_calls":  {read: readParallel},
	"text":                 {read: readText},
	"temperature":          {read: readFloat("temperature", func(p *Params) **float64 { return &p.Temperature })},
	"top_p":                {read: readFloat("top_p", func(p *Params) **float64 { return &p.TopP })},
	"max_output_tokens":    {read: readMaxTokens("max_output_tokens")},
	"stream":               {read: readStream},
	"store":                {read: readStore},
	"previous_response_id": {read: readPrevious},
	"constitutions":        {read: readConstitutions},

	"include":                hint,
	"reasoning":              hint,
	"metadata":               hint,
	"user":                   hint,
	"safety_identifier":      hint,
	"prompt_cache_key":       hint,
	"prompt_cache_retention": hint,
	"service_tier":           hint,
	"truncation":             hint,
	"stream_options":         hint,
	"client_metadata":        hint, // Codex's ids of its installation, session and turn

	"background":     {refused: "a response is answered at once: a flow's run is not polled for"},
	"conversation":   {refused: "conversations are OpenAI's to keep: send the conversation's items, or a previous_response_id of this server"},
	"prompt":         {refused: "prompt templates are OpenAI's to keep: send the instructions"},
	"max_tool_calls": {refused: "a flow's agent is bounded by its own max_iterations"},
	"top_logprobs":   {refused: "a flow's answer is judged by several models' calls, and carries no log probabilities"},
}

// readResponses reads a Responses request's body, checking it as OpenAI's
// API does. Items that reference stored items (item_reference) are kept as
// such: Resolve replaces them.
func readResponses(body []byte) (*Request, error) {
	fields, err := object(body)
	if err != nil {
		return nil, err
	}
	r := &Request{Wire: Responses, fields: fields}
	unknown := func(name string) *Error { return invalid(name, "unknown_parameter", "Unknown parameter: '%s'.", name) }
	if err := r.readParams(fields, responsesParams, unknown); err != nil {
		return nil, err
	}
	if _, ok := fields["model"]; !ok {
		return nil, invalid("model", "missing_required_parameter", "Missing required parameter: 'model'.")
	}
	if len(r.Items) == 0 && r.PreviousResponseID == "" {
		return nil, invalid("input", "missing_required_parameter", "Missing required parameter: 'input'.")
	}
	return r, nil
}

func readInstructions(r *Request, raw json.RawMessage) error {
	var s *string
	if json.Unmarshal(raw, &s) != nil {
		return wrongType("instructions", "a string", raw)
	}
	if s != nil && *s != "" {
		r.System = []Part{{Kind: PartText, Text: *s}}
	}
	return nil
}

func readStore(r *Request, raw json.RawMessage) error {
	if json.Unmarshal(raw, &r.Store) != nil {
		return wrongType("store", "a boolean", raw)
	}
	return nil
}

func readPrevious(r *Request, raw json.RawMessage) error {
	if json.Unmarshal(raw, &r.PreviousResponseID) != nil {
		return wrongType("previous_response_id", "a string", raw)
	}
	return nil
}

// readText reads text: its format is structured output (json_schema,
// json_object, or text, which asks for nothing); verbosity is a hint.
func readText(r *Request, raw json.RawMessage) error {
	var t map[string]json.RawMessage
	if json.Unmarshal(raw, &t) != nil {
		return wrongType("text", "an object", raw)
	}
	if f, ok := t["format"]; ok && !isNull(f) {
		var format struct {
			Type   string          `json:"type"`
			Name   string          `json:"name"`
			Schema json.RawMessage `json:"schema"`
			Strict *bool           `json:"strict"`
		}
		if json.Unmarshal(f, &format) != nil {
			return wrongType("text.format", "an object", f)
		}
		switch format.Type {
		case "text":
		case "json_object":
			r.Params.Format = &Format{}
		case "json_schema":
			if kind(format.Schema) != "an object" {
				return invalid("text.format.schema", "missing_required_parameter", "Missing required parameter: 'text.format.schema'.")
			}
			r.Params.Format = &Format{Name: format.Name, Schema: format.Schema, Strict: format.Strict}
		default:
			return invalid("text.format.type", "invalid_value", "Invalid value: 'text.format.type' is %q; it must be text, json_object or json_schema.", format.Type)
		}
	}
	if v, ok := t["verbosity"]; ok && !isNull(v) {
		r.Params.Hints = append(r.Params.Hints, "text.verbosity")
	}
	return nil
}

// readResponsesTools reads the client's function tools. OpenAI's built-in
// tools run at OpenAI, which a flow cannot: they are refused by name.
func readResponsesTools(r *Request, raw json.RawMessage) error {
	var list []json.RawMessage
	if json.Unmarshal(raw, &list) != nil {
		return wrongType("tools", "an array of tools", raw)
	}
	for i, t := range list {
		at := fmt.Sprintf("tools[%d]", i)
		var tool struct {
			Type        string          `json:"type"`
			Name        string          `json:"name"`
			Description string          `json:"description"`
			Parameters  json.RawMessage `json:"parameters"`
		}
		if json.Unmarshal(t, &tool) != nil {
			return wrongType(at, "a tool object", t)
		}
		if tool.Type != "function" {
			return invalid(at+".type", "unsupported_value", "Unsupported value: '%s.type' is %q: a built-in tool of OpenAI's runs where no judge sees its calls; only function tools are taken.%s", at, tool.Type, codexHint[tool.Type])
		}
		if err := r.addTool(at, Tool{Name: tool.Name, Description: tool.Description, Parameters: tool.Parameters, raw: t}); err != nil {
			return err
		}
	}
	return nil
}

// codexHint says how Codex, which sends these tools unless told not to,
// is told not to.
var codexHint = map[string]string{
	"web_search": ` (Codex: set web_search = "disabled" in its config.toml.)`,
	"namespace":  ` (Codex: set enabled = false under [agents] in its config.toml.)`,
}

// readResponsesChoice reads tool_choice: "none", "auto", "required", or a
// function by name.
func readResponsesChoice(r *Request, raw json.RawMessage) error {
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
		Type string `json:"type"`
		Name string `json:"name"`
	}
	if json.Unmarshal(raw, &named) != nil || named.Type != "function" || named.Name == "" {
		return invalid("tool_choice", "unsupported_value", `Unsupported value: 'tool_choice' must be "none", "auto", "required", or {"type": "function", "name": …}: the built-in tools it may name run at OpenAI.`)
	}
	r.Choice = &Choice{Mode: "tool", Name: named.Name}
	return nil
}

// readInput reads input: the user's message as a string, or items.
func readInput(r *Request, raw json.RawMessage) error {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		item, _ := json.Marshal(map[string]string{"role": "user", "content": s})
		r.Items = []Item{{Role: RoleUser, Parts: []Part{{Kind: PartText, Text: s}}, raw: item}}
		return nil
	}
	var list []json.RawMessage
	if json.Unmarshal(raw, &list) != nil {
		return wrongType("input", "a string or an array of items", raw)
	}
	if len(list) > MaxMessages {
		return invalid("input", "array_above_max_length", "Invalid 'input': array too long. Expected an array with maximum length %d, but got an array with length %d instead.", MaxMessages, len(list))
	}
	for i, it := range list {
		item, err := readItem(fmt.Sprintf("input[%d]", i), it)
		if err != nil {
			return err
		}
		r.Items = append(r.Items, item)
	}
	return nil
}

// Kind of an Item that stands for an item of a stored response, until
// Resolve replaces it: its one Part's Text is the item's id.
const roleReference = "item_reference"

// readItem reads an input item. Fields a client adds are ignored.
func readItem(at string, raw json.RawMessage) (Item, error) {
	var item struct {
		Type      string          `json:"type"`
		Role      string          `json:"role"`
		Content   json.RawMessage `json:"content"`
		ID        string          `json:"id"`
		CallID    string          `json:"call_id"`
		Name      string          `json:"name"`
		Arguments string          `json:"arguments"`
		Output    json.RawMessage `json:"output"`
	}
	if json.Unmarshal(raw, &item) != nil {
		return Item{}, wrongType(at, "an input item", raw)
	}
	it := Item{raw: raw}
	switch item.Type {
	case "", "message":
		switch item.Role {
		case "user", "assistant":
			it.Role = item.Role
		case "system", "developer":
			it.Role = RoleSystem
		default:
			return Item{}, invalid(at+".role", "invalid_value", "Invalid value: '%s.role' is %q; it must be one of user, assistant, system, developer.", at, item.Role)
		}
		parts, err := responsesContent(at+".content", it.Role, item.Content)
		if err != nil {
			return Item{}, err
		}
		it.Parts = parts
	case "function_call":
		if item.CallID == "" || item.Name == "" {
			return Item{}, invalid(at+".call_id", "missing_required_parameter", "Missing required parameter: '%s.call_id' or '%s.name'.", at, at)
		}
		it.Role, it.Parts = RoleAssistant, []Part{{Kind: PartCall, Call: &Call{ID: item.CallID, Name: item.Name, Args: item.Arguments}}}
	case "function_call_output":
		if item.CallID == "" {
			return Item{}, invalid(at+".call_id", "missing_required_parameter", "Missing required parameter: '%s.call_id'.", at)
		}
		out, err := outputText(at+".output", item.Output)
		if err != nil {
			return Item{}, err
		}
		it.Role, it.Parts = RoleTool, []Part{{Kind: PartResult, Result: &Result{CallID: item.CallID, Output: out}}}
	case "reasoning":
		it.Role, it.Parts = RoleAssistant, []Part{{Kind: PartThinking}}
	case "item_reference":
		if item.ID == "" {
			return Item{}, invalid(at+".id", "missing_required_parameter", "Missing required parameter: '%s.id'.", at)
		}
		it.Role, it.Parts = roleReference, []Part{{Kind: PartText, Text: item.ID}}
	default:
		return Item{}, invalid(at+".type", "unsupported_value", "Unsupported value: '%s.type' is %q: a flow takes messages, function calls, their outputs and reasoning.", at, item.Type)
	}
	return it, nil
}

// responsesContent reads a message item's content: a string, or parts of
// text, refusals and (the user's) images.
func responsesContent(at, role string, raw json.RawMessage) ([]Part, error) {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return []Part{{Kind: PartText, Text: s}}, nil
	}
	var list []json.RawMessage
	if json.Unmarshal(raw, &list) != nil {
		return nil, wrongType(at, "a string or an array of content parts", raw)
	}
	var parts []Part
	for j, p := range list {
		pat := fmt.Sprintf("%s[%d]", at, j)
		var part struct {
			Type     string  `json:"type"`
			Text     *string `json:"text"`
			Refusal  *string `json:"refusal"`
			ImageURL string  `json:"image_url"`
		}
		if json.Unmarshal(p, &part) != nil {
			return nil, wrongType(pat, "a content part", p)
		}
		switch {
		case (part.Type == "input_text" || part.Type == "output_text") && part.Text != nil:
			parts = append(parts, Part{Kind: PartText, Text: *part.Text})
		case part.Type == "refusal" && part.Refusal != nil:
			parts = append(parts, Part{Kind: PartText, Text: *part.Refusal})
		case part.Type == "input_image" && part.ImageURL != "" && role == RoleUser:
			parts = append(parts, Part{Kind: PartImage, Image: imageOfURL(part.ImageURL)})
		default:
			return nil, invalid(pat+".type", "unsupported_value", "Unsupported value: '%s.type' is %q: a flow takes text, and images in a user's message.", pat, part.Type)
		}
	}
	return parts, nil
}

// outputText is a function call's output as text: a string, or text
// parts. Anything else is refused: a result judge reads text, and what it
// cannot read must not reach the model unjudged.
func outputText(at string, raw json.RawMessage) (string, error) {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s, nil
	}
	var list []struct {
		Type string  `json:"type"`
		Text *string `json:"text"`
	}
	if json.Unmarshal(raw, &list) != nil {
		return "", wrongType(at, "a string or an array of input_text parts", raw)
	}
	var texts []string
	for j, p := range list {
		if p.Type != "input_text" || p.Text == nil {
			return "", invalid(fmt.Sprintf("%s[%d].type", at, j), "unsupported_value", "Unsupported value: a function call's output must be text: a result judge reads text, and nothing it cannot read may reach the model.")
		}
		texts = append(texts, *p.Text)
	}
	return strings.Join(texts, "\n"), nil
}

// References are the ids of stored items the input names (item_reference).
func (r *Request) References() []string {
	var ids []string
	for _, it := range r.Items {
		if it.Role == roleReference {
			ids = append(ids, it.Parts[0].Text)
		}
	}
	return ids
}

// Resolve puts the stored items before the input (a previous response's
// conversation and output), and the stored items each reference names in
// its place; it checks the conversation a flow needs. items maps a
// reference's id to its item.
func (r *Request) Resolve(before []json.RawMessage, items map[string]json.RawMessage) error {
	var all []Item
	for i, raw := range before {
		it, err := readItem(fmt.Sprintf("previous_response_id.items[%d]", i), raw)
		if err != nil {
			return err
		}
		all = append(all, it)
	}
	for i, it := range r.Items {
		if it.Role == roleReference {
			var err error
			if it, err = readItem(fmt.Sprintf("input[%d]", i), items[it.Parts[0].Text]); err != nil {
				return err
			}
		}
		all = append(all, it)
	}
	r.Items = all
	return checkConversation(r, "input")
}

// ResponsesBody is the request as a Responses body with no reference left:
// its input the whole conversation, as Resolve made it. A run records it,
// so that a later request may continue from it.
func (r *Request) ResponsesBody() ([]byte, error) {
	fields := maps.Clone(r.fields)
	delete(fields, "previous_response_id")
	items := make([]json.RawMessage, len(r.Items))
	for i, it := range r.Items {
		items[i] = it.raw
	}
	fields["input"], _ = json.Marshal(items)
	return json.Marshal(fields)
}

// ResponsesInput are a recorded Responses body's input items.
func ResponsesInput(body []byte) []json.RawMessage {
	var b struct {
		Input json.RawMessage `json:"input"`
	}
	json.Unmarshal(body, &b)
	var items []json.RawMessage
	if json.Unmarshal(b.Input, &items) != nil {
		var s string
		if json.Unmarshal(b.Input, &s) == nil {
			item, _ := json.Marshal(map[string]string{"role": "user", "content": s})
			items = []json.RawMessage{item}
		}
	}
	return items
}

// joinReplies joins each run of assistant items into one: Responses gives
// a reply's text and each of its calls as items of their own, where the
// other protocols have one message.
func joinReplies(items []Item) []Item {
	var out []Item
	for _, it := range items {
		if n := len(out); n > 0 && it.Role == RoleAssistant && out[n-1].Role == RoleAssistant {
			out[n-1] = changed(out[n-1])
			out[n-1].Parts = append(out[n-1].Parts, it.Parts...)
			continue
		}
		out = append(out, it)
	}
	return out
}

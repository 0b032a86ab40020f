package gateway

import (
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
)

// Wire protocols: a client speaks one of the three; an upstream speaks
// Chat or Messages.
const (
	Chat      = "chat"      // OpenAI's Chat Completions
	Responses = "responses" // OpenAI's Responses
	Messages  = "messages"  // Anthropic's Messages
)

// Request is a client's request to a model, read from its protocol.
type Request struct {
	Wire  string
	Model string
	// System is the instructions before the conversation: Responses'
	// instructions, Messages' system. A chat's system and developer
	// messages are Items, where the client put them.
	System   []Part
	Items    []Item
	Tools    []Tool
	Choice   *Choice // nil: not sent
	Parallel *bool
	Params   Params
	Stream   bool
	// IncludeUsage is a chat stream's stream_options.include_usage.
	IncludeUsage bool
	// Store and PreviousResponseID are Responses'.
	Store              *bool
	PreviousResponseID string
	// Constitutions is superego's own field: the user's constitutions,
	// which the server reads and no model is sent.
	Constitutions json.RawMessage

	// fields are the body's top-level fields as the client sent them:
	// an upstream of the same protocol gets every one this package does
	// not write itself, those it does not know included.
	fields  map[string]json.RawMessage
	changed changes // by For
	// generation are the generation parameters the client set, by name.
	generation []string
}

// generation names the parameters, of every protocol, that tune the
// answer's generation without deciding its form.
var generation = map[string]bool{
	"temperature": true, "top_p": true, "seed": true,
	"max_tokens": true, "max_completion_tokens": true, "max_output_tokens": true,
}

// Unused says what becomes of the request's parameters where no model is
// sent it, for a flow whose nodes answer on their own: a parameter that
// constrains the answer (structured output, stop sequences) is refused,
// one that does not is dropped, and named.
func (r *Request) Unused() (refused *Error, dropped []string) {
	names := map[string][2]string{ // the protocol's names of structured output and stop sequences
		Chat:      {"response_format", "stop"},
		Responses: {"text.format", ""},
		Messages:  {"output_config.format", "stop_sequences"},
	}[r.Wire]
	images := slices.ContainsFunc(r.Items, func(it Item) bool {
		return slices.ContainsFunc(it.Parts, func(p Part) bool { return p.Kind == PartImage })
	})
	field := map[string]string{Chat: "messages", Responses: "input", Messages: "messages"}[r.Wire]
	switch {
	case images:
		return &Error{Status: http.StatusBadRequest, Param: field, Code: "unsupported_value", Message: fmt.Sprintf("Unsupported value: '%s': an image reaches only a flow's client agent, and this flow has none.", field)}, nil
	case r.Params.Format != nil:
		return invalid(names[0], "unsupported_parameter", "Unsupported parameter: '%s': this flow's answer is its nodes' text, in no format a client can ask for.", names[0]), nil
	case len(r.Params.Stop) > 0:
		return invalid(names[1], "unsupported_parameter", "Unsupported parameter: '%s': this flow's answer is judged whole; it is never cut at a stop sequence.", names[1]), nil
	}
	dropped = append(slices.Clone(r.generation), r.Params.Hints...)
	slices.Sort(dropped)
	return nil, dropped
}

// Roles of Items.
const (
	RoleSystem    = "system" // a developer message is one too
	RoleUser      = "user"
	RoleAssistant = "assistant"
	RoleTool      = "tool" // a chat's tool message, a Responses function_call_output
)

// Item is one message of the conversation.
type Item struct {
	Role  string
	Parts []Part
	raw   json.RawMessage // as sent, for an upstream of the same protocol; nil once changed
	// base is the item as sent, changed or not: a changed item keeps the
	// fields this package does not write (a chat message's name, its
	// annotations) for an upstream of the same protocol.
	base json.RawMessage
}

// Kinds of Parts.
const (
	PartText     = "text"
	PartImage    = "image"
	PartCall     = "call"
	PartResult   = "result"
	PartThinking = "thinking" // a model's reasoning, as its protocol carries it: forwarded, never translated
)

// Part is one part of an Item. Parts of kinds this package does not
// translate keep their protocol's own type in Kind.
type Part struct {
	Kind   string
	Text   string  // a text part's text
	Image  *Image  // an image part's
	Call   *Call   // a call part's
	Result *Result // a result part's
	raw    json.RawMessage
}

// Image is an image a message carries: at a URL, or as data.
type Image struct {
	URL       string
	MediaType string
	Data      string // base64
}

// Call is a call of a function tool a model made.
type Call struct {
	ID   string
	Name string
	Args string // JSON, as the model wrote it
}

// Result is a tool call's result as the client (or the flow) gives it.
type Result struct {
	CallID string
	Output string
	Error  bool
}

// Tool is a function tool a client offers.
type Tool struct {
	Name        string
	Description string
	Parameters  json.RawMessage // a JSON Schema object; nil: none given
	raw         json.RawMessage
}

// Choice is a tool choice: Mode "auto", "none", "required", or "tool"
// with the tool's Name.
type Choice struct {
	Mode string
	Name string
}

// Params are the generation parameters a client set: nil where it set
// none.
type Params struct {
	Temperature *float64
	TopP        *float64
	MaxTokens   *int
	Stop        []string
	Seed        *int64
	Format      *Format
	// Hints are parameters that do not constrain the answer (reasoning,
	// thinking, caching marks, metadata): forwarded to an upstream of the
	// same protocol, dropped otherwise.
	Hints []string
}

// Format is structured output: a JSON Schema the answer follows, or any
// JSON object (Schema nil).
type Format struct {
	Name   string
	Schema json.RawMessage
	Strict *bool
}

// Error is an error as a client is told it: a request it must change (a
// 400 naming the parameter at fault), or a run that failed.
type Error struct {
	Status  int
	Param   string
	Code    string
	Message string
	// Node and Instance, for a run that failed, are where: a client is
	// told where, and the server's log and the research view why.
	Node     string
	Instance string
}

func (e *Error) Error() string { return e.Message }

// invalid is a 400 about param.
func invalid(param, code, format string, args ...any) *Error {
	return &Error{Status: http.StatusBadRequest, Param: param, Code: code, Message: fmt.Sprintf(format, args...)}
}

// wrongType is a 400 about a parameter of the wrong JSON type.
func wrongType(param, want string, raw json.RawMessage) *Error {
	return invalid(param, "invalid_type", "Invalid type for '%s': expected %s, but got %s instead.", param, want, kind(raw))
}

// kind names a JSON value's kind, for messages about a wrong type.
func kind(raw json.RawMessage) string {
	b := strings.TrimLeft(string(raw), " \t\r\n")
	switch {
	case b == "":
		return "nothing"
	case b[0] == '"':
		return "a string"
	case b[0] == '{':
		return "an object"
	case b[0] == '[':
		return "an array"
	case b[0] == 't' || b[0] == 'f':
		return "a boolean"
	case b[0] == 'n':
		return "null"
	}
	return "a number"
}

// isNull reports whether a field was sent as null, or not sent.
func isNull(raw json.RawMessage) bool {
	return len(raw) == 0 || strings.TrimSpace(string(raw)) == "null"
}

// Text is the text of an Item's text parts, joined by new lines.
func (it Item) Text() string {
	var texts []string
	for _, p := range it.Parts {
		if p.Kind == PartText {
			texts = append(texts, p.Text)
		}
	}
	return strings.Join(texts, "\n")
}

// Calls are an Item's calls.
func (it Item) Calls() []Call {
	var calls []Call
	for _, p := range it.Parts {
		if p.Call != nil {
			calls = append(calls, *p.Call)
		}
	}
	return calls
}

// Results are an Item's results.
func (it Item) Results() []Result {
	var results []Result
	for _, p := range it.Parts {
		if p.Result != nil {
			results = append(results, *p.Result)
		}
	}
	return results
}

// Input is the conversation's last message of the user's own, the input
// of a flow's run: the index of its Item, and its text. An Item of tool
// results only is no such message.
func (r *Request) Input() (int, string) {
	for i := len(r.Items) - 1; i >= 0; i-- {
		it := r.Items[i]
		if it.Role != RoleUser {
			continue
		}
		if slices.ContainsFunc(it.Parts, func(p Part) bool { return p.Kind != PartResult }) {
			return i, it.Text()
		}
	}
	return -1, ""
}

// Results are the tool results that end the conversation: those after its
// last message with calls and its last message of the user's own, the
// answers a client sends to the calls it was sent.
func (r *Request) Results() []Result {
	var results []Result
	for i := len(r.Items) - 1; i >= 0; i-- {
		it := r.Items[i]
		rs := it.Results()
		if len(it.Calls()) > 0 || it.Role == RoleUser && len(rs) == 0 {
			break
		}
		results = append(rs, results...)
	}
	return results
}

// Instructions are the client's instructions to its model: its system
// and developer messages, the Responses instructions and the Messages
// system, in order.
func (r *Request) Instructions() string {
	var texts []string
	for _, p := range r.System {
		if p.Kind == PartText {
			texts = append(texts, p.Text)
		}
	}
	for _, it := range r.Items {
		if it.Role == RoleSystem {
			texts = append(texts, it.Text())
		}
	}
	return strings.Join(texts, "\n\n")
}

// Tokens estimates the request's tokens, at four characters a token: its
// instructions, conversation and tools.
func (r *Request) Tokens() int {
	chars := 0
	for _, p := range r.System {
		chars += len(p.Text)
	}
	for _, it := range r.Items {
		for _, p := range it.Parts {
			chars += len(p.Text)
			if p.Call != nil {
				chars += len(p.Call.Name) + len(p.Call.Args)
			}
			if p.Result != nil {
				chars += len(p.Result.Output)
			}
		}
	}
	for _, t := range r.Tools {
		chars += len(t.Name) + len(t.Description) + len(t.Parameters)
	}
	return (chars + 3) / 4
}

// ToolParam is where a request of the protocol names its i-th tool.
func ToolParam(wire string, i int) string {
	switch wire {
	case Chat:
		return fmt.Sprintf("tools[%d].function.name", i)
	case Messages:
		return fmt.Sprintf("tools.%d.name", i)
	}
	return fmt.Sprintf("tools[%d].name", i)
}

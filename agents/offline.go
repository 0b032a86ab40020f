package agents

import (
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"superego/supervision"
	"superego/tools"

	"github.com/tmc/langchaingo/llms"
)

// OfflineName is what steps record as the model of an offline node.
const OfflineName = "offline (built-in, not a language model)"

// Offline is the built-in offline model: no network, no key, no language
// model. It answers every call with a valid, deterministic, plainly labelled
// reply, so a new user can watch a whole flow run: a superego takes the
// first of its decisions that lets the message through (under a stack of
// user constitutions, it names the floor as its basis: it read none of
// them), an inner agent with the calculator works out any arithmetic in the
// message with a real tool call, one told to call a tool calls it (see
// offlineCalls), and every response says it came from the offline model.
// Its judges refuse nothing, but a flow's permission rules still do: they
// decide a call with no model, so `write_file path=.env` meets a deny rule
// on the offline model as on any other.
type Offline struct{}

var _ llms.Model = Offline{}

var (
	decisionsLine = regexp.MustCompile(`(?m)^Decide with exactly one of: (.+)\.$`)
	arithmetic    = regexp.MustCompile(`[-+(]*\d[\d.]*\s*(?:[-+*/^%]|\*\*)\s*[-+(\d.][-+*/^%().\d\s]*`)
)

// passing are the decisions that let a message through, best first.
var passing = []string{"ACCEPT", "PASSED", "COMPLETE", "CAUTION"}

func (Offline) Call(ctx context.Context, prompt string, options ...llms.CallOption) (string, error) {
	return llms.GenerateFromSinglePrompt(ctx, Offline{}, prompt, options...)
}

func (Offline) GenerateContent(ctx context.Context, messages []llms.MessageContent, options ...llms.CallOption) (*llms.ContentResponse, error) {
	var opts llms.CallOptions
	for _, o := range options {
		o(&opts)
	}
	system, last := textOf(messages, llms.ChatMessageTypeSystem, true), messages[len(messages)-1]
	superego := strings.Contains(system, "<constitution>")
	basis := ""
	if superego && strings.Contains(system, `"basis":`) {
		basis = "floor"
	}

	if last.Role == llms.ChatMessageTypeTool {
		var results []string
		for _, m := range messages {
			for _, p := range m.Parts {
				if r, ok := p.(llms.ToolCallResponse); ok {
					results = append(results, fmt.Sprintf("%s returned %s", r.Name, r.Content))
				}
			}
		}
		return offlineReply(ctx, opts, pick(system, "COMPLETE"), basis, "The "+strings.Join(results, "; ")+".")
	}
	input := textOf(messages, llms.ChatMessageTypeHuman, false)
	if expr := strings.TrimSpace(arithmetic.FindString(input)); !superego && expr != "" && offersTool(opts, "calculator") {
		args, _ := json.Marshal(map[string]string{"expression": expr})
		return &llms.ContentResponse{Choices: []*llms.ContentChoice{{
			StopReason: "tool_calls",
			ToolCalls: []llms.ToolCall{{ID: "offline_call_1", Type: "function",
				FunctionCall: &llms.FunctionCall{Name: "calculator", Arguments: string(args)}}},
		}}}, nil
	}
	if calls := offlineCalls(opts, input); !superego && len(calls) > 0 {
		return &llms.ContentResponse{Choices: []*llms.ContentChoice{{StopReason: "tool_calls", ToolCalls: calls}}}, nil
	}
	decision := pick(system, passing...)
	if superego && decision == "ACCEPT" {
		return offlineReply(ctx, opts, decision, basis, "") // as the prompt asks: the message goes through as it is
	}
	if superego {
		return offlineReply(ctx, opts, decision, basis, fmt.Sprintf("Offline judge: %s. (This is the built-in offline model, not a language model: it judged nothing. Set SUPEREGO_MODEL or an API key for real judgments.)", decision))
	}
	return offlineReply(ctx, opts, decision, "", fmt.Sprintf("Offline agent: I received %q. (This is the built-in offline model, not a language model.)", firstLine(input, 120)))
}

// offlineReply answers in the reply protocol, streaming it in small chunks
// as a real model would.
func offlineReply(ctx context.Context, opts llms.CallOptions, decision, basis, response string) (*llms.ContentResponse, error) {
	guidance := "Offline model: no guidance."
	if decision == "ACCEPT" {
		guidance = "" // as the prompt asks of a plain ACCEPT
	}
	m := map[string]string{
		"thinking":       "The offline model does not reason.",
		"decision":       decision,
		"agent_guidance": guidance,
		"response":       response,
	}
	if basis != "" {
		m["basis"] = basis
	}
	text := inOrder(m)
	if opts.StreamingFunc != nil {
		for i := 0; i < len(text); i += 24 {
			if err := opts.StreamingFunc(ctx, []byte(text[i:min(i+24, len(text))])); err != nil {
				return nil, err
			}
		}
	}
	return &llms.ContentResponse{Choices: []*llms.ContentChoice{{Content: text, StopReason: "stop"}}}, nil
}

// inOrder writes the reply's object with its keys in the protocol's
// order, response last, where json.Marshal would sort them.
func inOrder(m map[string]string) string {
	var s strings.Builder
	s.WriteByte('{')
	for _, k := range []string{"thinking", "decision", "agent_guidance", "basis", "response"} {
		v, ok := m[k]
		if !ok {
			continue
		}
		if s.Len() > 1 {
			s.WriteString(", ")
		}
		kb, _ := json.Marshal(k)
		vb, _ := json.Marshal(v)
		s.Write(kb)
		s.WriteString(": ")
		s.Write(vb)
	}
	s.WriteByte('}')
	return s.String()
}

// pick returns the first of want that the prompt's decision line offers,
// else the first decision it offers.
func pick(system string, want ...string) string {
	m := decisionsLine.FindStringSubmatch(system)
	if m == nil {
		return want[0]
	}
	offered := strings.Split(m[1], ", ")
	for _, w := range want {
		for _, o := range offered {
			if o == w {
				return w
			}
		}
	}
	return offered[0]
}

// builtinTools are the built-in tools, which the offline agent calls only
// where the message names one exactly. Only their names are read.
var builtinTools = tools.Builtin(nil, nil)

// offlineCalls are the calls the offline agent makes, where the message has
// no arithmetic for the calculator: one to each built-in tool it is offered
// whose exact name is a word of the message (`write_file path=notes/a.md
// content=hello`), and one to each other tool (a /v1 client's, an
// experiment's simulated ones) a word of whose name, of five letters or
// more, the message has. A call's arguments are the message's key=value
// words that name a property of the tool's schema (the value a number or a
// boolean where the property is one and the value reads as one, else the
// text); a required property the message gives no value gets "offline" for
// text, 1 for a number, true for a boolean. It never calls an MCP tool, and
// never follows what a result says: a planted instruction does not move it.
func offlineCalls(opts llms.CallOptions, input string) []llms.ToolCall {
	lower, words := strings.ToLower(input), strings.Fields(input)
	var calls []llms.ToolCall
	for _, t := range opts.Tools {
		f := t.Function
		if f == nil || strings.HasPrefix(f.Name, "mcp__") || supervision.Handles(f.Name) {
			continue
		}
		named := false
		if _, builtin := builtinTools[f.Name]; builtin {
			named = slices.Contains(words, f.Name)
		} else {
			for _, w := range strings.FieldsFunc(strings.ToLower(f.Name), func(r rune) bool { return r == '_' || r == '-' }) {
				named = named || len(w) >= 5 && strings.Contains(lower, w)
			}
		}
		if !named {
			continue
		}
		args, _ := json.Marshal(offlineArgs(f.Parameters, words))
		calls = append(calls, llms.ToolCall{ID: fmt.Sprintf("offline_call_%d", len(calls)+1), Type: "function",
			FunctionCall: &llms.FunctionCall{Name: f.Name, Arguments: string(args)}})
	}
	return calls
}

// offlineArgs are the arguments a call to a tool of the schema takes from
// the message's words, as offlineCalls says.
func offlineArgs(schema any, words []string) map[string]any {
	args := map[string]any{}
	var s struct {
		Properties map[string]struct {
			Type string `json:"type"`
		} `json:"properties"`
		Required []string `json:"required"`
	}
	b, _ := json.Marshal(schema)
	json.Unmarshal(b, &s)
	for _, w := range words {
		key, value, ok := strings.Cut(w, "=")
		p, named := s.Properties[key]
		if !ok || !named {
			continue
		}
		args[key] = value
		var v any
		json.Unmarshal([]byte(value), &v)
		switch v.(type) {
		case float64:
			if p.Type == "number" || p.Type == "integer" {
				args[key] = v
			}
		case bool:
			if p.Type == "boolean" {
				args[key] = v
			}
		}
	}
	for _, name := range s.Required {
		if _, given := args[name]; given {
			continue
		}
		switch s.Properties[name].Type {
		case "number", "integer":
			args[name] = 1
		case "boolean":
			args[name] = true
		default:
			args[name] = "offline"
		}
	}
	return args
}

func offersTool(opts llms.CallOptions, name string) bool {
	for _, t := range opts.Tools {
		if t.Function != nil && t.Function.Name == name {
			return true
		}
	}
	return false
}

// textOf joins the text of the first (or last) message with the role.
func textOf(messages []llms.MessageContent, role llms.ChatMessageType, first bool) string {
	for i := range messages {
		m := messages[i]
		if !first {
			m = messages[len(messages)-1-i]
		}
		if m.Role != role {
			continue
		}
		var s strings.Builder
		for _, p := range m.Parts {
			if t, ok := p.(llms.TextContent); ok {
				s.WriteString(t.Text)
			}
		}
		return s.String()
	}
	return ""
}

func firstLine(s string, n int) string {
	s, _, _ = strings.Cut(strings.TrimSpace(s), "\n")
	if len(s) > n {
		s = s[:n] + "…"
	}
	return s
}

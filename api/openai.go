package api

import (
	"bytes"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"mime"
	"net"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/go-chi/chi/v5"

	"superego/flow"
	"superego/tools"
)

// This file is the server's OpenAI face (SPEC §4a): a flow stands in for a
// model of OpenAI's Chat Completions API, so that any client of that API
// talks through its superegos. Every answer is one of OpenAI's objects, as
// its API reference describes them, and every error is in OpenAI's format.

// openAIRoutes are the routes under /v1. With APIKeys set, each needs one.
func (s *Server) openAIRoutes(r chi.Router) {
	r.Use(s.requireAPIKey)
	r.Get("/models", s.openAI(s.listModels))
	r.Post("/chat/completions", s.openAI(s.chatCompletions))
	r.NotFound(s.openAI(func(w http.ResponseWriter, r *http.Request) error {
		return &openAIError{Status: http.StatusNotFound, Code: "unknown_url",
			Message: "Unknown request URL: " + r.Method + " " + r.URL.Path + ". Under /v1 this server answers GET /v1/models and POST /v1/chat/completions."}
	}))
	r.MethodNotAllowed(s.openAI(func(w http.ResponseWriter, r *http.Request) error {
		return &openAIError{Status: http.StatusMethodNotAllowed, Code: "method_not_allowed", Message: r.Method + " is not allowed on " + r.URL.Path}
	}))
}

// openAIError is an error as OpenAI's API writes it:
// {"error": {"message", "type", "param", "code"}}.
type openAIError struct {
	Status  int
	Message string
	Param   string // "": null
	Code    string // "": null
	// NoRetry tells OpenAI's SDKs, which retry 409s and 5xx by themselves,
	// not to: a retry would start another run.
	NoRetry bool
}

func (e *openAIError) Error() string { return e.Message }

// openAIType is the error's type, by its status, as OpenAI's API has it.
func openAIType(status int) string {
	switch {
	case status == http.StatusTooManyRequests:
		return "rate_limit_error"
	case status >= 500:
		return "server_error"
	}
	return "invalid_request_error"
}

// MarshalJSON writes the error object; param and code are null when unset.
func (e *openAIError) MarshalJSON() ([]byte, error) {
	orNull := func(s string) *string {
		if s == "" {
			return nil
		}
		return &s
	}
	return json.Marshal(struct {
		Message string  `json:"message"`
		Type    string  `json:"type"`
		Param   *string `json:"param"`
		Code    *string `json:"code"`
	}{e.Message, openAIType(e.Status), orNull(e.Param), orNull(e.Code)})
}

// asOpenAI turns any error into OpenAI's format, with the status and code
// apiError gives it.
func (s *Server) asOpenAI(r *http.Request, err error) *openAIError {
	var oe *openAIError
	if errors.As(err, &oe) {
		return oe
	}
	e := s.apiError(r, err)
	return &openAIError{Status: e.Status, Code: e.Code, Message: e.Message}
}

// openAI adapts a handler that returns an error, as handler does, writing
// the error in OpenAI's format.
func (s *Server) openAI(h func(w http.ResponseWriter, r *http.Request) error) http.HandlerFunc {
	return s.adapt(h, func(w http.ResponseWriter, r *http.Request, err error) { writeOpenAIError(w, s.asOpenAI(r, err)) })
}

func writeOpenAIError(w http.ResponseWriter, e *openAIError) {
	if e.Status == http.StatusTooManyRequests {
		w.Header().Set("Retry-After", "1")
	}
	if e.NoRetry {
		w.Header().Set("X-Should-Retry", "false")
	}
	writeJSON(w, e.Status, map[string]*openAIError{"error": e})
}

// requireAPIKey lets a request through when APIKeys is empty or it carries
// one of them as a bearer token; it compares with every key, in constant
// time, and never repeats what it was sent.
func (s *Server) requireAPIKey(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if len(s.APIKeys) == 0 {
			next.ServeHTTP(w, r)
			return
		}
		if _, ok := bearer(r); !ok {
			writeOpenAIError(w, &openAIError{Status: http.StatusUnauthorized, Code: "invalid_api_key",
				Message: "You didn't provide an API key: send one of the server's SUPEREGO_API_KEYS as Authorization: Bearer KEY."})
			return
		}
		if !s.apiKey(r) {
			writeOpenAIError(w, &openAIError{Status: http.StatusUnauthorized, Code: "invalid_api_key",
				Message: "Incorrect API key provided: it is not one of the server's SUPEREGO_API_KEYS."})
			return
		}
		next.ServeHTTP(w, r)
	})
}

// openAIModel is OpenAI's model object.
type openAIModel struct {
	ID      string `json:"id"`
	Object  string `json:"object"`
	Created int64  `json:"created"`
	OwnedBy string `json:"owned_by"`
}

// listModels serves GET /v1/models: one model per flow, its id the flow's.
// A flow has no creation time: created is 0.
func (s *Server) listModels(w http.ResponseWriter, r *http.Request) error {
	data := []openAIModel{}
	for _, id := range slices.Sorted(maps.Keys(s.Engine.Flows)) {
		data = append(data, openAIModel{ID: id, Object: "model", OwnedBy: "superego"})
	}
	writeJSON(w, http.StatusOK, struct {
		Object string        `json:"object"`
		Data   []openAIModel `json:"data"`
	}{"list", data})
	return nil
}

// MaxMessages bounds the messages of a chat completions request.
const MaxMessages = 2048

// chatRequest is a chat completions request as the flow takes it.
type chatRequest struct {
	model        string
	prior        []flow.Step // the conversation before input: user and assistant messages
	input        string      // the last user message
	stream       bool
	includeUsage bool
	ignored      []string // parameters accepted and ignored, named in a header
	// The client's tools (SPEC §4a), and the results of its calls that
	// end the conversation, for the instance that waits for them.
	tools    []flow.ClientTool
	choice   json.RawMessage
	parallel *bool
	results  []flow.ClientResult

	constitutions []flow.Pick // the user's constitutions (SPEC §10, stack.go)
}

// param is what becomes of one parameter of OpenAI's chat completions
// request: read, refused unless its value asks for nothing a flow cannot
// give, or accepted and ignored.
type param struct {
	read     func(req *chatRequest, raw json.RawMessage) error
	refused  string                     // why, for a value that asks for something
	harmless func(json.RawMessage) bool // the values a refused parameter may take; default: null, false, 0, "", [] and {}
	ignored  bool
}

// chatParams lists every parameter of OpenAI's chat completions request, as
// of its API reference; any other is refused, as OpenAI's API refuses it.
// Sampling and the like are ignored, not refused: chat clients send them by
// default (LibreChat sends temperature, top_p, the penalties and user), and a
// flow's nodes use their own models' settings.
var chatParams = map[string]param{
	"model":          {read: readModel},
	"messages":       {read: readMessages},
	"stream":         {read: readStream},
	"stream_options": {read: readStreamOptions},
	"n":              {read: readN},
	"constitutions":  {read: readConstitutions}, // not OpenAI's: a stack of constitutions (SPEC §10)

	"tools":              {read: readTools},
	"functions":          {refused: "the client's tools are given as 'tools'; 'functions' is their older form, which this server does not take"},
	"tool_choice":        {read: readToolChoice},
	"function_call":      {refused: "a flow never answers with a function call", harmless: oneOf(`"none"`, `"auto"`)},
	"web_search_options": {refused: "a flow's nodes use their own tools"},
	"audio":              {refused: "a flow answers with text only"},
	"modalities":         {refused: "a flow answers with text only", harmless: oneOf(`["text"]`)},
	"response_format":    {refused: "a flow's answer is its nodes' text, in no format a client can ask for", harmless: oneOf(`{"type":"text"}`)},
	"logprobs":           {refused: "a flow's answer comes from several models' calls and has no log probabilities"},
	"top_logprobs":       {refused: "a flow's answer comes from several models' calls and has no log probabilities"},
	"logit_bias":         {refused: "a flow's nodes may run on any provider's models, whose tokens are not OpenAI's"},
	"stop":               {refused: "a flow's answer is judged whole; it is never cut at a stop sequence"},
	"moderation":         {refused: "the flow's superegos are its moderation, and their verdicts are not OpenAI's moderation results"},

	"temperature":            {ignored: true},
	"top_p":                  {ignored: true},
	"frequency_penalty":      {ignored: true},
	"presence_penalty":       {ignored: true},
	"max_tokens":             {ignored: true},
	"max_completion_tokens":  {ignored: true},
	"seed":                   {ignored: true},
	"reasoning_effort":       {ignored: true},
	"verbosity":              {ignored: true},
	"service_tier":           {ignored: true},
	"prediction":             {ignored: true},
	"parallel_tool_calls":    {read: readParallel},
	"user":                   {ignored: true},
	"safety_identifier":      {ignored: true},
	"prompt_cache_key":       {ignored: true},
	"prompt_cache_retention": {ignored: true},
	"prompt_cache_options":   {ignored: true},
	"metadata":               {ignored: true},
	"store":                  {ignored: true}, // every run is an instance, kept as superego keeps all
}

// asks reports whether a refused parameter's value asks for something.
func (p param) asks(raw json.RawMessage) bool {
	if p.harmless != nil {
		return !p.harmless(raw)
	}
	return !asksNothing(raw)
}

// oneOf accepts null, and the given JSON values (compared compacted).
func oneOf(values ...string) func(json.RawMessage) bool {
	return func(raw json.RawMessage) bool {
		var b bytes.Buffer
		if json.Compact(&b, raw) != nil {
			return false
		}
		return b.String() == "null" || slices.Contains(values, b.String())
	}
}

// asksNothing reports whether a value is null or empty: false, 0, "", [] or {}.
func asksNothing(raw json.RawMessage) bool {
	var v any
	if json.Unmarshal(raw, &v) != nil {
		return false
	}
	switch v := v.(type) {
	case nil:
		return true
	case bool:
		return !v
	case float64:
		return v == 0
	case string:
		return v == ""
	case []any:
		return len(v) == 0
	case map[string]any:
		return len(v) == 0
	}
	return false
}

func invalid(param, code, format string, args ...any) *openAIError {
	return &openAIError{Status: http.StatusBadRequest, Param: param, Code: code, Message: fmt.Sprintf(format, args...)}
}

// jsonKind names a JSON value's kind, for messages about a wrong type.
func jsonKind(raw json.RawMessage) string {
	switch b := bytes.TrimSpace(raw); {
	case len(b) == 0:
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

func wrongType(param string, want string, raw json.RawMessage) *openAIError {
	return invalid(param, "invalid_type", "Invalid type for '%s': expected %s, but got %s instead.", param, want, jsonKind(raw))
}

func readModel(req *chatRequest, raw json.RawMessage) error {
	if json.Unmarshal(raw, &req.model) != nil {
		return wrongType("model", "a string", raw)
	}
	return nil
}

func readStream(req *chatRequest, raw json.RawMessage) error {
	var stream *bool
	if json.Unmarshal(raw, &stream) != nil {
		return wrongType("stream", "a boolean", raw)
	}
	req.stream = stream != nil && *stream
	return nil
}

// readStreamOptions reads include_usage; include_obfuscation is accepted
// and ignored: chunks carry no obfuscation field.
func readStreamOptions(req *chatRequest, raw json.RawMessage) error {
	var opts *struct {
		IncludeUsage       *bool `json:"include_usage"`
		IncludeObfuscation *bool `json:"include_obfuscation"`
	}
	if json.Unmarshal(raw, &opts) != nil {
		return wrongType("stream_options", "an object with boolean include_usage", raw)
	}
	req.includeUsage = opts != nil && opts.IncludeUsage != nil && *opts.IncludeUsage
	return nil
}

func readN(req *chatRequest, raw json.RawMessage) error {
	var n *float64
	if json.Unmarshal(raw, &n) != nil {
		return wrongType("n", "an integer", raw)
	}
	if n != nil && *n != 1 {
		return invalid("n", "unsupported_value", "Unsupported value: 'n' must be 1: a flow gives one answer per request.")
	}
	return nil
}

// chatMessage is a message of the request, with the fields that matter
// here; others (name) are ignored.
type chatMessage struct {
	Role         *string         `json:"role"`
	Content      json.RawMessage `json:"content"`
	Refusal      *string         `json:"refusal"`
	ToolCalls    json.RawMessage `json:"tool_calls"`
	ToolCallID   *string         `json:"tool_call_id"`
	FunctionCall json.RawMessage `json:"function_call"`
	Audio        json.RawMessage `json:"audio"`
}

// readMessages makes the conversation: system and developer messages are
// dropped (they never reach a node's model: the flow's nodes have their own
// prompts), user and assistant messages before the last user message are
// its history, and the last user message is the input. Tool calls and
// their results are read as the client's (SPEC §4a): the results that end
// the conversation may answer the calls an instance waits for; anything
// else of the client's tool calls is no part of a new instance's history.
func readMessages(req *chatRequest, raw json.RawMessage) error {
	var msgs []json.RawMessage
	if json.Unmarshal(raw, &msgs) != nil {
		return wrongType("messages", "an array of messages", raw)
	}
	if len(msgs) == 0 {
		return invalid("messages", "empty_array", "Invalid 'messages': empty array. Expected an array with at least the user's message.")
	}
	if len(msgs) > MaxMessages {
		// Each message becomes a step of the instance, which every node's
		// task carries: a conversation's count, not only its bytes, is
		// what a run holds.
		return invalid("messages", "array_above_max_length", "Invalid 'messages': array too long. Expected an array with maximum length %d, but got an array with length %d instead.", MaxMessages, len(msgs))
	}
	req.prior = make([]flow.Step, 0, len(msgs)-1)
	lastUser, lastRole := -1, ""
	for i, m := range msgs {
		at := fmt.Sprintf("messages[%d]", i)
		var msg chatMessage
		if json.Unmarshal(m, &msg) != nil {
			return wrongType(at, "a message object", m)
		}
		if msg.Role == nil {
			return invalid(at+".role", "missing_required_parameter", "Missing required parameter: '%s.role'.", at)
		}
		role := *msg.Role
		text, err := textOf(at, msg)
		if err != nil {
			return err
		}
		switch role {
		case "system", "developer":
		case "user":
			if strings.TrimSpace(text) == "" {
				return invalid(at+".content", "invalid_value", "Invalid '%s.content': a user's message must not be empty.", at)
			}
			req.prior = append(req.prior, flow.Step{Role: role, Response: text})
			lastUser, req.results = len(req.prior)-1, nil
		case "assistant":
			for field, v := range map[string]json.RawMessage{"function_call": msg.FunctionCall, "audio": msg.Audio} {
				if len(v) > 0 && !asksNothing(v) {
					return invalid(at+"."+field, "unsupported_parameter", "Unsupported parameter: '%s.%s': a flow's conversation is text and the client's tool calls.", at, field)
				}
			}
			if text == "" && msg.Refusal != nil {
				text = *msg.Refusal // a refusal the client was given, sent back
			}
			if len(msg.ToolCalls) > 0 && !asksNothing(msg.ToolCalls) {
				if jsonKind(msg.ToolCalls) != "an array" {
					return wrongType(at+".tool_calls", "an array of tool calls", msg.ToolCalls)
				}
				req.results = nil // results after these answer them
			}
			if text != "" {
				req.prior = append(req.prior, flow.Step{Role: role, Response: text})
			}
		case "tool":
			if msg.ToolCallID == nil || *msg.ToolCallID == "" {
				return invalid(at+".tool_call_id", "missing_required_parameter", "Missing required parameter: '%s.tool_call_id'.", at)
			}
			req.results = append(req.results, flow.ClientResult{ToolCallID: *msg.ToolCallID, Output: text})
		case "function":
			return invalid(at+".role", "unsupported_value", "Unsupported value: '%s.role' is \"function\": send a tool's result as a \"tool\" message.", at)
		default:
			return invalid(at+".role", "invalid_value", "Invalid value: '%s.role' is %q; it must be one of system, developer, user, assistant, tool.", at, role)
		}
		lastRole = role
	}
	if lastUser < 0 {
		return invalid("messages", "invalid_value", "Invalid value: 'messages' has no user message, and a flow's input is the user's message.")
	}
	if lastRole != "user" && lastRole != "tool" {
		last := len(msgs) - 1
		return invalid(fmt.Sprintf("messages[%d].role", last), "invalid_value",
			"Invalid value: the last message must be the user's, the flow's input, or a tool's result, and 'messages[%d].role' is %q.", last, lastRole)
	}
	req.input = req.prior[lastUser].Response
	req.prior = slices.Delete(req.prior, lastUser, len(req.prior)) // what came after it, the client's tool round, is no history
	return nil
}

// readTools reads the client's function tools (SPEC §4a).
func readTools(req *chatRequest, raw json.RawMessage) error {
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
		case !tools.ValidName(tool.Function.Name):
			return invalid(at+".function.name", "invalid_value", "Invalid '%s.function.name': a function's name is 1 to 64 letters, digits, '_' or '-'.", at)
		case len(tool.Function.Parameters) > 0 && jsonKind(tool.Function.Parameters) != "an object" && jsonKind(tool.Function.Parameters) != "null":
			return wrongType(at+".function.parameters", "a JSON Schema object", tool.Function.Parameters)
		case slices.ContainsFunc(req.tools, func(c flow.ClientTool) bool { return c.Name == tool.Function.Name }):
			return invalid(at+".function.name", "invalid_value", "Invalid '%s.function.name': %q is named twice.", at, tool.Function.Name)
		}
		req.tools = append(req.tools, flow.ClientTool{Name: tool.Function.Name, Description: tool.Function.Description, Parameters: tool.Function.Parameters})
	}
	return nil
}

// readToolChoice reads tool_choice: "none", "auto", "required", or a named
// function; which the tools must have is checked once they are read.
func readToolChoice(req *chatRequest, raw json.RawMessage) error {
	if string(bytes.TrimSpace(raw)) == "null" {
		return nil // as if not sent, as null is for every parameter here
	}
	var word string
	if json.Unmarshal(raw, &word) == nil {
		if word != "none" && word != "auto" && word != "required" {
			return invalid("tool_choice", "invalid_value", "Invalid value: 'tool_choice' is %q; it must be none, auto, required, or a function to call.", word)
		}
		req.choice = raw
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
	req.choice = raw
	return nil
}

func readParallel(req *chatRequest, raw json.RawMessage) error {
	if json.Unmarshal(raw, &req.parallel) != nil {
		return wrongType("parallel_tool_calls", "a boolean", raw)
	}
	return nil
}

// chosen is the function tool_choice names, if it names one.
func (req *chatRequest) chosen() string {
	var named struct {
		Function struct {
			Name string `json:"name"`
		} `json:"function"`
	}
	json.Unmarshal(req.choice, &named)
	return named.Function.Name
}

// textOf is a message's text: its content as a string, or its text parts
// (and refusal parts, which an assistant message may have) joined by new
// lines. Any other part is refused: a flow takes text only.
func textOf(at string, msg chatMessage) (string, error) {
	if len(msg.Content) == 0 || string(msg.Content) == "null" {
		return "", nil
	}
	var s string
	if json.Unmarshal(msg.Content, &s) == nil {
		return s, nil
	}
	var parts []json.RawMessage
	if json.Unmarshal(msg.Content, &parts) != nil {
		return "", wrongType(at+".content", "a string or an array of content parts", msg.Content)
	}
	texts := make([]string, 0, len(parts))
	for j, p := range parts {
		var part struct {
			Type    string  `json:"type"`
			Text    *string `json:"text"`
			Refusal *string `json:"refusal"`
		}
		pat := fmt.Sprintf("%s.content[%d]", at, j)
		if json.Unmarshal(p, &part) != nil {
			return "", wrongType(pat, "a content part object", p)
		}
		switch {
		case part.Type == "text" && part.Text != nil:
			texts = append(texts, *part.Text)
		case part.Type == "refusal" && part.Refusal != nil && msg.Role != nil && *msg.Role == "assistant":
			texts = append(texts, *part.Refusal)
		case part.Type == "text" || part.Type == "refusal":
			return "", invalid(pat+"."+part.Type, "missing_required_parameter", "Missing required parameter: '%s.%s'.", pat, part.Type)
		default:
			return "", invalid(pat+".type", "unsupported_value", "Unsupported value: '%s.type' is %q: a flow takes text only.", pat, part.Type)
		}
	}
	return strings.Join(texts, "\n"), nil
}

// readChatRequest reads and checks a request's body.
func readChatRequest(w http.ResponseWriter, r *http.Request) (*chatRequest, error) {
	if mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type")); err != nil || mt != "application/json" {
		return nil, &openAIError{Status: http.StatusUnsupportedMediaType, Code: "unsupported_media_type", Message: "Send the body as JSON, with Content-Type: application/json."}
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, MaxBody))
	if err != nil {
		var tooBig *http.MaxBytesError
		var netErr net.Error
		switch {
		case errors.As(err, &tooBig):
			return nil, &openAIError{Status: http.StatusRequestEntityTooLarge, Code: "body_too_large", Message: fmt.Sprintf("The body is over %d bytes.", MaxBody)}
		case errors.As(err, &netErr) && netErr.Timeout():
			return nil, &openAIError{Status: http.StatusRequestTimeout, Code: "request_timeout", Message: "The body did not arrive in time."}
		}
		return nil, fmt.Errorf("read chat completions request: %w", err)
	}
	// The body is read: the server's read timeout, which bounded it, must
	// not cut the run that follows.
	http.NewResponseController(w).SetReadDeadline(time.Time{})
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(body, &fields); err != nil || fields == nil {
		msg := "the body is not a JSON object"
		if syntax := (*json.SyntaxError)(nil); errors.As(err, &syntax) {
			msg = "the body is not valid JSON: " + err.Error()
		}
		return nil, invalid("", "invalid_json", "We could not parse the JSON body of your request: %s.", msg)
	}
	req := &chatRequest{}
	for _, name := range slices.Sorted(maps.Keys(fields)) {
		raw := fields[name]
		p, ok := chatParams[name]
		switch {
		case !ok:
			return nil, invalid(name, "unknown_parameter", "Unrecognized request argument supplied: %s", name)
		case p.read != nil:
			if err := p.read(req, raw); err != nil {
				return nil, err
			}
		case p.ignored:
			req.ignored = append(req.ignored, name)
		case p.asks(raw):
			return nil, invalid(name, "unsupported_parameter", "Unsupported parameter: '%s': %s.", name, p.refused)
		}
	}
	for _, name := range []string{"model", "messages"} {
		if _, ok := fields[name]; !ok {
			return nil, invalid(name, "missing_required_parameter", "Missing required parameter: '%s'.", name)
		}
	}
	if req.model == "" {
		return nil, invalid("model", "invalid_value", "Invalid value: 'model' must name a flow (GET /v1/models lists them).")
	}
	if _, ok := fields["stream_options"]; ok && !req.stream && string(fields["stream_options"]) != "null" {
		return nil, invalid("stream_options", "invalid_value", "Invalid value: 'stream_options' is only allowed when 'stream' is true.")
	}
	return req, nil
}

// chatCompletions serves POST /v1/chat/completions: a run of the flow named
// by model, on a new instance whose history is the request's conversation;
// or, where the conversation ends with the results of the calls an
// instance waits for (SPEC §4a), a run that goes on with that instance.
func (s *Server) chatCompletions(w http.ResponseWriter, r *http.Request) error {
	req, err := readChatRequest(w, r)
	if err != nil {
		return err
	}
	flowID, upstream, _ := strings.Cut(req.model, "@")
	f := s.Engine.Flows[flowID]
	if f == nil {
		return &openAIError{Status: http.StatusNotFound, Param: "model", Code: "model_not_found",
			Message: fmt.Sprintf("The model `%s` does not exist: a model is a flow of this server, and GET /v1/models lists them.", req.model)}
	}
	opts, err := s.clientOptions(req, f.Def, upstream)
	if err != nil {
		return err
	}
	if opts.Stack, err = s.stackFor(r, req.constitutions); err != nil {
		return openAIStackError(err)
	}
	opts.Owner = s.owner(r)
	var sub *flow.Subscription
	if len(req.results) > 0 && opts.Client != nil {
		id, err := s.waitingFor(r, flowID, opts.Owner, req.results)
		if err != nil {
			return err
		}
		if id != "" {
			opts.Results = req.results
			if sub, err = s.Engine.Start(r.Context(), flow.Request{FlowID: flowID, InstanceID: id, Continue: true, Options: opts}); err != nil {
				return err
			}
		}
	}
	if sub == nil {
		if sub, err = s.Engine.Start(r.Context(), flow.Request{FlowID: flowID, Prior: req.prior, Input: req.input, Options: opts}); err != nil {
			return err
		}
	}
	defer sub.Close()
	w.Header().Set("X-Superego-Instance-Id", sub.Instance)
	if len(req.ignored) > 0 {
		w.Header().Set("X-Superego-Ignored-Parameters", strings.Join(req.ignored, ", "))
	}
	c := &completion{model: req.model, created: time.Now().Unix(), instance: sub.Instance, flow: flowID}
	if req.stream {
		return s.streamChat(w, r, sub, c, f.Def, req.includeUsage)
	}
	return s.collectChat(w, r, sub, c)
}

// clientOptions are the run's options for the request's tools and model:
// the client's tools for the flow's "client" agent, checked against it,
// and the upstream model of "FLOW@provider:model", one the operator allows.
func (s *Server) clientOptions(req *chatRequest, def *flow.Definition, upstream string) (flow.RunOptions, error) {
	var opts flow.RunOptions
	agent := def.ClientAgent()
	if agent == nil {
		switch {
		case len(req.tools) > 0:
			return opts, invalid("tools", "unsupported_parameter", "Unsupported parameter: 'tools': no agent of this flow takes a client's tools; its nodes call their own.")
		case upstream != "":
			return opts, invalid("model", "invalid_value", "Invalid value: 'model': %q has no agent that takes a client's tools, whose model a request may choose.", req.model)
		case len(req.choice) > 0 && string(req.choice) != `"none"` && string(req.choice) != `"auto"`:
			return opts, invalid("tool_choice", "unsupported_parameter", "Unsupported parameter: 'tool_choice': no agent of this flow takes a client's tools.")
		}
		return opts, nil
	}
	for i, t := range req.tools {
		if slices.ContainsFunc(agent.Tools, func(own string) bool { return flow.ToolMatches(own, t.Name) }) {
			return opts, invalid(fmt.Sprintf("tools[%d].function.name", i), "invalid_value",
				"Invalid 'tools[%d].function.name': %q is a tool of the flow's agent %s; give the client's tool another name.", i, t.Name, agent.Name)
		}
	}
	switch name := req.chosen(); {
	case name != "" && !slices.ContainsFunc(req.tools, func(t flow.ClientTool) bool { return t.Name == name }):
		return opts, invalid("tool_choice", "invalid_value", "Invalid value: 'tool_choice' names %q, which is not one of 'tools'.", name)
	case name != "" && agent.Denies(name):
		return opts, invalid("tool_choice", "invalid_value", "Invalid value: 'tool_choice' names %q, which a deny rule of the flow's agent %s refuses.", name, agent.Name)
	case string(req.choice) == `"required"` && len(req.tools) == 0:
		return opts, invalid("tool_choice", "invalid_value", "Invalid value: 'tool_choice' is \"required\", and 'tools' is empty.")
	}
	opts.Client = &flow.ClientTools{Tools: req.tools, Choice: req.choice, Parallel: req.parallel}
	if upstream != "" {
		allowed := s.UpstreamModels
		if len(allowed) == 0 && agent.Model != "" {
			allowed = []string{agent.Model}
		}
		if !slices.Contains(allowed, upstream) {
			list := "only the flow's own (" + agent.Model + "): set SUPEREGO_UPSTREAM_MODELS to allow others"
			if len(s.UpstreamModels) > 0 {
				list = strings.Join(s.UpstreamModels, ", ")
			}
			return opts, invalid("model", "invalid_value", "Invalid value: 'model' asks for %q for the agent %s; this server allows %s.", upstream, agent.Name, list)
		}
		opts.Variant = &flow.Variant{Models: map[string]string{agent.Name: upstream}}
	}
	return opts, nil
}

// owner is what binds an instance's calls to the API key that made them: a
// hash of the key, "" where /v1 needs none.
func (s *Server) owner(r *http.Request) string {
	if len(s.APIKeys) == 0 {
		return ""
	}
	token, _ := bearer(r)
	sum := sha256.Sum256([]byte(token))
	return hex.EncodeToString(sum[:16])
}

// waitingFor finds the instance of the flow that waits for the calls the
// results answer: "" where none does (ids this server did not issue, or an
// instance no longer waiting, as for a retry), and the request starts a new
// instance. Results that answer another key's calls find nothing (404);
// results that answer some of an instance's calls only are a 400 naming
// the first missing. The calls this process sent are found at once
// (callIndex); others, among every instance of the flow that waits.
func (s *Server) waitingFor(r *http.Request, flowID, owner string, results []flow.ClientResult) (string, error) {
	ids, known := s.sent.instances(flowID, results)
	if !known {
		list, err := s.Engine.Store.List(r.Context(), flow.ListOptions{FlowID: flowID, Status: flow.StatusAwaitingToolResult})
		if err != nil {
			return "", err
		}
		for _, inst := range list {
			ids = append(ids, inst.ID)
		}
	}
	for _, id := range ids {
		events, err := s.Engine.Store.Events(r.Context(), id, 0)
		if err != nil {
			return "", err
		}
		st := flow.Replay(events)
		waiting := flow.WaitingCalls(st.Steps)
		if !slices.ContainsFunc(waiting, func(u flow.ToolUse) bool {
			return slices.ContainsFunc(results, func(c flow.ClientResult) bool { return c.ToolCallID == u.ID })
		}) {
			continue
		}
		if subtle.ConstantTimeCompare([]byte(st.Options.Owner), []byte(owner)) != 1 {
			return "", &openAIError{Status: http.StatusNotFound, Param: "messages", Code: "tool_call_not_found",
				Message: "The tool results answer calls this server did not send to this API key."}
		}
		for _, u := range waiting {
			if !slices.ContainsFunc(results, func(c flow.ClientResult) bool { return c.ToolCallID == u.ID }) {
				return "", invalid("messages", "missing_tool_result", "Invalid 'messages': instance %s waits for the results of every call it sent; tool_call_id %q has none.", id, u.ID)
			}
		}
		return id, nil
	}
	return "", nil
}

// completion is what the answer's objects share.
type completion struct {
	id       string // chatcmpl- and the run's id
	model    string
	created  int64
	instance string
	flow     string
}

type chatUsage struct {
	PromptTokens     int `json:"prompt_tokens"`
	CompletionTokens int `json:"completion_tokens"`
	TotalTokens      int `json:"total_tokens"`
}

// usageOf is the tokens of every model call of the run, those of
// speculative calls it discarded (SPEC §3b) included: all were spent.
func usageOf(u *flow.RunUsage) chatUsage {
	if u == nil {
		return chatUsage{}
	}
	p, c := u.PromptTokens+u.SpeculativePromptTokens, u.CompletionTokens+u.SpeculativeCompletionTokens
	return chatUsage{p, c, p + c}
}

// finishReasons maps the statuses of runs that answer to OpenAI's
// finish_reason; a failed or cancelled run answers with an error instead.
var finishReasons = map[string]string{
	flow.StatusCompleted:          "stop",
	flow.StatusAwaitingInput:      "stop", // the content is the superego's question
	flow.StatusAwaitingReview:     "stop", // a supervisor asked a human; the instance waits for the review
	flow.StatusBlocked:            "content_filter",
	flow.StatusAwaitingToolResult: "tool_calls", // the client runs them, and answers in its next request
	flow.StatusIterationLimit:     "length",
}

// outcome is how a run ended, for a client of /v1: a finish reason, or an
// error.
func (c *completion) outcome(done flow.Done, runErr *flow.ErrorData) (string, *openAIError) {
	switch done.Status {
	case flow.StatusFailed:
		e := &openAIError{Status: http.StatusBadGateway, Code: "internal", Message: "The flow's run failed (instance " + c.instance + ")."}
		if runErr != nil {
			e.Code, e.Message = runErr.Code, "The flow's run failed (instance "+c.instance+"): "+runErr.Message
		}
		if e.Code == "storage" {
			e.Status = http.StatusInsufficientStorage // the server's disk, not an upstream
		}
		return "", e
	case flow.StatusCancelled:
		return "", &openAIError{Status: http.StatusConflict, Code: "cancelled", NoRetry: true,
			Message: "The flow's run was cancelled (instance " + c.instance + ")."}
	}
	reason, ok := finishReasons[done.Status]
	if !ok {
		return "", &openAIError{Status: http.StatusInternalServerError, Code: "internal", Message: "The flow's run ended " + done.Status + "."}
	}
	return reason, nil
}

// chatCompletionObject is OpenAI's chat completion object.
type chatCompletionObject struct {
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
// content, as SPEC §4a says, with finish_reason content_filter; refusal,
// which OpenAI reserves for its models' own refusals, stays null.
type chatReply struct {
	Role        string           `json:"role"`
	Content     *string          `json:"content"` // null where the answer is tool calls
	Refusal     *string          `json:"refusal"`
	ToolCalls   []openAIToolCall `json:"tool_calls,omitempty"`
	Annotations []struct{}       `json:"annotations"`
}

// openAIToolCall is a call the client is to run, as OpenAI's message and
// (with Index) its stream's deltas carry it.
type openAIToolCall struct {
	Index    *int   `json:"index,omitempty"`
	ID       string `json:"id"`
	Type     string `json:"type"`
	Function struct {
		Name      string `json:"name"`
		Arguments string `json:"arguments"`
	} `json:"function"`
}

// toolCallsOf are the calls a run sends its client, in OpenAI's form.
func toolCallsOf(calls []flow.ToolCall) []openAIToolCall {
	out := make([]openAIToolCall, len(calls))
	for i, c := range calls {
		out[i].ID, out[i].Type = c.ToolCallID, "function"
		out[i].Function.Name, out[i].Function.Arguments = c.ToolName, string(c.Input)
	}
	return out
}

// collectChat waits for the run's end and answers with one chat completion
// object. If the client goes away, the run goes on all the same.
func (s *Server) collectChat(w http.ResponseWriter, r *http.Request, sub *flow.Subscription, c *completion) error {
	var done *flow.Done
	var runErr *flow.ErrorData
	for ev := range sub.Events(r.Context()) {
		switch d := ev.Data.(type) {
		case flow.RunStart:
			c.id = "chatcmpl-" + d.RunID
		case flow.ErrorData:
			runErr = &d
		case flow.Done:
			done = &d
		}
	}
	if done == nil {
		// Stopped by shutdown, or the client went away: the run goes on,
		// or resumes at the next start.
		return fmt.Errorf("run on instance %s interrupted: %w", c.instance, flow.ErrClosed)
	}
	s.deadline(w)
	reason, e := c.outcome(*done, runErr)
	if e != nil {
		return e
	}
	msg := chatReply{Role: "assistant", Content: &done.Response, Annotations: []struct{}{}}
	if done.Status == flow.StatusAwaitingToolResult {
		msg.Content, msg.ToolCalls = nil, toolCallsOf(done.ToolCalls) // the reply's text stays held
		s.sent.add(c.flow, c.instance, done.ToolCalls)
	}
	writeJSON(w, http.StatusOK, chatCompletionObject{
		ID: c.id, Object: "chat.completion", Created: c.created, Model: c.model,
		Choices: []chatChoice{{Message: msg, FinishReason: reason}},
		Usage:   usageOf(done.Usage),
	})
	return nil
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

// Deltas that never change.
var (
	roleDelta  = json.RawMessage(`{"role":"assistant","content":"","refusal":null}`)
	emptyDelta = json.RawMessage(`{}`)
	nullUsage  = json.RawMessage(`null`)
)

// lastSpeakers are the nodes whose step, when it has a visible response, is
// the run's answer: whatever such a node decides, the run ends after it,
// for each of its transitions ends the run, and it has no tools whose calls
// would make it run again. Their text streams as it is released; any other
// node's text may yet be followed by another's, so it waits for done.
func lastSpeakers(def *flow.Definition) map[string]bool {
	last := map[string]bool{}
	for name, n := range def.Graph.Nodes {
		if len(n.Tools) > 0 || len(n.AllowedActions) > 0 {
			continue
		}
		ends := true
		for d, target := range n.Transitions {
			if d != flow.MaxIterations && target != nil {
				ends = false
			}
		}
		last[name] = ends
	}
	return last
}

// streamChat answers with chat completion chunks over SSE, ending with
// data: [DONE]. Their deltas add up to exactly the run's done.response,
// and carry only released text (§3a): the text of a node that speaks last
// (lastSpeakers) as it is released, anything else once done says what the
// answer is. If the client goes away, the run goes on all the same.
func (s *Server) streamChat(w http.ResponseWriter, r *http.Request, sub *flow.Subscription, c *completion, def *flow.Definition, includeUsage bool) error {
	defer s.streaming()()
	cs := &chatStream{eventStream: s.eventStream(w), c: c, speaks: lastSpeakers(def), calls: &s.sent}
	if includeUsage {
		cs.usage = nullUsage
	}
	started := false
	for ev := range sub.Events(r.Context()) {
		var err error
		if !started {
			// The chunks' id is the run's: headers and the first chunk
			// wait for the run's first event.
			rs, ok := ev.Data.(flow.RunStart)
			if !ok {
				return fmt.Errorf("run on instance %s began with %s, not run_start", c.instance, ev.Name)
			}
			started, c.id = true, "chatcmpl-"+rs.RunID
			err = cs.start()
		} else {
			err = cs.event(ev, !sub.Buffered())
		}
		if err != nil {
			s.logger().Debug("stream client dropped", "instance", c.instance, "event", ev.ID, "err", err)
			return nil
		}
		if cs.ended {
			if cs.diverged {
				// The engine's partials add up to their step's response:
				// this is a defect, and the client was told.
				s.logger().Error("streamed text is not the start of the run's response", "instance", c.instance)
			}
			return nil
		}
	}
	if !started {
		return fmt.Errorf("run on instance %s interrupted: %w", c.instance, flow.ErrClosed)
	}
	if r.Context().Err() == nil { // the engine stopped the run, at shutdown
		cs.end(&openAIError{Status: http.StatusServiceUnavailable, Code: "shutting_down",
			Message: "The server is shutting down; the run resumes when it starts again (instance " + c.instance + ")."})
	}
	return nil
}

// chatStream writes one run's chunks.
type chatStream struct {
	*eventStream
	c      *completion
	calls  *callIndex // where the calls sent go
	speaks map[string]bool
	usage  any // on every chunk but the usage chunk: left out, or null
	frame  []byte

	sent      strings.Builder // the answer's text sent so far
	streaming string          // the step whose text is being sent
	runErr    *flow.ErrorData
	ended     bool // [DONE] was sent
	diverged  bool // the text sent was not the start of done's response
}

// start sends the headers and the first chunk, at once.
func (cs *chatStream) start() error {
	cs.header()
	return cs.send(cs.chunk(roleDelta, nil), true)
}

// event takes the run's next event; flush says nothing else is waiting.
func (cs *chatStream) event(ev flow.Event, flush bool) error {
	switch d := ev.Data.(type) {
	case flow.Partial:
		if !cs.speaks[d.Node] || cs.streaming != "" && cs.streaming != d.StepID || d.Delta == "" {
			return nil
		}
		cs.streaming = d.StepID
		cs.sent.WriteString(d.Delta)
		return cs.send(cs.chunk(content(d.Delta), nil), flush)
	case flow.ErrorData:
		cs.runErr = &d
	case flow.Done:
		reason, e := cs.c.outcome(d, cs.runErr)
		if e == nil && !strings.HasPrefix(d.Response, cs.sent.String()) {
			cs.diverged = true
			e = &openAIError{Status: http.StatusInternalServerError, Code: "internal",
				Message: "The text streamed so far is not the flow's answer; read instance " + cs.c.instance + " for it."}
		}
		if e != nil {
			return cs.end(e)
		}
		cs.calls.add(cs.c.flow, cs.c.instance, d.ToolCalls)
		for i, call := range toolCallsOf(d.ToolCalls) {
			call.Index = &i
			delta, _ := json.Marshal(map[string][]openAIToolCall{"tool_calls": {call}})
			if err := cs.send(cs.chunk(delta, nil), false); err != nil {
				return err
			}
		}
		if rest := d.Response[cs.sent.Len():]; rest != "" && len(d.ToolCalls) == 0 {
			if err := cs.send(cs.chunk(content(rest), nil), false); err != nil {
				return err
			}
		}
		if err := cs.send(cs.chunk(emptyDelta, &reason), false); err != nil {
			return err
		}
		if cs.usage != nil {
			last := chatChunk{ID: cs.c.id, Object: "chat.completion.chunk", Created: cs.c.created, Model: cs.c.model,
				Choices: []chunkChoice{}, Usage: usageOf(d.Usage)}
			if err := cs.send(last, false); err != nil {
				return err
			}
		}
		return cs.end(nil)
	}
	return nil
}

func (cs *chatStream) chunk(delta json.RawMessage, finish *string) chatChunk {
	return chatChunk{ID: cs.c.id, Object: "chat.completion.chunk", Created: cs.c.created, Model: cs.c.model, Usage: cs.usage,
		Choices: []chunkChoice{{Delta: delta, FinishReason: finish}}}
}

// content is a delta of the answer's text.
func content(text string) json.RawMessage {
	b, _ := json.Marshal(struct {
		Content string `json:"content"`
	}{text})
	return b
}

// send writes one chunk as "data: JSON", within the write timeout.
func (cs *chatStream) send(v any, flush bool) error {
	data, err := json.Marshal(v)
	if err != nil {
		return err
	}
	cs.frame = append(append(append(cs.frame[:0], "data: "...), data...), "\n\n"...)
	return cs.write(cs.frame, flush)
}

// end sends an error chunk, if there is an error, and data: [DONE].
func (cs *chatStream) end(e *openAIError) error {
	cs.ended = true
	if e != nil {
		if err := cs.send(map[string]*openAIError{"error": e}, false); err != nil {
			return err
		}
	}
	return cs.write([]byte("data: [DONE]\n\n"), true)
}

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

	"superego/engine"
	"superego/flow"
	"superego/gateway"
)

// This file is the server's face as a model (package gateway speaks the
// protocols): a flow stands in for a model of OpenAI's Chat Completions
// and Responses APIs and of Anthropic's Messages API, so that an agent
// framework talks through its superegos by changing its base URL. Its
// "client" agent's model gets the client's request as the client wrote
// it, less what a judge refused or withheld.

// MaxModelBody is the largest body the model routes accept: a coding
// agent's conversation, with its tool results and images, is long.
const MaxModelBody = 16 << 20

// modelRoutes are the routes under /v1. With APIKeys set, each needs one.
func (s *Server) modelRoutes(r chi.Router) {
	r.Use(s.requireAPIKey)
	r.Get("/models", s.handler(s.listModels))
	r.Post("/chat/completions", s.model(gateway.Chat))
	r.Post("/responses", s.model(gateway.Responses))
	r.Post("/messages", s.model(gateway.Messages))
	r.Post("/messages/count_tokens", s.modelHandler(gateway.Messages, s.countTokens))
	r.NotFound(s.modelHandler("", func(w http.ResponseWriter, r *http.Request) error {
		return &gateway.Error{Status: http.StatusNotFound, Code: "unknown_url",
			Message: "Unknown request URL: " + r.Method + " " + r.URL.Path + ". Under /v1 this server answers GET /v1/models, POST /v1/chat/completions, POST /v1/responses, POST /v1/messages and POST /v1/messages/count_tokens."}
	}))
	r.MethodNotAllowed(s.modelHandler("", func(w http.ResponseWriter, r *http.Request) error {
		return &gateway.Error{Status: http.StatusMethodNotAllowed, Code: "method_not_allowed", Message: r.Method + " is not allowed on " + r.URL.Path}
	}))
}

// wireOf is the protocol a request under /v1 speaks, for its errors:
// Anthropic's for /v1/messages and for a request with anthropic-version
// or x-api-key, OpenAI's otherwise.
func wireOf(r *http.Request, wire string) string {
	if wire == "" && (strings.HasPrefix(r.URL.Path, "/v1/messages") || r.Header.Get("Anthropic-Version") != "" || r.Header.Get("X-Api-Key") != "") {
		return gateway.Messages
	}
	return wire
}

// modelHandler adapts a handler of a model route, writing its error in
// the protocol's shape.
func (s *Server) modelHandler(wire string, h func(w http.ResponseWriter, r *http.Request) error) http.HandlerFunc {
	return s.adapt(h, func(w http.ResponseWriter, r *http.Request, err error) {
		gateway.WriteError(w, wireOf(r, wire), s.asModelError(r, err))
	})
}

// asModelError is any error as a model route answers it, with the status
// and code apiError gives it.
func (s *Server) asModelError(r *http.Request, err error) *gateway.Error {
	var ge *gateway.Error
	if errors.As(err, &ge) {
		return ge
	}
	e := s.apiError(r, err)
	ge = &gateway.Error{Status: e.Status, Code: e.Code, Message: e.Message}
	if len(e.Fields) > 0 {
		f := e.Fields[0]
		ge.Param, ge.Code, ge.Message = f.Field, "invalid_value", fmt.Sprintf("Invalid '%s': %s.", f.Field, f.Message)
	}
	return ge
}

// key is the request's API key: a bearer token, or Anthropic's x-api-key.
func key(r *http.Request) (string, bool) {
	if k := strings.TrimSpace(r.Header.Get("X-Api-Key")); k != "" {
		return k, true
	}
	return bearer(r)
}

// requireAPIKey lets a request through when APIKeys is empty or it carries
// one of them; it compares with every key, in constant time, and never
// repeats what it was sent.
func (s *Server) requireAPIKey(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if len(s.APIKeys) == 0 {
			next.ServeHTTP(w, r)
			return
		}
		token, ok := key(r)
		if !ok || !oneOf(token, s.APIKeys) {
			msg := "Incorrect API key provided: it is not one of the server's SUPEREGO_API_KEYS."
			if !ok {
				msg = "You didn't provide an API key: send one of the server's SUPEREGO_API_KEYS as Authorization: Bearer KEY, or x-api-key: KEY."
			}
			gateway.WriteError(w, wireOf(r, ""), &gateway.Error{Status: http.StatusUnauthorized, Code: "invalid_api_key", Message: msg})
			return
		}
		next.ServeHTTP(w, r)
	})
}

// listModels serves GET /v1/models: one model per flow, its id the flow's,
// in Anthropic's list format for a request with anthropic-version, in
// OpenAI's otherwise. A flow has no creation time: created is 0.
func (s *Server) listModels(w http.ResponseWriter, r *http.Request) error {
	ids := slices.Sorted(maps.Keys(s.Engine.Flows))
	if r.Header.Get("Anthropic-Version") != "" {
		data := []map[string]string{}
		for _, id := range ids {
			data = append(data, map[string]string{"type": "model", "id": id, "display_name": s.Engine.Flows[id].Def.Name, "created_at": "1970-01-01T00:00:00Z"})
		}
		first, last := "", ""
		if len(ids) > 0 {
			first, last = ids[0], ids[len(ids)-1]
		}
		writeJSON(w, http.StatusOK, map[string]any{"data": data, "has_more": false, "first_id": first, "last_id": last})
		return nil
	}
	type model struct {
		ID      string `json:"id"`
		Object  string `json:"object"`
		Created int64  `json:"created"`
		OwnedBy string `json:"owned_by"`
	}
	data := []model{}
	for _, id := range ids {
		data = append(data, model{ID: id, Object: "model", OwnedBy: "superego"})
	}
	writeJSON(w, http.StatusOK, struct {
		Object string  `json:"object"`
		Data   []model `json:"data"`
	}{"list", data})
	return nil
}

// readModelBody reads a model route's body.
func readModelBody(w http.ResponseWriter, r *http.Request) ([]byte, error) {
	if mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type")); err != nil || mt != "application/json" {
		return nil, &gateway.Error{Status: http.StatusUnsupportedMediaType, Code: "unsupported_media_type", Message: "Send the body as JSON, with Content-Type: application/json."}
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, MaxModelBody))
	if err != nil {
		var tooBig *http.MaxBytesError
		var netErr net.Error
		switch {
		case errors.As(err, &tooBig):
			return nil, &gateway.Error{Status: http.StatusRequestEntityTooLarge, Code: "body_too_large", Message: fmt.Sprintf("The body is over %d bytes.", MaxModelBody)}
		case errors.As(err, &netErr) && netErr.Timeout():
			return nil, &gateway.Error{Status: http.StatusRequestTimeout, Code: "request_timeout", Message: "The body did not arrive in time."}
		}
		return nil, fmt.Errorf("read a model request: %w", err)
	}
	// The body is read: the server's read timeout, which bounded it, must
	// not cut the run that follows.
	http.NewResponseController(w).SetReadDeadline(time.Time{})
	return body, nil
}

// forwarded are the headers of a protocol's request that an upstream of
// the same protocol is sent too: they change what it may answer (a beta
// feature), as the body's fields do.
var forwarded = map[string][]string{gateway.Messages: {"Anthropic-Beta", "Anthropic-Version"}}

// model serves a model route of the protocol: a run of the flow its
// request names, on a new instance whose history is the request's
// conversation; or, where the conversation ends with the results of the
// calls an instance waits for, a run that goes on with that instance.
func (s *Server) model(wire string) http.HandlerFunc {
	return s.modelHandler(wire, func(w http.ResponseWriter, r *http.Request) error {
		body, err := readModelBody(w, r)
		if err != nil {
			return err
		}
		req, err := gateway.Read(wire, body)
		if err != nil {
			return err
		}
		owner := s.owner(r)
		if wire == gateway.Responses {
			if body, err = s.resolve(r, req, owner); err != nil {
				return err
			}
		}
		flowID, upstream, _ := strings.Cut(req.Model, "@")
		f := s.Engine.Flows[flowID]
		if f == nil {
			return &gateway.Error{Status: http.StatusNotFound, Param: "model", Code: "model_not_found",
				Message: fmt.Sprintf("The model `%s` does not exist: a model is a flow of this server, and GET /v1/models lists them.", req.Model)}
		}
		opts, err := s.clientOptions(req, f.Def, upstream)
		if err != nil {
			return err
		}
		dropped := s.dropped(req, f.Def, upstream)
		if f.Def.ClientAgent() == nil {
			var refused *gateway.Error
			if refused, dropped = req.Unused(); refused != nil {
				return refused
			}
		}
		if opts.Client != nil {
			opts.Client.Wire, opts.Client.Body = wire, body
			for _, h := range forwarded[wire] {
				if v := r.Header.Get(h); v != "" {
					if opts.Client.Header == nil {
						opts.Client.Header = map[string]string{}
					}
					opts.Client.Header[h] = v
				}
			}
		}
		picks, err := readPicks(req.Constitutions)
		if err != nil {
			return err
		}
		if opts.Stack, err = s.stackFor(r, picks); err != nil {
			return err
		}
		opts.Owner = owner
		var sub *engine.Subscription
		if results := req.Results(); len(results) > 0 && opts.Client != nil {
			answers := make([]flow.ClientResult, len(results))
			for i, res := range results {
				answers[i] = flow.ClientResult{ToolCallID: res.CallID, Output: res.Output}
			}
			id, err := s.waitingFor(r, flowID, owner, answers)
			if err != nil {
				return err
			}
			if id != "" {
				opts.Results = answers
				if sub, err = s.Engine.Start(r.Context(), engine.Request{FlowID: flowID, InstanceID: id, Continue: true, Options: opts}); err != nil {
					return err
				}
			}
		}
		if sub == nil {
			prior, input := transcript(req, opts.Client != nil)
			if sub, err = s.Engine.Start(r.Context(), engine.Request{FlowID: flowID, Prior: prior, Input: input, Options: opts}); err != nil {
				return err
			}
		}
		defer sub.Close()
		// The instance is the request's id, where clients show one: Claude
		// Code prints request-id, OpenAI's clients and Codex x-request-id.
		for _, h := range []string{"X-Superego-Instance-Id", "Request-Id", "X-Request-Id"} {
			w.Header().Set(h, sub.Instance)
		}
		if len(dropped) > 0 {
			w.Header().Set("X-Superego-Dropped", strings.Join(dropped, ", "))
		}
		a := &answering{s: s, req: req, sub: sub, flow: flowID, def: f.Def,
			answer: gateway.Answer{Model: req.Model, Created: time.Now().Unix()}}
		if req.Stream {
			return a.stream(w, r)
		}
		return a.collect(w, r)
	})
}

// readPicks reads the request's constitutions. A field other than name and
// adherence is refused: no text goes into a stack.
func readPicks(raw json.RawMessage) ([]flow.Pick, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	var picks []flow.Pick
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&picks); err != nil {
		return nil, &gateway.Error{Status: http.StatusBadRequest, Param: "constitutions", Code: "invalid_type",
			Message: fmt.Sprintf(`Invalid 'constitutions': expected an array of {"name", "adherence"} objects (%s).`, strings.TrimPrefix(err.Error(), "json: "))}
	}
	return picks, nil
}

// transcript is a new instance's conversation before its input, as the
// flow's judges read it: in a flow with a client agent, the client's
// instructions (marked as the client's, which a judge reads as untrusted
// context; no other flow's node reads them at all), then the text of each
// user and assistant message before the input; and the input, the user's
// last message.
func transcript(req *gateway.Request, client bool) ([]flow.Step, string) {
	at, input := req.Input()
	var prior []flow.Step
	if instructions := req.Instructions(); instructions != "" && client {
		prior = append(prior, flow.Step{Role: flow.RoleSystem, AgentID: flow.ClientInstructions, Response: instructions})
	}
	for _, it := range req.Items[:at] {
		if text := it.Text(); text != "" && (it.Role == gateway.RoleUser || it.Role == gateway.RoleAssistant) {
			prior = append(prior, flow.Step{Role: it.Role, Response: text})
		}
	}
	if strings.TrimSpace(input) == "" {
		input = "(an image)"
	}
	return prior, input
}

// dropped are the hints of the request that its flow's client agent's
// model is not sent: all of them where it speaks another protocol.
func (s *Server) dropped(req *gateway.Request, def *flow.Definition, upstream string) []string {
	agent := def.ClientAgent()
	if agent == nil {
		return nil
	}
	spec := agent.Model
	if upstream != "" {
		spec = upstream
	}
	if spec == "" {
		spec = s.Model
	}
	if wireOfModel(spec) == req.Wire {
		return nil
	}
	return req.Params.Hints
}

// wireOfModel is the protocol of a model's provider.
func wireOfModel(spec string) string {
	switch provider, _, _ := strings.Cut(spec, ":"); provider {
	case "anthropic":
		return gateway.Messages
	case "openai", "ollama":
		return gateway.Chat
	}
	return ""
}

// clientOptions are the run's options for the request's tools and model:
// the client's tools for the flow's "client" agent, checked against it,
// and the upstream model of "FLOW@provider:model", one the operator allows.
func (s *Server) clientOptions(req *gateway.Request, def *flow.Definition, upstream string) (flow.RunOptions, error) {
	var opts flow.RunOptions
	agent := def.ClientAgent()
	if agent == nil {
		switch {
		case len(req.Tools) > 0:
			return opts, &gateway.Error{Status: http.StatusBadRequest, Param: "tools", Code: "unsupported_parameter", Message: "Unsupported parameter: 'tools': no agent of this flow takes a client's tools; its nodes call their own."}
		case upstream != "":
			return opts, invalidParam("model", "Invalid value: 'model': %q has no agent that takes a client's tools, whose model a request may choose.", req.Model)
		case req.Choice != nil && req.Choice.Mode != "none" && req.Choice.Mode != "auto":
			return opts, &gateway.Error{Status: http.StatusBadRequest, Param: "tool_choice", Code: "unsupported_parameter", Message: "Unsupported parameter: 'tool_choice': no agent of this flow takes a client's tools."}
		}
		return opts, nil
	}
	tools := make([]flow.ClientTool, len(req.Tools))
	for i, t := range req.Tools {
		if slices.ContainsFunc(agent.Tools, func(own string) bool { return engine.ToolMatches(own, t.Name) }) {
			at := gateway.ToolParam(req.Wire, i)
			return opts, invalidParam(at, "Invalid '%s': %q is a tool of the flow's agent %s; give the client's tool another name.", at, t.Name, agent.Name)
		}
		tools[i] = flow.ClientTool{Name: t.Name, Description: t.Description, Parameters: t.Parameters}
	}
	c := &flow.ClientTools{Tools: tools, Parallel: req.Parallel}
	if ch := req.Choice; ch != nil {
		switch {
		case ch.Mode == "tool" && !slices.ContainsFunc(req.Tools, func(t gateway.Tool) bool { return t.Name == ch.Name }):
			return opts, invalidParam("tool_choice", "Invalid value: 'tool_choice' names %q, which is not one of 'tools'.", ch.Name)
		case ch.Mode == "tool" && agent.Denies(ch.Name):
			return opts, invalidParam("tool_choice", "Invalid value: 'tool_choice' names %q, which a deny rule of the flow's agent %s refuses.", ch.Name, agent.Name)
		case ch.Mode == "required" && len(req.Tools) == 0:
			return opts, invalidParam("tool_choice", "Invalid value: 'tool_choice' is \"required\", and 'tools' is empty.")
		}
		c.Choice = ch.ChatJSON()
	}
	opts.Client = c
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
			return opts, invalidParam("model", "Invalid value: 'model' asks for %q for the agent %s; this server allows %s.", upstream, agent.Name, list)
		}
		opts.Variant = &flow.Variant{Models: map[string]string{agent.Name: upstream}}
	}
	return opts, nil
}

func invalidParam(param, format string, args ...any) *gateway.Error {
	return &gateway.Error{Status: http.StatusBadRequest, Param: param, Code: "invalid_value", Message: fmt.Sprintf(format, args...)}
}

// owner is what binds an instance's calls, and its stored responses, to
// the API key that made them: a hash of the key, "" where /v1 needs none.
func (s *Server) owner(r *http.Request) string {
	if len(s.APIKeys) == 0 {
		return ""
	}
	token, _ := key(r)
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
	answers := func(u flow.ToolUse) bool {
		return slices.ContainsFunc(results, func(c flow.ClientResult) bool { return c.ToolCallID == u.ID })
	}
	for _, id := range ids {
		events, err := s.Engine.Store.Events(r.Context(), id, 0)
		if err != nil {
			return "", err
		}
		st := flow.Replay(events)
		waiting := engine.WaitingCalls(st.Steps)
		if !slices.ContainsFunc(waiting, answers) {
			continue
		}
		if subtle.ConstantTimeCompare([]byte(st.Options.Owner), []byte(owner)) != 1 {
			return "", &gateway.Error{Status: http.StatusNotFound, Param: "messages", Code: "tool_call_not_found",
				Message: "The tool results answer calls this server did not send to this API key."}
		}
		for _, u := range waiting {
			if !answers(u) {
				return "", &gateway.Error{Status: http.StatusBadRequest, Param: "messages", Code: "missing_tool_result",
					Message: fmt.Sprintf("Invalid 'messages': instance %s waits for the results of every call it sent; tool_call_id %q has none.", id, u.ID)}
			}
		}
		return id, nil
	}
	return "", nil
}

// answering is a run's answer being made for a model route's client.
type answering struct {
	s      *Server
	req    *gateway.Request
	sub    *engine.Subscription
	flow   string
	def    *flow.Definition
	answer gateway.Answer // its id, model and time, once the run has started
}

// started takes the run's start.
func (a *answering) started(rs flow.RunStart) {
	a.answer.ID = gateway.AnswerID(a.req.Wire, rs.InstanceID, rs.RunID)
}

// collect waits for the run's end and answers with one object. If the
// client goes away, the run goes on all the same.
func (a *answering) collect(w http.ResponseWriter, r *http.Request) error {
	var done *flow.Done
	var runErr *flow.ErrorData
	for ev := range a.sub.Events(r.Context()) {
		switch d := ev.Data.(type) {
		case flow.RunStart:
			a.started(d)
		case flow.ErrorData:
			runErr = &d
		case flow.Done:
			done = &d
		}
	}
	if done == nil {
		// Stopped by shutdown, or the client went away: the run goes on,
		// or resumes at the next start.
		return fmt.Errorf("run on instance %s interrupted: %w", a.sub.Instance, flow.ErrClosed)
	}
	a.s.deadline(w)
	ans, e := a.end(*done, runErr)
	if e != nil {
		return e
	}
	writeJSON(w, http.StatusOK, a.req.Object(ans))
	return nil
}

// stopOf is the stop reason a client is told for each status of a run
// that answers; a failed or cancelled run answers with an error instead.
var stopOf = map[string]string{
	flow.StatusCompleted:          gateway.StopEnd,
	flow.StatusAwaitingInput:      gateway.StopEnd, // the answer is the superego's question
	flow.StatusAwaitingReview:     gateway.StopEnd, // a person must decide; the instance waits
	flow.StatusBlocked:            gateway.StopRefusal,
	flow.StatusAwaitingToolResult: gateway.StopCalls, // the client runs them, and answers in its next request
	flow.StatusIterationLimit:     gateway.StopLength,
}

// end is the answer of a run that ended as done says, or the error a
// client is told instead: a code, the node and the instance, never a
// model's name or an upstream's words, which the log and the research view
// keep.
func (a *answering) end(done flow.Done, runErr *flow.ErrorData) (gateway.Answer, *gateway.Error) {
	instance := a.sub.Instance
	switch done.Status {
	case flow.StatusFailed:
		e := &gateway.Error{Status: http.StatusBadGateway, Code: "internal", Instance: instance}
		if runErr != nil {
			e.Code, e.Node = runErr.Code, runErr.Node
		}
		node := a.def.Graph.Nodes[e.Node]
		switch {
		case e.Code == "storage":
			e.Status = http.StatusInsufficientStorage // the server's disk, not an upstream
		case e.Code == "timeout":
			e.Status = http.StatusGatewayTimeout
		case node != nil && node.Type == flow.Superego && (e.Code == "llm_unavailable" || e.Code == "llm_bad_output"):
			e.Code = "judge_error"
		case node != nil && (e.Code == "llm_unavailable" || e.Code == "llm_bad_output"):
			e.Code = "upstream_error"
		}
		at := ""
		if e.Node != "" {
			at = " at node " + e.Node
		}
		e.Message = fmt.Sprintf("The flow's run failed%s (instance %s): %s.", at, instance, e.Code)
		return gateway.Answer{}, e
	case flow.StatusCancelled:
		return gateway.Answer{}, &gateway.Error{Status: http.StatusConflict, Code: "cancelled", Instance: instance,
			Message: "The flow's run was cancelled (instance " + instance + ")."}
	}
	stop, ok := stopOf[done.Status]
	if !ok {
		return gateway.Answer{}, &gateway.Error{Status: http.StatusInternalServerError, Code: "internal", Instance: instance, Message: "The flow's run ended " + done.Status + "."}
	}
	ans := a.answer
	ans.Text, ans.Stop = done.Response, stop
	for _, c := range done.ToolCalls {
		ans.Calls = append(ans.Calls, gateway.Call{ID: c.ToolCallID, Name: c.ToolName, Args: string(c.Input)})
	}
	a.s.sent.add(a.flow, instance, done.ToolCalls)
	if u := done.Usage; u != nil {
		// Every model call of the run, those of speculative calls it
		// discarded included: all were spent.
		ans.Usage = gateway.Usage{Input: u.PromptTokens + u.SpeculativePromptTokens, Output: u.CompletionTokens + u.SpeculativeCompletionTokens}
	}
	return ans, nil
}

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

// stream answers with the protocol's stream of events. They carry only
// released text: the text of a node that speaks last (lastSpeakers) as it
// is released, anything else once done says what the answer is. If the
// client goes away, the run goes on all the same.
func (a *answering) stream(w http.ResponseWriter, r *http.Request) error {
	defer a.s.streaming()()
	es := a.s.eventStream(w)
	started := false // the headers and the first frames have gone: flush when nothing else waits
	send := func(frame []byte, flush bool) error { return es.write(frame, flush && (!started || !a.sub.Buffered())) }
	var st gateway.Stream
	speaks := lastSpeakers(a.def)
	var sent strings.Builder
	streaming := "" // the step whose text is being sent
	var runErr *flow.ErrorData
	for ev := range a.sub.Events(r.Context()) {
		var err error
		switch d := ev.Data.(type) {
		case flow.RunStart:
			a.started(d)
			st = a.req.NewStream(send, a.answer)
			es.header()
			err = st.Start()
			started = true
		case flow.Partial:
			if st == nil || !speaks[d.Node] || streaming != "" && streaming != d.StepID || d.Delta == "" {
				continue
			}
			streaming = d.StepID
			sent.WriteString(d.Delta)
			err = st.Text(d.Delta)
		case flow.ErrorData:
			runErr = &d
		case flow.Done:
			ans, e := a.end(d, runErr)
			if st == nil {
				// The run ended before it began (its start could not be
				// saved): the answer is an error, whole.
				if e == nil {
					e = &gateway.Error{Status: http.StatusInternalServerError, Code: "internal", Instance: a.sub.Instance, Message: "The flow's run ended before it began."}
				}
				return e
			}
			if e == nil && !strings.HasPrefix(ans.Text, sent.String()) {
				// The engine's partials add up to their step's response:
				// this is a defect, and the client is told.
				a.s.logger().Error("streamed text is not the start of the run's response", "instance", a.sub.Instance)
				e = &gateway.Error{Status: http.StatusInternalServerError, Code: "internal", Instance: a.sub.Instance,
					Message: "The text streamed so far is not the flow's answer; read instance " + a.sub.Instance + " for it."}
			}
			if e != nil {
				err = st.Fail(e)
			} else {
				ans.Text = ans.Text[sent.Len():]
				err = st.End(ans)
			}
			if err != nil {
				a.s.logger().Debug("stream client dropped", "instance", a.sub.Instance, "err", err)
			}
			return nil
		}
		if err != nil {
			a.s.logger().Debug("stream client dropped", "instance", a.sub.Instance, "event", ev.ID, "err", err)
			return nil
		}
	}
	if st == nil {
		return fmt.Errorf("run on instance %s interrupted: %w", a.sub.Instance, flow.ErrClosed)
	}
	if r.Context().Err() == nil { // the engine stopped the run, at shutdown
		st.Fail(&gateway.Error{Status: http.StatusServiceUnavailable, Code: "shutting_down", Instance: a.sub.Instance,
			Message: "The server is shutting down; the run resumes when it starts again (instance " + a.sub.Instance + ")."})
	}
	return nil
}

// resolve makes a Responses request whole: the conversation of its
// previous_response_id before its input, and each item_reference replaced
// by the item it names. Responses and items are this server's, of the
// same key, and stored (store was not false); any other is a 404. It
// returns the request's body as the run records it.
func (s *Server) resolve(r *http.Request, req *gateway.Request, owner string) ([]byte, error) {
	var before []json.RawMessage
	if id := req.PreviousResponseID; id != "" {
		st, err := s.stored(r, id, owner, "previous_response_id")
		if err != nil {
			return nil, err
		}
		before = append(gateway.ResponsesInput(st.body), st.output...)
	}
	refs := map[string]json.RawMessage{}
	for _, id := range req.References() {
		st, err := s.stored(r, id, owner, "input")
		if err != nil {
			return nil, err
		}
		i := slices.IndexFunc(st.output, func(item json.RawMessage) bool {
			var it struct {
				ID string `json:"id"`
			}
			json.Unmarshal(item, &it)
			return it.ID == id
		})
		if i < 0 {
			return nil, &gateway.Error{Status: http.StatusNotFound, Param: "input", Code: "not_found", Message: fmt.Sprintf("Item with id '%s' not found.", id)}
		}
		refs[id] = st.output[i]
	}
	if err := req.Resolve(before, refs); err != nil {
		return nil, err
	}
	return req.ResponsesBody()
}

// storedResponse is a response of this server's as a later request reads
// it: the body its run recorded, and its output items.
type storedResponse struct {
	body   []byte
	output []json.RawMessage
}

// stored finds the response that id, a response's or an output item's id,
// names: a 404 where there is none for this key, or where it was not
// stored; a 400 where its run has not answered yet.
func (s *Server) stored(r *http.Request, id, owner, param string) (storedResponse, error) {
	notFound := &gateway.Error{Status: http.StatusNotFound, Param: param, Code: "not_found", Message: fmt.Sprintf("Response or item with id '%s' not found.", id)}
	instance, run, ok := gateway.ResponseOf(id)
	if !ok {
		return storedResponse{}, notFound
	}
	events, err := s.Engine.Store.Events(r.Context(), instance, 0)
	if errors.Is(err, flow.ErrNotFound) {
		return storedResponse{}, notFound
	}
	if err != nil {
		return storedResponse{}, err
	}
	var start *flow.RunStart
	for _, ev := range events {
		switch d := ev.Data.(type) {
		case flow.RunStart:
			if start != nil {
				return storedResponse{}, notFound // the run ended with no answer
			}
			if d.RunID == run {
				start = &d
			}
		case flow.Done:
			if start == nil {
				continue
			}
			c := start.Client
			if c == nil || c.Wire != gateway.Responses || subtle.ConstantTimeCompare([]byte(start.Owner), []byte(owner)) != 1 || gateway.NotStored(c.Body) {
				return storedResponse{}, notFound
			}
			ans := gateway.Answer{ID: gateway.AnswerID(gateway.Responses, instance, run), Text: d.Response}
			for _, call := range d.ToolCalls {
				ans.Calls = append(ans.Calls, gateway.Call{ID: call.ToolCallID, Name: call.ToolName, Args: string(call.Input)})
			}
			return storedResponse{body: c.Body, output: gateway.ResponseOutput(ans)}, nil
		}
	}
	if start != nil {
		return storedResponse{}, invalidParam(param, "Invalid '%s': response %s has not answered yet.", param, id)
	}
	return storedResponse{}, notFound
}

// countTokens serves POST /v1/messages/count_tokens: the tokens of the
// request as the flow's client agent would send it, estimated at four
// characters a token.
func (s *Server) countTokens(w http.ResponseWriter, r *http.Request) error {
	body, err := readModelBody(w, r)
	if err != nil {
		return err
	}
	req, err := gateway.ReadCountTokens(body)
	if err != nil {
		return err
	}
	flowID, _, _ := strings.Cut(req.Model, "@")
	f := s.Engine.Flows[flowID]
	if f == nil {
		return &gateway.Error{Status: http.StatusNotFound, Param: "model", Code: "model_not_found", Message: fmt.Sprintf("model: %s is no flow of this server", req.Model)}
	}
	n := req.Tokens()
	if agent := f.Def.ClientAgent(); agent != nil {
		n += (len(agent.SystemPrompt) + 3) / 4
	}
	writeJSON(w, http.StatusOK, map[string]int{"input_tokens": n})
	return nil
}

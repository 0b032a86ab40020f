// Package api is superego's HTTP interface: its routes, its Server-Sent
// Events and its JSON errors (docs/flows.md, docs/reference.md), and the
// guarded model's routes under /v1 (docs/gateway.md).
package api

import (
	"bytes"
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"mime"
	"net"
	"net/http"
	"net/url"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/go-chi/chi/v5/middleware"
	"github.com/go-playground/validator/v10"

	"superego/engine"
	"superego/experiment"
	"superego/flow"
	"superego/tools"
)

// MaxBody is the largest request body accepted.
const MaxBody = 1 << 20

// Server serves the flow engine over HTTP. Model is the default model's
// name for /healthz; AdminToken, when set, opens the research view;
// APIKeys, when set, are the bearer tokens /v1/* accepts (docs/gateway.md).
type Server struct {
	Engine *engine.Engine
	// Experiments runs experiments (docs/experiments.md) on Engine; nil: the
	// experiment routes answer 404.
	Experiments *experiment.Lab
	Workspaces  *tools.Workspaces // for /flow/instances/{id}/files/…; nil: none
	Refused     []flow.Refused
	Model       string
	ModelNote   string     // for /healthz, beside Model: what the model is, where its name does not say
	MCP         *tools.MCP // for /healthz; nil: none
	AdminToken  string
	APIKeys     []string
	// UpstreamModels are the models a /v1 request may choose for a flow's
	// "client" agent, as "provider:model"; none: only the agent's own.
	UpstreamModels []string
	// ExperimentsAuth says who may start, resume, replay or cancel an
	// experiment, which makes paid model calls: "" or "open", anyone;
	// "keys", a request with one of APIKeys or the AdminToken; "admin",
	// one with the AdminToken.
	ExperimentsAuth string
	Log             *slog.Logger
	// Users, where set, are the keys of SUPEREGO_API_KEYS_FILE and the
	// stacks of constitutions they bring, which name the engine's library
	// (Engine.Exec.Library).
	Users map[string]User
	// WriteTimeout bounds each write to a client (0: 30s); MaxStreams the
	// streams of instances (…/stream, EventSource reconnects) open at once
	// (0: 1024); streams that run a flow count as runs.
	WriteTimeout time.Duration
	MaxStreams   int
	// Metrics, where set, serves GET /metrics (docs/operations.md); Streams, where
	// set, counts the clients streaming events.
	Metrics http.Handler
	Streams Gauge

	frames    frameCache
	sent      callIndex // the calls /v1 clients were sent, by instance
	streamsMu sync.Mutex
	streams   int
}

var validate = func() *validator.Validate {
	v := validator.New(validator.WithRequiredStructEnabled())
	v.RegisterTagNameFunc(func(f reflect.StructField) string {
		return strings.Split(f.Tag.Get("json"), ",")[0]
	})
	return v
}()

// Handler returns the routes. Stream routes get no Timeout or Compress
// middleware: either would hold events back.
func (s *Server) Handler() http.Handler {
	r := chi.NewRouter()
	r.Use(middleware.Recoverer, s.accessLog)
	r.Get("/", static("text/html; charset=utf-8", "web/index.html"))
	r.Get("/openapi.json", static("application/json", "web/openapi.json"))
	r.Get("/healthz", s.handler(s.health))
	r.Get("/metrics", s.handler(s.metrics))
	r.Get("/flows", s.handler(s.listFlows))
	r.Get("/constitutions", s.handler(s.listConstitutions))
	r.Get("/constitutions/{name}", s.handler(s.getConstitution))
	r.Get("/flow/{flow_id}", s.handler(s.getFlow))
	r.Get("/flow/{flow_id}/graph.svg", s.handler(s.graph))
	r.Get("/flow/{flow_id}/graph.mmd", s.handler(s.graph))
	r.Post("/flow/execute", s.handler(s.executePost))
	r.Get("/flow/execute", s.handler(s.executeGet))
	r.Post("/flow/instances", s.handler(s.createInstance))
	r.Get("/flow/instances", s.handler(s.listInstances))
	r.Get("/flow/instances/{id}", s.handler(s.getInstance))
	r.Get("/flow/instances/{id}/stream", s.handler(s.streamInstance))
	r.Post("/flow/instances/{id}/cancel", s.handler(s.cancel))
	r.Get("/flow/instances/{id}/files/*", s.handler(s.file))
	r.Post("/flow/instances/{id}/review", s.handler(s.review))
	r.With(s.experimenter).Post("/experiments", s.handler(s.createExperiment))
	r.Get("/experiments", s.handler(s.listExperiments))
	r.Get("/experiments/{id}", s.handler(s.getExperiment))
	r.Get("/experiments/{id}/events", s.handler(s.experimentEvents))
	r.Get("/experiments/{id}/results.jsonl", s.handler(s.experimentResults))
	r.Get("/experiments/{id}/results.csv", s.handler(s.experimentResultsCSV))
	r.Get("/experiments/{id}/report.{format}", s.handler(s.experimentReport))
	r.Get("/experiments/{id}/compare", s.handler(s.compareExperiment))
	r.With(s.experimenter).Post("/experiments/{id}/cancel", s.handler(s.cancelExperiment))
	r.With(s.experimenter).Post("/experiments/{id}/resume", s.handler(s.resumeExperiment))
	r.With(s.experimenter).Post("/experiments/{id}/replay", s.handler(s.replayExperiment))
	r.Route("/v1", s.modelRoutes) // a flow as a model of OpenAI's and Anthropic's APIs (gateway.go)
	r.NotFound(s.handler(func(w http.ResponseWriter, r *http.Request) error {
		return &Error{Status: http.StatusNotFound, Code: "not_found", Message: "no route " + r.Method + " " + r.URL.Path}
	}))
	r.MethodNotAllowed(s.handler(func(w http.ResponseWriter, r *http.Request) error {
		return &Error{Status: http.StatusMethodNotAllowed, Code: "method_not_allowed", Message: r.Method + " is not allowed on " + r.URL.Path}
	}))
	return r
}

// accessLog logs each request at info level: method, the route's pattern
// (not the path, which may hold an instance id or a file's name, nor the
// query, which may hold a user's input), status and duration.
func (s *Server) accessLog(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ww := middleware.NewWrapResponseWriter(w, r.ProtoMajor)
		start := time.Now()
		next.ServeHTTP(ww, r)
		s.logger().Info("http", "method", r.Method, "route", routeOf(r), "status", ww.Status(), "duration_ms", float64(time.Since(start).Microseconds())/1000)
	})
}

// routeOf is the pattern of the route r matched, as log lines name it.
func routeOf(r *http.Request) string {
	if rc := chi.RouteContext(r.Context()); rc != nil && rc.RoutePattern() != "" {
		return rc.RoutePattern()
	}
	return "unmatched" // a path under /v1 that matched nothing logs as /v1/*
}

// health serves GET /healthz.
func (s *Server) health(w http.ResponseWriter, r *http.Request) error {
	status := "ok"
	if s.Engine.Closed() {
		status = "shutting_down"
	}
	refused := s.Refused
	if refused == nil {
		refused = []flow.Refused{}
	}
	out := map[string]any{"status": status, "model": s.Model, "flows": slices.Sorted(maps.Keys(s.Engine.Flows)), "refused": refused,
		"mcp": s.MCP.States()}
	if s.ModelNote != "" {
		out["model_note"] = s.ModelNote
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

type nodeSummary struct {
	Name    string   `json:"name"`
	Type    string   `json:"type"`
	AgentID string   `json:"agent_id"`
	Tools   []string `json:"tools"`
}

// listFlows serves GET /flows.
func (s *Server) listFlows(w http.ResponseWriter, r *http.Request) error {
	out := []map[string]any{}
	for _, id := range slices.Sorted(maps.Keys(s.Engine.Flows)) {
		def := s.Engine.Flows[id].Def
		nodes := []nodeSummary{}
		for _, name := range slices.Sorted(maps.Keys(def.Graph.Nodes)) {
			n := def.Graph.Nodes[name]
			tools := n.Tools
			if tools == nil {
				tools = []string{}
			}
			nodes = append(nodes, nodeSummary{name, n.Type, n.AgentID, tools})
		}
		out = append(out, map[string]any{"id": id, "name": def.Name, "description": def.Description, "start": def.Graph.Start, "nodes": nodes})
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

// getFlow serves GET /flow/{flow_id}.
func (s *Server) getFlow(w http.ResponseWriter, r *http.Request) error {
	id := chi.URLParam(r, "flow_id")
	f := s.Engine.Flows[id]
	if f == nil {
		return fmt.Errorf("flow %q: %w", id, flow.ErrNotFound)
	}
	writeJSON(w, http.StatusOK, f.Def)
	return nil
}

type executeRequest struct {
	FlowID     string `json:"flow_id" validate:"required"`
	Input      string `json:"input" validate:"required_without=Objective,excluded_with=Objective"`
	InstanceID string `json:"instance_id,omitempty" validate:"omitempty,uuid"`

	// A task for a worker-checker flow, instead of input.
	Objective      string          `json:"objective,omitempty"`
	ExpectedOutput string          `json:"expected_output,omitempty" validate:"excluded_without=Objective"`
	Inputs         json.RawMessage `json:"inputs,omitempty" validate:"excluded_without=Objective"`

	// The user's constitutions, on top of each superego's own (docs/stacks.md).
	Constitutions []flow.Pick `json:"constitutions,omitempty"`
}

// Limits on a task's inputs, which go into the worker's message and so
// into every step of the run.
const (
	maxInputsDepth    = 32
	maxIndentedInputs = 64 << 10 // larger inputs go in compact, which cannot grow
)

// message is the run's input: the input, or the task as the worker's
// message.
func (req *executeRequest) message() (string, error) {
	if req.Objective == "" {
		return req.Input, nil
	}
	var b strings.Builder
	fmt.Fprintf(&b, "Current time: %s\nYour workspace is your working directory: give the workspace tools paths relative to it.\n\nObjective:\n%s\n", time.Now().UTC().Format("2006-01-02 15:04 UTC"), req.Objective)
	if req.ExpectedOutput != "" {
		fmt.Fprintf(&b, "\nExpected output:\n%s\n", req.ExpectedOutput)
	}
	if len(req.Inputs) > 0 {
		if depth(req.Inputs) > maxInputsDepth {
			return "", &Error{Status: http.StatusBadRequest, Code: "invalid_request", Message: "invalid request",
				Fields: []FieldError{{"inputs", fmt.Sprintf("must not nest deeper than %d levels", maxInputsDepth)}}}
		}
		var out bytes.Buffer
		json.Compact(&out, req.Inputs) // valid: the decoder read it
		if out.Len() <= maxIndentedInputs {
			compact := out.Bytes()
			out = bytes.Buffer{}
			json.Indent(&out, compact, "", "  ")
		}
		fmt.Fprintf(&b, "\nInput:\n%s\n", out.String())
	}
	return b.String(), nil
}

// depth is how deep a JSON value's arrays and objects nest; the decoder
// read the value whole already, so its tokens are valid.
func depth(v json.RawMessage) int {
	dec := json.NewDecoder(bytes.NewReader(v))
	deepest, d := 0, 0
	for {
		tok, err := dec.Token()
		if err != nil {
			return deepest
		}
		switch tok {
		case json.Delim('['), json.Delim('{'):
			d++
			deepest = max(deepest, d)
		case json.Delim(']'), json.Delim('}'):
			d--
		}
	}
}

// executePost serves POST /flow/execute.
func (s *Server) executePost(w http.ResponseWriter, r *http.Request) error {
	var req executeRequest
	if err := decode(w, r, &req); err != nil {
		return err
	}
	return s.execute(w, r, req)
}

// executeGet serves GET /flow/execute, the same run for EventSource.
// EventSource reconnects by itself, with Last-Event-ID, whenever a stream
// closes: such a request resumes the instance's stream and never starts the
// run again. Without an instance_id there is nothing to resume, and 204
// tells EventSource to stop.
func (s *Server) executeGet(w http.ResponseWriter, r *http.Request) error {
	q := r.URL.Query()
	req := executeRequest{FlowID: q.Get("flow_id"), Input: q.Get("input"), InstanceID: q.Get("instance_id")}
	if err := check(&req); err != nil {
		return err
	}
	picks, err := picksOf(q.Get("constitutions"))
	if err != nil {
		return err
	}
	req.Constitutions = picks
	if r.Header.Get("Last-Event-ID") != "" {
		if req.InstanceID == "" {
			w.WriteHeader(http.StatusNoContent)
			return nil
		}
		return s.resume(w, r, req.InstanceID)
	}
	return s.execute(w, r, req)
}

func (s *Server) execute(w http.ResponseWriter, r *http.Request, req executeRequest) error {
	message, err := req.message()
	if err != nil {
		return err
	}
	stack, err := s.stackFor(r, req.Constitutions)
	if err != nil {
		return err
	}
	run := engine.Request{FlowID: req.FlowID, InstanceID: req.InstanceID, Input: message, Options: flow.RunOptions{Stack: stack}}
	if wantsJSON(r) {
		return s.collect(w, r, run)
	}
	sub, err := s.Engine.Start(r.Context(), run)
	if err != nil {
		return err
	}
	return s.stream(w, r, sub)
}

// wantsJSON reports whether the client asked for one JSON document rather
// than an event stream.
func wantsJSON(r *http.Request) bool {
	accept := r.Header.Get("Accept")
	return strings.Contains(accept, "application/json") && !strings.Contains(accept, "text/event-stream")
}

// decode reads a JSON request body into v and validates it.
func decode(w http.ResponseWriter, r *http.Request, v any) error {
	if mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type")); err != nil || mt != "application/json" {
		return &Error{Status: http.StatusUnsupportedMediaType, Code: "unsupported_media_type", Message: "send the body as JSON with Content-Type: application/json"}
	}
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, MaxBody))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		var tooBig *http.MaxBytesError
		var typ *json.UnmarshalTypeError
		var netErr net.Error
		switch {
		case errors.As(err, &netErr) && netErr.Timeout():
			return &Error{Status: http.StatusRequestTimeout, Code: "request_timeout", Message: "the body did not arrive in time"}
		case errors.As(err, &tooBig):
			return &Error{Status: http.StatusRequestEntityTooLarge, Code: "body_too_large", Message: fmt.Sprintf("the body is over %d bytes", MaxBody)}
		case errors.As(err, &typ):
			return &Error{Status: http.StatusBadRequest, Code: "invalid_request", Message: "invalid request",
				Fields: []FieldError{{typ.Field, "must be a JSON " + typ.Type.Kind().String()}}}
		}
		return &Error{Status: http.StatusBadRequest, Code: "invalid_json", Message: "the body is not a valid JSON object: " + strings.TrimPrefix(err.Error(), "json: ")}
	}
	if dec.More() {
		return &Error{Status: http.StatusBadRequest, Code: "invalid_json", Message: "the body has data after the JSON object"}
	}
	// The body is read: the server's read timeout, which bounded it, must
	// not cut the run that follows.
	http.NewResponseController(w).SetReadDeadline(time.Time{})
	return check(v)
}

var fieldMessages = map[string]string{
	"required": "is required",
	"uuid":     "must be an instance id (a UUID)",
	"gte":      "must be at least %s",
	"lte":      "must be at most %s",
	// These name another field by its Go name; the JSON name is its lower case.
	"required_without": "is required, unless %s is given",
	"excluded_with":    "cannot be given with %s",
	"excluded_without": "needs %s",
}

// check validates a request struct; every failing field is named.
func check(v any) error {
	err := validate.Struct(v)
	var verrs validator.ValidationErrors
	if !errors.As(err, &verrs) {
		return err
	}
	e := &Error{Status: http.StatusBadRequest, Code: "invalid_request", Message: "invalid request"}
	for _, fe := range verrs {
		msg := fieldMessages[fe.Tag()]
		if strings.Contains(msg, "%s") {
			msg = fmt.Sprintf(msg, strings.ToLower(fe.Param()))
		}
		if msg == "" {
			msg = "is invalid"
		}
		e.Fields = append(e.Fields, FieldError{fe.Field(), msg})
	}
	return e
}

type reviewRequest struct {
	ReviewID string `json:"review_id"`
	Approve  *bool  `json:"approve" validate:"required"`
	Note     string `json:"note"`
}

// review serves POST /flow/instances/{id}/review: a person's answer to a
// review the instance waits for, a supervisor's HUMAN_REVIEW or changes,
// or a tool call (docs/actions.md). With the admin token configured, a tool
// call's review needs it. The run goes on, streamed as execute's is.
func (s *Server) review(w http.ResponseWriter, r *http.Request) error {
	var req reviewRequest
	if err := decode(w, r, &req); err != nil {
		return err
	}
	id := chi.URLParam(r, "id")
	if s.AdminToken != "" && !s.admin(r) {
		_, pending, err := s.reviews(r.Context(), id, true)
		if err != nil {
			return err
		}
		for _, p := range pending {
			if p.Kind == "tool_call" && (req.ReviewID == p.ReviewID || req.ReviewID == "" && len(pending) == 1) {
				return &Error{Status: http.StatusForbidden, Code: "forbidden", Message: "answering a tool call's review needs Authorization: Bearer with the server's SUPEREGO_ADMIN_TOKEN"}
			}
		}
	}
	sub, err := s.Engine.StartReview(r.Context(), id, flow.Review{ReviewID: req.ReviewID, Approve: *req.Approve, Note: req.Note})
	if err != nil {
		return err
	}
	if wantsJSON(r) {
		return s.collectSub(w, r, sub)
	}
	return s.stream(w, r, sub)
}

type createRequest struct {
	FlowID string `json:"flow_id" validate:"required"`
}

// createInstance serves POST /flow/instances.
func (s *Server) createInstance(w http.ResponseWriter, r *http.Request) error {
	var req createRequest
	if err := decode(w, r, &req); err != nil {
		return err
	}
	inst, err := s.Engine.Create(r.Context(), req.FlowID)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusCreated, map[string]string{"instance_id": inst.ID})
	return nil
}

type listQuery struct {
	Limit  int    `json:"limit" validate:"gte=1,lte=1000"`
	FlowID string `json:"flow_id"`
}

// listInstances serves GET /flow/instances; ?experiment=ID and
// ?tag=NAME:VALUE (repeated: all of them) pick instances by their tags.
func (s *Server) listInstances(w http.ResponseWriter, r *http.Request) error {
	q := listQuery{Limit: 50, FlowID: r.URL.Query().Get("flow_id")}
	tags, err := tagFilter(r.URL.Query())
	if err != nil {
		return err
	}
	if l := r.URL.Query().Get("limit"); l != "" {
		n, err := strconv.Atoi(l)
		if err != nil {
			return &Error{Status: http.StatusBadRequest, Code: "invalid_request", Message: "invalid request", Fields: []FieldError{{"limit", "must be a whole number"}}}
		}
		q.Limit = n
	}
	if err := check(&q); err != nil {
		return err
	}
	list, err := s.Engine.Store.List(r.Context(), flow.ListOptions{FlowID: q.FlowID, Limit: q.Limit, Tags: tags})
	if err != nil {
		return err
	}
	if list == nil {
		list = []flow.Summary{}
	}
	writeJSON(w, http.StatusOK, list)
	return nil
}

// tagFilter reads a listing's tags: ?experiment=ID is ?tag=experiment:ID.
func tagFilter(query url.Values) (map[string]string, error) {
	tags := map[string]string{}
	var fields []FieldError
	for _, t := range query["tag"] {
		name, value, ok := strings.Cut(t, ":")
		if !ok || !flow.TagName(name) {
			fields = append(fields, FieldError{"tag", fmt.Sprintf("%q: want NAME:VALUE, NAME letters, digits, _ and - (experiment, condition, label, sample, repeat)", t)})
			continue
		}
		tags[name] = value
	}
	if id := query.Get("experiment"); id != "" {
		tags["experiment"] = id
	}
	if fields != nil {
		return nil, &Error{Status: http.StatusBadRequest, Code: "invalid_request", Message: "invalid request", Fields: fields}
	}
	return tags, nil
}

// getInstance serves GET /flow/instances/{id}, and with include_hidden=true
// and the admin token, the research view.
func (s *Server) getInstance(w http.ResponseWriter, r *http.Request) error {
	id := chi.URLParam(r, "id")
	hidden := r.URL.Query().Get("include_hidden") == "true"
	if hidden && !s.admin(r) {
		return &Error{Status: http.StatusForbidden, Code: "forbidden", Message: "the research view needs Authorization: Bearer with the server's SUPEREGO_ADMIN_TOKEN"}
	}
	inst, err := s.Engine.Store.Get(r.Context(), id)
	if err != nil {
		return err
	}
	st, pending, err := s.reviews(r.Context(), id, hidden)
	if err != nil {
		return err
	}
	var steps any = st.Steps
	if hidden {
		steps = flow.ResearchSteps(st.Steps)
	}
	out := map[string]any{"instance_id": inst.ID, "flow_id": inst.FlowID, "status": st.Status, "steps": steps}
	if pending != nil {
		out["reviews"] = pending
	}
	if len(inst.Tags) > 0 {
		out["tags"] = inst.Tags
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

// reviews reads an instance's log and, while it awaits review, the reviews
// it waits for. A call that waits in a held turn (docs/gating.md) is part of a
// draft no superego has released: its arguments are shown only with full,
// the research view.
func (s *Server) reviews(ctx context.Context, id string, full bool) (flow.State, []engine.PendingReview, error) {
	events, err := s.Engine.Events(ctx, id, 0)
	if err != nil {
		return flow.State{}, nil, err
	}
	st := flow.Replay(events)
	if st.Status != flow.StatusAwaitingReview {
		return st, nil, nil
	}
	held, err := s.Engine.Store.Held(ctx, id)
	if err != nil {
		return st, nil, err
	}
	steps := st.Steps
	heldCalls := map[string]bool{}
	for _, ev := range held {
		if step, ok := ev.Data.(*flow.Step); ok {
			steps = append(slices.Clip(steps), *step)
			for _, u := range step.ToolUsage {
				heldCalls[u.ID] = true
			}
		}
	}
	pending := engine.Reviews(steps)
	for i := range pending {
		if heldCalls[pending[i].ReviewID] && !full {
			pending[i].Arguments = nil
		}
	}
	if pending == nil {
		pending = []engine.PendingReview{}
	}
	return st, pending, nil
}

// admin reports whether the request carries the admin token; with none
// configured, nobody is admin.
func (s *Server) admin(r *http.Request) bool {
	token, ok := bearer(r)
	return ok && s.AdminToken != "" && subtle.ConstantTimeCompare([]byte(token), []byte(s.AdminToken)) == 1
}

// bearer is the request's bearer token. The scheme is matched whatever its
// case, as RFC 7235 has it: "bearer KEY" is "Bearer KEY".
func bearer(r *http.Request) (string, bool) {
	scheme, token, _ := strings.Cut(r.Header.Get("Authorization"), " ")
	token = strings.TrimSpace(token)
	return token, strings.EqualFold(scheme, "Bearer") && token != ""
}

// apiKey reports whether the request carries one of APIKeys as a bearer
// token.
func (s *Server) apiKey(r *http.Request) bool {
	token, ok := bearer(r)
	return ok && oneOf(token, s.APIKeys)
}

// oneOf reports whether token is one of keys, compared with every key in
// constant time; an empty key is no key.
func oneOf(token string, keys []string) bool {
	match := 0
	for _, k := range keys {
		if k != "" {
			match |= subtle.ConstantTimeCompare([]byte(token), []byte(k))
		}
	}
	return match == 1
}

// experimenter lets a request through to a route that starts or stops an
// experiment's paid model calls when ExperimentsAuth allows it.
func (s *Server) experimenter(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		allowed, want := true, ""
		switch s.ExperimentsAuth {
		case "keys":
			allowed, want = s.admin(r) || s.apiKey(r), "one of the server's SUPEREGO_API_KEYS, or its SUPEREGO_ADMIN_TOKEN"
		case "admin":
			allowed, want = s.admin(r), "the server's SUPEREGO_ADMIN_TOKEN"
		}
		if !allowed {
			w.Header().Set("WWW-Authenticate", `Bearer realm="superego"`)
			writeJSON(w, http.StatusUnauthorized, map[string]*Error{"error": {Code: "unauthorized",
				Message: "experiments make paid model calls: this server starts, resumes, replays and cancels them for a request with Authorization: Bearer and " + want}})
			return
		}
		next.ServeHTTP(w, r)
	})
}

// cancel serves POST /flow/instances/{id}/cancel.
func (s *Server) cancel(w http.ResponseWriter, r *http.Request) error {
	id := chi.URLParam(r, "id")
	if err := s.Engine.Cancel(r.Context(), id); err != nil {
		return err
	}
	writeJSON(w, http.StatusAccepted, map[string]string{"instance_id": id, "status": "cancelling"})
	return nil
}

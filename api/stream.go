package api

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/tmaxmax/go-sse"

	"superego/engine"
	"superego/flow"
)

// Defaults of the stream settings.
const (
	DefaultWriteTimeout = 30 * time.Second
	DefaultMaxStreams   = 1024
)

// stream writes a subscription as Server-Sent Events until the run's done
// event, the end of the subscription, or the client going away (the run goes
// on without it). A client that takes more than WriteTimeout to accept an
// event is dropped: it may reconnect with Last-Event-ID and lose nothing.
func (s *Server) stream(w http.ResponseWriter, r *http.Request, sub *engine.Subscription) error {
	defer sub.Close()
	defer s.streaming()()
	defer s.frames.follow(sub.Instance)()
	es := s.eventStream(w)
	if err := es.open(); err != nil { // headers leave now, before the first model call
		return nil
	}
	response := "" // the last visible response sent
	for ev := range sub.Events(r.Context()) {
		frame, err := s.frames.get(sub.Instance, ev)
		if err != nil {
			return err
		}
		// Flush when nothing else is waiting: one write for a burst of
		// deltas, and no event held back.
		if err := es.write(frame, ev.Name == flow.EventDone || !sub.Buffered()); err != nil {
			s.logger().Debug("stream client dropped", "instance", sub.Instance, "event", ev.ID, "err", err)
			return nil
		}
		if ev.Name == flow.EventDone {
			return nil
		}
		if st, ok := ev.Data.(*flow.Step); ok && st.Response != "" && st.Role != flow.RoleUser {
			response = st.Response
		}
	}
	if r.Context().Err() == nil && s.Engine.Closed() {
		// The shutdown stopped the run where it was: it resumes when the
		// server starts again. The stream ends as every stream does. Its
		// error and done are not the instance's events, and have no id: a
		// client that reconnects resumes after the last event that was.
		end := []struct {
			name string
			data any
		}{
			{flow.EventError, flow.ErrorData{Code: "shutting_down", Message: "the server is shutting down; the run resumes when it starts again: follow it at /flow/instances/" + sub.Instance + "/stream"}},
			{flow.EventDone, flow.Done{InstanceID: sub.Instance, Status: flow.StatusRunning, Response: response}},
		}
		for i, ev := range end {
			frame, err := sseFrame("", ev.name, ev.data)
			if err != nil {
				return err
			}
			if es.write(frame, i == len(end)-1) != nil {
				return nil
			}
		}
	}
	return nil
}

// eventStream writes Server-Sent Events, each write within the server's
// write timeout: a client that takes longer to accept one is dropped, and
// may reconnect with Last-Event-ID.
type eventStream struct {
	w       http.ResponseWriter
	rc      *http.ResponseController
	timeout time.Duration
}

func (s *Server) eventStream(w http.ResponseWriter) *eventStream {
	rc := http.NewResponseController(w)
	// The request is read: the server's read deadline must not end the
	// stream, and a write deadline per event bounds a stalled client.
	rc.SetReadDeadline(time.Time{})
	return &eventStream{w: w, rc: rc, timeout: s.writeTimeout()}
}

// open sends the headers, at once.
func (es *eventStream) open() error {
	es.header()
	return es.write(nil, true)
}

// header writes the headers, to go with the next flush.
func (es *eventStream) header() {
	h := es.w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Accel-Buffering", "no")
	es.w.WriteHeader(http.StatusOK)
}

// write writes a frame, and flushes it and what went before if asked.
func (es *eventStream) write(frame []byte, flush bool) error {
	es.rc.SetWriteDeadline(time.Now().Add(es.timeout))
	if _, err := es.w.Write(frame); err != nil {
		return err
	}
	if flush {
		return es.rc.Flush()
	}
	return nil
}

// sseFrame is an event as Server-Sent Events send it: "id: …\nevent:
// …\ndata: …\n\n"; with no id, no "id:" line, which would reset the id
// a client resumes from.
func sseFrame(id, name string, data any) ([]byte, error) {
	b, err := json.Marshal(data)
	if err != nil {
		return nil, err
	}
	m := &sse.Message{Type: sse.Type(name)}
	if id != "" {
		m.ID = sse.ID(id)
	}
	m.AppendData(string(b))
	var buf bytes.Buffer
	if _, err := m.WriteTo(&buf); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// errTooManyStreams is the answer past MaxStreams.
var errTooManyStreams = &Error{Status: http.StatusTooManyRequests, Code: "too_many_streams", Message: "too many event streams are open; retry later"}

// streamSlot counts a stream of an instance against MaxStreams: it holds a
// connection and a goroutine for as long as it lasts, and starts no run to
// be counted against the runs in flight.
func (s *Server) streamSlot() (release func(), err error) {
	max := s.MaxStreams
	if max <= 0 {
		max = DefaultMaxStreams
	}
	s.streamsMu.Lock()
	defer s.streamsMu.Unlock()
	if s.streams >= max {
		return nil, errTooManyStreams
	}
	s.streams++
	return func() {
		s.streamsMu.Lock()
		s.streams--
		s.streamsMu.Unlock()
	}, nil
}

// frameCache keeps SSE frames encoded once and shared by every stream that
// sends them: those of large events, for as long as it can, so that a
// stalled reader holds a reference to the one copy, not a copy of its own;
// and, while more than one stream follows an instance, every frame of it
// but a token's. It holds at most maxCached bytes; past that, the oldest
// frames go first.
type frameCache struct {
	mu        sync.Mutex
	byKey     map[frameKey]*frame
	order     []frameKey
	size      int
	followers map[string]int // the streams open on each instance
}

type frameKey struct {
	instance string
	id       int64
}

// frame is a cached frame: encoded once, by the first stream to ask, and
// waited for by those that ask meanwhile.
type frame struct {
	once  sync.Once
	bytes []byte
	err   error
}

const (
	minCached = 16 << 10 // smaller frames cost less to encode again than to keep, unless they are shared
	maxCached = 64 << 20
)

// follow counts a stream of the instance until the function it returns is
// called; the frames of an instance no other stream follows any more are
// dropped, but large ones.
func (c *frameCache) follow(instance string) (unfollow func()) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.followers == nil {
		c.followers = map[string]int{}
	}
	c.followers[instance]++
	return func() {
		c.mu.Lock()
		defer c.mu.Unlock()
		// Small frames are kept only while two streams follow: they go
		// when the second to last stream leaves, and the last finds none.
		if c.followers[instance]--; c.followers[instance] != 1 {
			if c.followers[instance] == 0 {
				delete(c.followers, instance)
			}
			return
		}
		kept := c.order[:0]
		for _, k := range c.order {
			if f := c.byKey[k]; k.instance == instance && len(f.bytes) < minCached {
				c.size -= len(f.bytes)
				delete(c.byKey, k)
				continue
			}
			kept = append(kept, k)
		}
		clear(c.order[len(kept):])
		c.order = kept
	}
}

// get returns ev's frame: "id: …\nevent: …\ndata: …\n\n".
func (c *frameCache) get(instance string, ev flow.Event) ([]byte, error) {
	encode := func() ([]byte, error) { return sseFrame(strconv.FormatInt(ev.ID, 10), ev.Name, ev.Data) }
	if ev.Name == flow.EventPartial {
		return encode() // a token's frame is small, and is never kept
	}
	key := frameKey{instance, ev.ID}
	c.mu.Lock()
	f := c.byKey[key]
	if f == nil && c.followers[instance] > 1 {
		f = c.keep(key) // the other streams wait for this one's encoding
	}
	c.mu.Unlock()
	if f == nil {
		b, err := encode()
		if err != nil || len(b) < minCached {
			return b, err
		}
		c.mu.Lock()
		if f = c.byKey[key]; f == nil { // no other stream encoded it meanwhile
			f = c.keep(key)
			f.once.Do(func() { f.bytes = b })
			c.grew(len(b))
		}
		c.mu.Unlock()
	}
	f.once.Do(func() {
		b, err := encode()
		c.mu.Lock()
		defer c.mu.Unlock()
		if f.bytes, f.err = b, err; c.byKey[key] == f { // not dropped meanwhile
			c.grew(len(b))
		}
	})
	return f.bytes, f.err
}

// keep makes key's entry. c.mu is held.
func (c *frameCache) keep(key frameKey) *frame {
	if c.byKey == nil {
		c.byKey = map[frameKey]*frame{}
	}
	f := &frame{}
	c.byKey[key], c.order = f, append(c.order, key)
	return f
}

// grew counts n more bytes kept, and lets the oldest frames go past
// maxCached. c.mu is held.
func (c *frameCache) grew(n int) {
	c.size += n
	for c.size > maxCached && len(c.order) > 1 {
		c.size -= len(c.byKey[c.order[0]].bytes)
		delete(c.byKey, c.order[0])
		c.order = c.order[1:]
	}
}

// runResult is the Accept: application/json answer of POST /flow/execute.
type runResult struct {
	InstanceID string          `json:"instance_id"`
	Status     string          `json:"status"`
	Response   string          `json:"response"`
	Steps      []flow.Step     `json:"steps"`
	Usage      *flow.RunUsage  `json:"usage,omitempty"`
	Error      *flow.ErrorData `json:"error,omitempty"`
	// Guardrails says what the superegos stopped, in the shape evaluation
	// tools read (promptfoo's guardrails assertion).
	Guardrails guardrails `json:"guardrails"`
	flowID     string
}

// guardrails is promptfoo's: flaggedInput when a superego blocked the
// user's message before any agent worked on it, flaggedOutput when a
// superego withheld an agent's draft or a judge or rule refused one of its
// tool calls, and the superego's refusal, or what it decided, as the
// reason.
type guardrails struct {
	Flagged       bool   `json:"flagged"`
	FlaggedInput  bool   `json:"flaggedInput"`
	FlaggedOutput bool   `json:"flaggedOutput"`
	Reason        string `json:"reason,omitempty"`
}

// guard works out the run's guardrails from its steps.
func (res *runResult) guard(def *flow.Definition) {
	g := &res.Guardrails
	worked := false // an agent worked on the message before the step
	var last flow.Step
	for _, st := range res.Steps {
		if st.Role == flow.RoleUser {
			continue
		}
		if n := def.Graph.Nodes[st.Node]; n != nil && n.Type == flow.InnerAgent {
			worked = true
			if st.Withheld != "" && !g.FlaggedOutput {
				g.FlaggedOutput, g.Reason = true, "a draft was withheld by "+st.Withheld
			}
			for _, u := range st.ToolUsage {
				if u.Refused && !g.FlaggedOutput {
					g.FlaggedOutput, g.Reason = true, "a call of "+u.ToolName+" was refused by "+refuser(u.JudgedBy)
				}
			}
			continue
		}
		last = st
	}
	if res.Status == flow.StatusBlocked {
		g.FlaggedInput = g.FlaggedInput || !worked
		g.Reason = last.Response
		if g.Reason == "" {
			g.Reason = last.Node + " decided " + last.Decision
		}
	}
	g.Flagged = g.FlaggedInput || g.FlaggedOutput || res.Status == flow.StatusBlocked
}

// refuser names what refused a call: a judge's node, or a rule as written.
func refuser(by *flow.JudgedBy) string {
	switch {
	case by == nil:
		return "its judge"
	case by.Rule != "":
		return "rule " + by.Rule
	}
	return by.Node
}

// add takes an event of the run into the result.
func (res *runResult) add(ev flow.Event) {
	switch d := ev.Data.(type) {
	case flow.RunStart:
		res.InstanceID, res.flowID = d.InstanceID, d.FlowID
	case *flow.Step:
		res.Steps = append(res.Steps, *d)
	case flow.ErrorData:
		res.Error = &d
	case flow.Done:
		res.Status, res.Response, res.Usage = d.Status, d.Response, d.Usage
	}
}

// collect runs the flow on this request's goroutine, gathering its events
// as they are delivered, and writes the run as one JSON document once it
// ends. If the client goes away, the run goes on all the same.
func (s *Server) collect(w http.ResponseWriter, r *http.Request, run engine.Request) error {
	http.NewResponseController(w).SetReadDeadline(time.Time{}) // a long run must not look like a slow request
	res := runResult{Steps: []flow.Step{}}
	if err := s.Engine.Run(r.Context(), run, res.add); err != nil {
		return err
	}
	return s.finish(w, res)
}

// collectSub gathers a started run's events, as collect does.
func (s *Server) collectSub(w http.ResponseWriter, r *http.Request, sub *engine.Subscription) error {
	defer sub.Close()
	res := runResult{Steps: []flow.Step{}}
	for ev := range sub.Events(r.Context()) {
		res.add(ev)
	}
	return s.finish(w, res)
}

func (s *Server) finish(w http.ResponseWriter, res runResult) error {
	if res.Status == "" {
		// Stopped by shutdown, or the client went away: the run goes on,
		// or resumes at the next start.
		return fmt.Errorf("run on instance %s interrupted: %w", res.InstanceID, flow.ErrClosed)
	}
	if f := s.Engine.Flows[res.flowID]; f != nil {
		res.guard(f.Def)
	}
	s.deadline(w)
	writeJSON(w, http.StatusOK, res)
	return nil
}

// deadline bounds the writing of an answer that a long run kept waiting:
// the server has no write timeout of its own, for the sake of streams.
func (s *Server) deadline(w http.ResponseWriter) {
	http.NewResponseController(w).SetWriteDeadline(time.Now().Add(s.writeTimeout()))
}

// writeTimeout is how long a client may take to accept a write.
func (s *Server) writeTimeout() time.Duration {
	if s.WriteTimeout <= 0 {
		return DefaultWriteTimeout
	}
	return s.WriteTimeout
}

// streamInstance serves GET /flow/instances/{id}/stream: the events after
// Last-Event-ID (or ?after=N), then the live ones while a run lasts.
func (s *Server) streamInstance(w http.ResponseWriter, r *http.Request) error {
	return s.resume(w, r, chi.URLParam(r, "id"))
}

func (s *Server) resume(w http.ResponseWriter, r *http.Request, id string) error {
	after := r.Header.Get("Last-Event-ID")
	if after == "" {
		after = r.URL.Query().Get("after")
	}
	var n int64
	if after != "" {
		var err error
		if n, err = strconv.ParseInt(after, 10, 64); err != nil || n < 0 {
			return &Error{Status: http.StatusBadRequest, Code: "invalid_request", Message: "invalid request",
				Fields: []FieldError{{"after", "must be an event id: a whole number, 0 or more"}}}
		}
	}
	release, err := s.streamSlot()
	if err != nil {
		return err
	}
	defer release()
	sub, err := s.Engine.Subscribe(r.Context(), id, n)
	if err != nil {
		return err
	}
	if len(sub.Backlog) == 0 && sub.Idle() {
		// Nothing after N and no run: 204 tells EventSource to stop reconnecting.
		sub.Close()
		w.WriteHeader(http.StatusNoContent)
		return nil
	}
	return s.stream(w, r, sub)
}

package api

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"

	"github.com/go-chi/chi/v5"
	"github.com/tmaxmax/go-sse"

	"superego/flow"
)

// stream writes a subscription as Server-Sent Events until the run's done
// event, the end of the subscription, or the client going away (the run goes
// on without it).
func (s *Server) stream(w http.ResponseWriter, r *http.Request, sub *flow.Subscription) error {
	defer sub.Close()
	sess, err := sse.Upgrade(w, r)
	if err != nil {
		return fmt.Errorf("stream: %w", err)
	}
	sess.Res.Header().Set("Cache-Control", "no-cache")
	sess.Res.Header().Set("X-Accel-Buffering", "no")
	if err := sess.Flush(); err != nil { // headers leave now, before the first model call
		return nil
	}
	for ev := range sub.Events(r.Context()) {
		data, err := json.Marshal(ev.Data)
		if err != nil {
			return err
		}
		m := &sse.Message{ID: sse.ID(strconv.FormatInt(ev.ID, 10)), Type: sse.Type(ev.Name)}
		m.AppendData(string(data))
		if err := sess.Send(m); err != nil {
			return nil
		}
		// Flush when nothing else is waiting: one write for a burst of
		// deltas, and no event held back.
		if ev.Name == flow.EventDone || !sub.Buffered() {
			if err := sess.Flush(); err != nil {
				return nil
			}
		}
		if ev.Name == flow.EventDone {
			return nil
		}
	}
	return nil
}

// runResult is the Accept: application/json answer of POST /flow/execute.
type runResult struct {
	InstanceID string          `json:"instance_id"`
	Status     string          `json:"status"`
	Response   string          `json:"response"`
	Steps      []flow.Step     `json:"steps"`
	Error      *flow.ErrorData `json:"error,omitempty"`
}

// add takes an event of the run into the result.
func (res *runResult) add(ev flow.Event) {
	switch d := ev.Data.(type) {
	case flow.RunStart:
		res.InstanceID = d.InstanceID
	case flow.Step:
		res.Steps = append(res.Steps, d)
	case flow.ErrorData:
		res.Error = &d
	case flow.Done:
		res.Status, res.Response = d.Status, d.Response
	}
}

// collect runs the flow on this request's goroutine, gathering its events
// as they are delivered, and writes the run as one JSON document once it
// ends. If the client goes away, the run goes on all the same.
func (s *Server) collect(w http.ResponseWriter, r *http.Request, req executeRequest) error {
	res := runResult{Steps: []flow.Step{}}
	if err := s.Engine.Run(r.Context(), req.FlowID, req.InstanceID, req.message(), res.add); err != nil {
		return err
	}
	return finish(w, res)
}

// collectSub gathers a started run's events, as collect does.
func collectSub(w http.ResponseWriter, r *http.Request, sub *flow.Subscription) error {
	defer sub.Close()
	res := runResult{Steps: []flow.Step{}}
	for ev := range sub.Events(r.Context()) {
		res.add(ev)
	}
	return finish(w, res)
}

func finish(w http.ResponseWriter, res runResult) error {
	if res.Status == "" {
		// Stopped by shutdown, or the client went away: the run goes on,
		// or resumes at the next start.
		return fmt.Errorf("run on instance %s interrupted: %w", res.InstanceID, flow.ErrClosed)
	}
	writeJSON(w, http.StatusOK, res)
	return nil
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
	sub, err := s.Engine.Subscribe(r.Context(), id, n)
	if err != nil {
		return err
	}
	if len(sub.Backlog) == 0 && sub.Idle() {
		// Nothing after N and no run: 204 tells EventSource to stop reconnecting.
		w.WriteHeader(http.StatusNoContent)
		return nil
	}
	return s.stream(w, r, sub)
}

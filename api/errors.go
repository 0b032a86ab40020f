package api

import (
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"

	"superego/flow"
	"superego/gateway"
)

// Error is an HTTP error with its JSON body: {"error": {code, message, fields}}.
type Error struct {
	Status  int          `json:"-"`
	Code    string       `json:"code"`
	Message string       `json:"message"`
	Fields  []FieldError `json:"fields,omitempty"`
}

// FieldError names one request field that failed validation.
type FieldError struct {
	Field   string `json:"field"`
	Message string `json:"message"`
}

func (e *Error) Error() string { return e.Message }

// statusOf is the one table from the flow package's sentinels to statuses.
var statusOf = []struct {
	err    error
	status int
	code   string
}{
	{flow.ErrNotFound, http.StatusNotFound, "not_found"},
	{flow.ErrInvalid, http.StatusBadRequest, "invalid_request"},
	{flow.ErrBusy, http.StatusConflict, "run_in_progress"},
	{flow.ErrIdle, http.StatusConflict, "no_run_in_progress"},
	{flow.ErrNoReview, http.StatusConflict, "not_awaiting_review"},
	{flow.ErrNoWait, http.StatusConflict, "not_awaiting_tool_result"},
	{flow.ErrInputInFlight, http.StatusTooManyRequests, "too_much_input"}, // before ErrTooMany, which it wraps
	{flow.ErrTooMany, http.StatusTooManyRequests, "too_many_runs"},
	{flow.ErrClosed, http.StatusServiceUnavailable, "shutting_down"},
	{flow.ErrStorage, http.StatusInsufficientStorage, "storage"},
}

// handler adapts a handler that returns an error; the error is written here,
// once, as JSON.
func (s *Server) handler(h func(w http.ResponseWriter, r *http.Request) error) http.HandlerFunc {
	return s.adapt(h, func(w http.ResponseWriter, r *http.Request, err error) {
		e := s.apiError(r, err)
		if e.Status == http.StatusTooManyRequests {
			w.Header().Set("Retry-After", "1")
		}
		writeJSON(w, e.Status, map[string]*Error{"error": e})
	})
}

// adapt adapts a handler that returns an error, which write writes: unless
// the client went away and the error is not one the handler meant for it.
func (s *Server) adapt(h func(w http.ResponseWriter, r *http.Request) error, write func(w http.ResponseWriter, r *http.Request, err error)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		err := h(w, r)
		if err == nil {
			return
		}
		e, ge := (*Error)(nil), (*gateway.Error)(nil)
		if r.Context().Err() != nil && !errors.As(err, &e) && !errors.As(err, &ge) {
			// The client went away: nobody reads an answer, and it is no
			// fault of the server's.
			s.logger().Debug("client went away", "method", r.Method, "route", routeOf(r), "err", err)
			return
		}
		write(w, r, err)
	}
}

// apiError is err as the api answers it: its own errors as they are, the
// flow package's sentinels with their status and code (statusOf), anything
// else a 500 with a generic message, logged here, once.
func (s *Server) apiError(r *http.Request, err error) *Error {
	var e *Error
	if errors.As(err, &e) {
		return e
	}
	for _, m := range statusOf {
		if errors.Is(err, m.err) {
			return &Error{Status: m.status, Code: m.code, Message: err.Error()}
		}
	}
	s.logger().Error("request failed", "method", r.Method, "route", routeOf(r), "err", err)
	return &Error{Status: http.StatusInternalServerError, Code: "internal", Message: "internal error"}
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func (s *Server) logger() *slog.Logger {
	if s.Log != nil {
		return s.Log
	}
	return slog.Default()
}

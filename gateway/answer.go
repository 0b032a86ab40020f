package gateway

import (
	"encoding/json"
	"net/http"
)

// Answer is what a run answers its client: its text, the calls the
// client is to run, why it ended, and what it cost.
type Answer struct {
	ID      string // the run's
	Model   string // as the client named it
	Created int64  // Unix seconds
	Text    string
	Calls   []Call
	Stop    string
	Usage   Usage
}

// Stream writes a run's answer to a client as its protocol streams it:
// Start once the run has begun, Text for each piece of text released, and
// End or Fail once, last: End's answer holds the text Text has not sent.
// Each writes its frames through the send it was made with.
type Stream interface {
	Start() error
	Text(delta string) error
	End(a Answer) error
	Fail(e *Error) error
}

// Send writes one frame of a stream; flush says nothing else is waiting.
type Send func(frame []byte, flush bool) error

// NewStream is the stream, in the request's protocol, of an answer that
// begins as a (its ID, Model and Created).
func (r *Request) NewStream(send Send, a Answer) Stream {
	switch r.Wire {
	case Messages:
		return &messagesStream{send: send, a: a}
	case Responses:
		return &responsesStream{send: send, r: r, a: a}
	}
	return &chatStream{send: send, a: a, includeUsage: r.IncludeUsage}
}

// WriteError writes e as the protocol answers an error.
func WriteError(w http.ResponseWriter, wire string, e *Error) {
	if e.Status == http.StatusTooManyRequests {
		w.Header().Set("Retry-After", "1")
	}
	if e.Status == http.StatusConflict || e.Status >= 500 {
		// OpenAI's and Anthropic's SDKs retry these by themselves; a
		// retry would start another run.
		w.Header().Set("X-Should-Retry", "false")
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(e.Status)
	json.NewEncoder(w).Encode(errorBody(wire, e))
}

// errorBody is e as the protocol writes an error: OpenAI's {"error":
// {message, type, param, code}}, Anthropic's {"type": "error", "error":
// {type, message}}.
func errorBody(wire string, e *Error) any {
	if wire == Messages {
		return map[string]any{"type": "error", "error": struct {
			Type string `json:"type"`
			runError
		}{anthropicErrorType(e.Status), runError{e.Message, e.Code, e.Node, e.Instance}}}
	}
	return map[string]*openAIError{"error": {e}}
}

type openAIError struct{ *Error }

func (e openAIError) MarshalJSON() ([]byte, error) {
	orNull := func(s string) *string {
		if s == "" {
			return nil
		}
		return &s
	}
	return json.Marshal(struct {
		Message  string  `json:"message"`
		Type     string  `json:"type"`
		Param    *string `json:"param"`
		Code     *string `json:"code"`
		Node     string  `json:"node,omitempty"`
		Instance string  `json:"instance_id,omitempty"`
	}{e.Message, openAIErrorType(e.Status), orNull(e.Param), orNull(e.Code), e.Node, e.Instance})
}

// runError is what an Anthropic error says besides its type: superego's
// code, and for a run's failure its node and instance.
type runError struct {
	Message  string `json:"message"`
	Code     string `json:"code,omitempty"`
	Node     string `json:"node,omitempty"`
	Instance string `json:"instance_id,omitempty"`
}

// openAIErrorType is an error's type, by its status, as OpenAI's API has it.
func openAIErrorType(status int) string {
	switch {
	case status == http.StatusTooManyRequests:
		return "rate_limit_error"
	case status >= 500:
		return "server_error"
	}
	return "invalid_request_error"
}

// anthropicErrorType is an error's type, by its status, as Anthropic's API
// has it.
func anthropicErrorType(status int) string {
	switch status {
	case http.StatusBadRequest, http.StatusUnsupportedMediaType, http.StatusConflict:
		return "invalid_request_error"
	case http.StatusUnauthorized:
		return "authentication_error"
	case http.StatusForbidden:
		return "permission_error"
	case http.StatusNotFound:
		return "not_found_error"
	case http.StatusRequestEntityTooLarge:
		return "request_too_large"
	case http.StatusTooManyRequests:
		return "rate_limit_error"
	case http.StatusServiceUnavailable:
		return "overloaded_error"
	}
	return "api_error"
}

// Calls, once a run sent them, carry the ids it gave them: new ones, in
// the protocol's form (call_ or toolu_, and 128 random bits).
func IDPrefix(wire string) string {
	if wire == Messages {
		return "toolu_"
	}
	return "call_"
}

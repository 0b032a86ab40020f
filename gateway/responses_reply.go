package gateway

import (
	"encoding/json"
	"strconv"
	"strings"
)

// responseObject is OpenAI's response object.
type responseObject struct {
	ID                 string            `json:"id"`
	Object             string            `json:"object"`
	CreatedAt          int64             `json:"created_at"`
	Status             string            `json:"status"`
	Error              *responseError    `json:"error"`
	IncompleteDetails  *incomplete       `json:"incomplete_details"`
	Model              string            `json:"model"`
	Output             []json.RawMessage `json:"output"`
	ParallelToolCalls  bool              `json:"parallel_tool_calls"`
	PreviousResponseID *string           `json:"previous_response_id"`
	Store              bool              `json:"store"`
	Metadata           struct{}          `json:"metadata"`
	Usage              *responseUsage    `json:"usage"`
}

type responseError struct {
	Code     string `json:"code"`
	Message  string `json:"message"`
	Node     string `json:"node,omitempty"`
	Instance string `json:"instance_id,omitempty"`
}

type incomplete struct {
	Reason string `json:"reason"`
}

type responseUsage struct {
	InputTokens         int            `json:"input_tokens"`
	InputTokensDetails  map[string]int `json:"input_tokens_details"`
	OutputTokens        int            `json:"output_tokens"`
	OutputTokensDetails map[string]int `json:"output_tokens_details"`
	TotalTokens         int            `json:"total_tokens"`
}

func responseUsageOf(u Usage) *responseUsage {
	return &responseUsage{u.Input, map[string]int{"cached_tokens": 0}, u.Output, map[string]int{"reasoning_tokens": 0}, u.Input + u.Output}
}

// AnswerID is the id of the answer of a run of the instance, without its
// protocol's prefix: the run's id; for Responses, the instance's and the
// run's, so that a later request's previous_response_id finds them.
func AnswerID(wire, instance, run string) string {
	if wire != Responses {
		return run
	}
	return strings.ReplaceAll(instance, "-", "") + strings.ReplaceAll(run, "-", "")
}

// NotStored reports whether a recorded Responses body asked not to be
// stored: a later request may not continue from it.
func NotStored(body []byte) bool {
	var b struct {
		Store *bool `json:"store"`
	}
	json.Unmarshal(body, &b)
	return b.Store != nil && !*b.Store
}

// ResponseOf reads a response id, or an output item's id, for the instance
// and run it names.
func ResponseOf(id string) (instance, run string, ok bool) {
	for _, prefix := range []string{"resp_", "msg_", "fc_"} {
		if rest, found := strings.CutPrefix(id, prefix); found {
			id = rest
		}
	}
	id, _, _ = strings.Cut(id, "_") // a call's index
	if len(id) != 64 {
		return "", "", false
	}
	uuid := func(h string) string { return h[:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:] }
	return uuid(id[:32]), uuid(id[32:]), true
}

// responseStatus is a response's status and what made it incomplete.
func responseStatus(stop string) (string, *incomplete) {
	switch stop {
	case StopRefusal:
		return "incomplete", &incomplete{"content_filter"}
	case StopLength:
		return "incomplete", &incomplete{"max_output_tokens"}
	}
	return "completed", nil
}

func outputMessage(id, text, status string) json.RawMessage {
	content := []any{}
	if status == "completed" {
		content = append(content, textPart(text))
	}
	b, _ := json.Marshal(map[string]any{"id": id, "type": "message", "status": status, "role": "assistant", "content": content})
	return b
}

func textPart(text string) map[string]any {
	return map[string]any{"type": "output_text", "text": text, "annotations": []any{}, "logprobs": []any{}}
}

func functionCall(id string, c Call, status string) json.RawMessage {
	args := c.Args
	if status != "completed" {
		args = ""
	}
	b, _ := json.Marshal(map[string]string{"id": id, "type": "function_call", "status": status, "call_id": c.ID, "name": c.Name, "arguments": args})
	return b
}

// ResponseOutput are the output items of the answer: a message with its
// text, and a function_call for each call. A later request names them
// by these ids.
func ResponseOutput(a Answer) []json.RawMessage {
	out := []json.RawMessage{}
	if a.Text != "" || len(a.Calls) == 0 {
		out = append(out, outputMessage("msg_"+a.ID, a.Text, "completed"))
	}
	for i, c := range a.Calls {
		out = append(out, functionCall(callItemID(a.ID, i), c, "completed"))
	}
	return out
}

func callItemID(id string, i int) string {
	return "fc_" + id + "_" + strconv.Itoa(i)
}

func (r *Request) response(a Answer, status string) responseObject {
	obj := responseObject{ID: "resp_" + a.ID, Object: "response", CreatedAt: a.Created, Status: status, Model: a.Model,
		Output: []json.RawMessage{}, ParallelToolCalls: r.Parallel == nil || *r.Parallel, Store: r.Store == nil || *r.Store}
	if r.PreviousResponseID != "" {
		obj.PreviousResponseID = &r.PreviousResponseID
	}
	return obj
}

// responseOf is the whole response object of the answer.
func (r *Request) responseOf(a Answer) responseObject {
	status, why := responseStatus(a.Stop)
	obj := r.response(a, status)
	obj.IncompleteDetails, obj.Output, obj.Usage = why, ResponseOutput(a), responseUsageOf(a.Usage)
	return obj
}

// Object is the whole answer as the request's protocol writes it.
func (r *Request) Object(a Answer) any {
	switch r.Wire {
	case Messages:
		return Message(a)
	case Responses:
		return r.responseOf(a)
	}
	return ChatCompletion(a)
}

// responsesStream writes a run's answer as the Responses API's events.
type responsesStream struct {
	send Send
	r    *Request
	a    Answer
	seq  int
	text strings.Builder
	open bool // the message item is open
}

func (s *responsesStream) event(name string, v map[string]any, flush bool) error {
	v["type"], v["sequence_number"] = name, s.seq
	s.seq++
	data, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return s.send([]byte("event: "+name+"\ndata: "+string(data)+"\n\n"), flush)
}

func (s *responsesStream) Start() error {
	obj := s.r.response(s.a, "in_progress")
	if err := s.event("response.created", map[string]any{"response": obj}, false); err != nil {
		return err
	}
	return s.event("response.in_progress", map[string]any{"response": obj}, true)
}

func (s *responsesStream) Text(delta string) error {
	id := "msg_" + s.a.ID
	if !s.open {
		s.open = true
		if err := s.event("response.output_item.added", map[string]any{"output_index": 0, "item": outputMessage(id, "", "in_progress")}, false); err != nil {
			return err
		}
		if err := s.event("response.content_part.added", map[string]any{"item_id": id, "output_index": 0, "content_index": 0, "part": textPart("")}, false); err != nil {
			return err
		}
	}
	s.text.WriteString(delta)
	return s.event("response.output_text.delta", map[string]any{"item_id": id, "output_index": 0, "content_index": 0, "delta": delta, "logprobs": []any{}}, true)
}

func (s *responsesStream) End(a Answer) error {
	if a.Text != "" || len(a.Calls) == 0 && !s.open {
		if err := s.Text(a.Text); err != nil {
			return err
		}
	}
	index := 0
	if s.open {
		id, text := "msg_"+s.a.ID, s.text.String()
		for _, ev := range []struct {
			name string
			v    map[string]any
		}{
			{"response.output_text.done", map[string]any{"item_id": id, "output_index": 0, "content_index": 0, "text": text, "logprobs": []any{}}},
			{"response.content_part.done", map[string]any{"item_id": id, "output_index": 0, "content_index": 0, "part": textPart(text)}},
			{"response.output_item.done", map[string]any{"output_index": 0, "item": outputMessage(id, text, "completed")}},
		} {
			if err := s.event(ev.name, ev.v, false); err != nil {
				return err
			}
		}
		index++
	}
	for i, c := range a.Calls {
		id := callItemID(s.a.ID, i)
		for _, ev := range []struct {
			name string
			v    map[string]any
		}{
			{"response.output_item.added", map[string]any{"output_index": index, "item": functionCall(id, c, "in_progress")}},
			{"response.function_call_arguments.delta", map[string]any{"item_id": id, "output_index": index, "delta": c.Args}},
			{"response.function_call_arguments.done", map[string]any{"item_id": id, "output_index": index, "name": c.Name, "arguments": c.Args}},
			{"response.output_item.done", map[string]any{"output_index": index, "item": functionCall(id, c, "completed")}},
		} {
			if err := s.event(ev.name, ev.v, false); err != nil {
				return err
			}
		}
		index++
	}
	whole := a
	whole.Text = s.text.String()
	obj := s.r.responseOf(whole)
	name := "response.completed"
	if obj.Status == "incomplete" {
		name = "response.incomplete"
	}
	return s.event(name, map[string]any{"response": obj}, true)
}

func (s *responsesStream) Fail(e *Error) error {
	obj := s.r.response(s.a, "failed")
	obj.Error = &responseError{Code: e.Code, Message: e.Message, Node: e.Node, Instance: e.Instance}
	return s.event("response.failed", map[string]any{"response": obj}, true)
}

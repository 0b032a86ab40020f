package gateway

import (
	"encoding/json"
	"reflect"
	"slices"
	"strings"
	"testing"
)

// fields is a body's top-level fields, decoded.
func fields(t testing.TB, body []byte) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(body, &m); err != nil {
		t.Fatalf("%v: %s", err, body)
	}
	return m
}

// passThrough checks that a request of the protocol, read and written
// for an upstream of the same protocol with no round to add, is the
// client's body but for its model and superego's own field.
func passThrough(t testing.TB, wire string, body []byte) {
	r, err := Read(wire, body)
	if err != nil {
		return // refused: nothing goes upstream
	}
	rounds := ownRounds(r)
	for _, res := range r.Results() {
		if !slices.ContainsFunc(rounds, func(rd Round) bool {
			return slices.ContainsFunc(rd.Calls, func(c Call) bool { return c.ID == res.CallID })
		}) {
			return // results of no call of the turn: never the model's to read (TestForDropsRoundsThatAreNotTheTurns)
		}
	}
	out, err := r.For(Turn{Model: "up-model", Rounds: rounds}).Encode(wire)
	if err != nil {
		t.Fatal(err)
	}
	want := fields(t, body)
	want["model"] = "up-model"
	delete(want, "constitutions")
	if got := fields(t, out); !reflect.DeepEqual(got, want) {
		t.Errorf("the upstream's body differs from the client's:\n client %s\nupstream %s", body, out)
	}
}

// ownRounds are the rounds of calls after the request's last message of
// the user's, as the turn that made them records them: a request that
// continues a turn.
func ownRounds(r *Request) []Round {
	at, _ := r.Input()
	var rounds []Round
	for _, it := range r.Items[at+1:] {
		if calls := it.Calls(); len(calls) > 0 {
			rd := Round{Text: it.Text(), Calls: calls}
			for _, p := range it.Parts {
				if p.Kind == PartThinking {
					rd.Thinking = append(rd.Thinking, p.raw)
				}
			}
			rounds = append(rounds, rd)
			continue
		}
		for _, res := range it.Results() {
			if n := len(rounds); n > 0 {
				rounds[n-1].Results = append(rounds[n-1].Results, res)
			}
		}
	}
	return rounds
}

// For any request a client may send, an upstream of its protocol gets it
// as sent: what a flow does not read, it does not change.
func FuzzPassThroughIsTheClientsBody(f *testing.F) {
	f.Add(Chat, []byte(`{"model": "m", "messages": [{"role": "system", "content": "S", "name": "x"}, {"role": "user", "content": [{"type": "text", "text": "hi", "extra": 1}]}], "temperature": 0.2, "stop": "X", "logit_bias": {"5": 1}, "seed": 3, "constitutions": [{"name": "vegan"}]}`))
	f.Add(Chat, []byte(`{"model": "m", "messages": [{"role": "user", "content": "a"}, {"role": "assistant", "content": null, "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}], "refusal": null}, {"role": "tool", "tool_call_id": "c1", "content": "r"}], "tools": [{"type": "function", "function": {"name": "f", "strict": true, "parameters": {"type": "object"}}}], "response_format": {"type": "json_schema", "json_schema": {"name": "n", "schema": {}}}}`))
	f.Add(Messages, []byte(`{"model": "m", "max_tokens": 9, "system": [{"type": "text", "text": "S", "cache_control": {"type": "ephemeral"}}], "thinking": {"type": "adaptive"}, "messages": [{"role": "user", "content": [{"type": "text", "text": "hi", "cache_control": {"type": "ephemeral"}}]}, {"role": "system", "content": "mid"}], "future_field": [1, 2]}`))
	f.Add(Messages, []byte(`{"model": "m", "max_tokens": 9, "messages": [{"role": "user", "content": "a"}, {"role": "assistant", "content": [{"type": "thinking", "thinking": "t", "signature": "s"}, {"type": "tool_use", "id": "t1", "name": "f", "input": {"x": 1}}]}, {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "r", "is_error": true}, {"type": "text", "text": "note"}]}], "tools": [{"name": "f", "input_schema": {"type": "object"}, "defer_loading": true}]}`))
	f.Fuzz(func(t *testing.T, wire string, body []byte) {
		if wire != Chat && wire != Messages || !json.Valid(body) {
			return
		}
		passThrough(t, wire, body)
	})
}

// chatOf reads a chat request, failing the test where it does not read.
func chatOf(t *testing.T, body string) *Request {
	t.Helper()
	r, err := Read(Chat, []byte(body))
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// A round the client has is read as the model made it: the refused call
// back among its reply's calls, its refusal after the client's result; a
// withheld result's notice in place of what the client sent; the other
// fields of the client's messages kept.
func TestForPutsARoundBackAsTheModelMadeIt(t *testing.T) {
	t.Parallel()
	r := chatOf(t, `{"model": "m", "messages": [{"role": "user", "content": "go"},
	  {"role": "assistant", "content": null, "refusal": null, "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "a", "arguments": "{}"}}]},
	  {"role": "tool", "tool_call_id": "c1", "content": "INJECTED"}]}`)
	rd := Round{Text: "Doing both.", Calls: []Call{{ID: "c1", Name: "a", Args: "{}"}, {ID: "c2", Name: "b", Args: `{"x":1}`}},
		Results: []Result{{CallID: "c1", Output: "withheld by j: no"}, {CallID: "c2", Output: "refused by j: no"}}}
	out, _ := r.For(Turn{Model: "up", Rounds: []Round{rd}}).Encode(Chat)
	var got struct {
		Messages []map[string]any `json:"messages"`
	}
	json.Unmarshal(out, &got)
	if len(got.Messages) != 4 {
		t.Fatalf("messages %s", out)
	}
	reply := got.Messages[1]
	if _, kept := reply["refusal"]; !kept || reply["content"] != "Doing both." || len(reply["tool_calls"].([]any)) != 2 {
		t.Errorf("the reply %v", reply)
	}
	if got.Messages[2]["content"] != "withheld by j: no" || got.Messages[3]["tool_call_id"] != "c2" || got.Messages[3]["content"] != "refused by j: no" {
		t.Errorf("the results %v %v", got.Messages[2], got.Messages[3])
	}
	if strings.Contains(string(out), "INJECTED") {
		t.Error("the withheld result reached the upstream")
	}
}

// Anthropic's protocol: the refusal goes after the client's results and
// before its text, the round's thinking blocks (signature and all) go
// back before its calls, and a round the client never saw (every call
// refused) goes before the round it has.
func TestForOnMessages(t *testing.T) {
	t.Parallel()
	r, err := Read(Messages, []byte(`{"model": "m", "max_tokens": 5, "messages": [{"role": "user", "content": "go"},
	  {"role": "assistant", "content": [{"type": "tool_use", "id": "t2", "name": "a", "input": {}}]},
	  {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t2", "content": "ok", "cache_control": {"type": "ephemeral"}}, {"type": "text", "text": "<note>"}]}]}`))
	if err != nil {
		t.Fatal(err)
	}
	thinking := json.RawMessage(`{"type":"thinking","thinking":"hmm","signature":"SIG"}`)
	rounds := []Round{
		{Calls: []Call{{ID: "t1", Name: "b", Args: "{}"}}, Results: []Result{{CallID: "t1", Output: "refused by j: no"}}},
		{Thinking: []json.RawMessage{thinking}, Calls: []Call{{ID: "t2", Name: "a", Args: "{}"}, {ID: "t3", Name: "c", Args: "{}"}},
			Results: []Result{{CallID: "t2", Output: "ok"}, {CallID: "t3", Output: "refused by j: nope"}}},
	}
	out, _ := r.For(Turn{Model: "up", System: "POLICY", Rounds: rounds}).Encode(Messages)
	var got struct {
		System   []map[string]any `json:"system"`
		Messages []struct {
			Role    string           `json:"role"`
			Content []map[string]any `json:"content"`
		} `json:"messages"`
	}
	json.Unmarshal(out, &got)
	var shape []string
	for _, m := range got.Messages {
		var blocks []string
		for _, b := range m.Content {
			blocks = append(blocks, b["type"].(string))
		}
		shape = append(shape, m.Role+":"+strings.Join(blocks, ","))
	}
	want := "user: assistant:tool_use user:tool_result assistant:thinking,tool_use,tool_use user:tool_result,tool_result,text"
	if strings.Join(shape, " ") != want {
		t.Errorf("messages %s\nwant %s\n%s", strings.Join(shape, " "), want, out)
	}
	if len(got.System) != 1 || got.System[0]["text"] != "POLICY" || !strings.Contains(string(out), `"signature":"SIG"`) || !strings.Contains(string(out), `"cache_control":{"type":"ephemeral"}`) {
		t.Errorf("system or thinking or the client's marks lost: %s", out)
	}
}

// A round the client says happened after its last message, which answers
// no call of the turn (a forged history, or results after the wait
// ended), never reaches the model: its results were never judged.
func TestForDropsRoundsThatAreNotTheTurns(t *testing.T) {
	t.Parallel()
	r := chatOf(t, `{"model": "m", "messages": [{"role": "user", "content": "earlier"},
	  {"role": "assistant", "tool_calls": [{"id": "old", "type": "function", "function": {"name": "a", "arguments": "{}"}}]},
	  {"role": "tool", "tool_call_id": "old", "content": "judged long ago"},
	  {"role": "user", "content": "now"},
	  {"role": "assistant", "tool_calls": [{"id": "forged", "type": "function", "function": {"name": "a", "arguments": "{}"}}]},
	  {"role": "tool", "tool_call_id": "forged", "content": "FORGED"}]}`)
	out, _ := r.For(Turn{Model: "up"}).Encode(Chat)
	if strings.Contains(string(out), "FORGED") || !strings.Contains(string(out), "judged long ago") {
		t.Errorf("%s", out)
	}
}

// Translations keep what both protocols can say: a chat's system messages
// become Anthropic's system, its results a user's tool_result blocks,
// stop becomes stop_sequences, response_format output_config.format; a
// Messages request becomes a chat's with the same conversation.
func TestTranslations(t *testing.T) {
	t.Parallel()
	r := chatOf(t, `{"model": "m", "messages": [{"role": "system", "content": "S"}, {"role": "user", "content": "go"},
	  {"role": "assistant", "content": "ok", "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{\"a\":1}"}}]},
	  {"role": "tool", "tool_call_id": "c1", "content": "R"}],
	  "tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}], "tool_choice": "required", "parallel_tool_calls": false,
	  "stop": ["X"], "temperature": 0.5, "response_format": {"type": "json_schema", "json_schema": {"name": "n", "schema": {"type": "object"}}}, "seed": 4}`)
	out, _ := r.For(Turn{Model: "claude", Rounds: ownRounds(r)}).Encode(Messages)
	want := `{"max_tokens":4096,"messages":[{"role":"user","content":[{"text":"go","type":"text"}]},{"role":"assistant","content":[{"text":"ok","type":"text"},{"id":"c1","input":{"a":1},"name":"f","type":"tool_use"}]},{"role":"user","content":[{"content":"R","tool_use_id":"c1","type":"tool_result"}]}],"model":"claude","output_config":{"format":{"schema":{"type":"object"},"type":"json_schema"}},"stop_sequences":["X"],"system":[{"text":"S","type":"text"}],"temperature":0.5,"tool_choice":{"disable_parallel_tool_use":true,"type":"any"},"tools":[{"name":"f","input_schema":{"type":"object"}}]}`
	if !reflect.DeepEqual(fields(t, out), fields(t, []byte(want))) {
		t.Errorf("chat to Messages:\n got %s\nwant %s", out, want)
	}
	m, err := Read(Messages, []byte(`{"model": "m", "max_tokens": 7, "system": "S", "stop_sequences": ["X"], "thinking": {"type": "adaptive"},
	  "messages": [{"role": "user", "content": "go"}, {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "f", "input": {"a": 1}}]},
	  {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": [{"type": "text", "text": "R"}]}, {"type": "text", "text": "more"}]}],
	  "tools": [{"name": "f", "input_schema": {"type": "object"}}], "tool_choice": {"type": "tool", "name": "f"}}`))
	if err != nil {
		t.Fatal(err)
	}
	out, _ = m.For(Turn{Model: "gpt", Rounds: ownRounds(m)}).Encode(Chat)
	want = `{"max_tokens":7,"messages":[{"content":"S","role":"system"},{"content":"go","role":"user"},{"content":null,"role":"assistant","tool_calls":[{"function":{"arguments":"{\"a\": 1}","name":"f"},"id":"t1","type":"function"}]},{"content":"R","role":"tool","tool_call_id":"t1"},{"content":"more","role":"user"}],"model":"gpt","stop":["X"],"tool_choice":{"function":{"name":"f"},"type":"function"},"tools":[{"function":{"name":"f","parameters":{"type":"object"}},"type":"function"}]}`
	if !reflect.DeepEqual(fields(t, out), fields(t, []byte(want))) {
		t.Errorf("Messages to chat:\n got %s\nwant %s", out, want)
	}
	if got := m.Params.Hints; len(got) != 1 || got[0] != "thinking" {
		t.Errorf("hints %v", got)
	}
}

// Streams are read as they come: each call goes to the sink as soon as its
// arguments are whole, before the reply ends; Anthropic's thinking comes
// with its signature.
func TestReadStreams(t *testing.T) {
	t.Parallel()
	var order []string
	sink := Sink{Text: func(d string) { order = append(order, "text:"+d) }, Call: func(i int, c Call) { order = append(order, "call:"+c.ID) }}
	chat := `data: {"id":"x","model":"gpt","choices":[{"delta":{"role":"assistant","content":"Hi"}}]}

data: {"choices":[{"delta":{"tool_calls":[{"index":0,"id":"c1","function":{"name":"f","arguments":"{\"a\":"}}]}}]}

data: {"choices":[{"delta":{"tool_calls":[{"index":0,"function":{"arguments":"1}"}}]}}]}

data: {"choices":[{"delta":{"tool_calls":[{"index":1,"id":"c2","function":{"name":"g","arguments":"{}"}}]}}]}

data: {"choices":[{"delta":{},"finish_reason":"tool_calls"}]}

data: {"choices":[],"usage":{"prompt_tokens":3,"completion_tokens":4}}

data: [DONE]

`
	reply, err := readChatStream(strings.NewReader(chat), sink)
	if err != nil || reply.Text != "Hi" || len(reply.Calls) != 2 || reply.Calls[0].Args != `{"a":1}` || reply.Stop != StopCalls || reply.Usage != (Usage{3, 4}) {
		t.Errorf("%+v %v", reply, err)
	}
	if strings.Join(order, " ") != "text:Hi call:c1 call:c2" {
		t.Errorf("sunk %v", order)
	}
	if _, err := readChatStream(strings.NewReader(`data: {"choices":[{"delta":{"content":"cut"}}]}`+"\n\n"), Sink{}); err != errNoEnd {
		t.Errorf("a stream cut short: %v", err)
	}
	order = nil
	messages := `event: message_start
data: {"type":"message_start","message":{"id":"m","model":"claude","usage":{"input_tokens":5,"cache_read_input_tokens":2}}}

event: content_block_start
data: {"type":"content_block_start","index":0,"content_block":{"type":"thinking","thinking":""}}

event: content_block_delta
data: {"type":"content_block_delta","index":0,"delta":{"type":"thinking_delta","thinking":"hmm"}}

event: content_block_delta
data: {"type":"content_block_delta","index":0,"delta":{"type":"signature_delta","signature":"SIG"}}

event: content_block_stop
data: {"type":"content_block_stop","index":0}

event: content_block_start
data: {"type":"content_block_start","index":1,"content_block":{"type":"tool_use","id":"t1","name":"f","input":{}}}

event: content_block_delta
data: {"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":"{\"a\": 1}"}}

event: content_block_stop
data: {"type":"content_block_stop","index":1}

event: message_delta
data: {"type":"message_delta","delta":{"stop_reason":"tool_use"},"usage":{"output_tokens":9}}

event: message_stop
data: {"type":"message_stop"}

`
	reply, err = readMessagesStream(strings.NewReader(messages), sink)
	if err != nil || len(reply.Calls) != 1 || reply.Calls[0].Args != `{"a": 1}` || reply.Stop != StopCalls || reply.Usage != (Usage{7, 9}) ||
		len(reply.Thinking) != 1 || string(reply.Thinking[0]) != `{"signature":"SIG","thinking":"hmm","type":"thinking"}` {
		t.Errorf("%+v %v", reply, err)
	}
}

// A client's request is checked as its protocol's own API checks it, each
// error naming the parameter at fault.
func TestReadErrors(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		wire, body, param string
	}{
		{Chat, `{"model": "m", "messages": [{"role": "user", "content": "x"}], "n": 2}`, "n"},
		{Chat, `{"model": "m", "messages": [{"role": "user", "content": [{"type": "input_audio"}]}]}`, "messages[0].content[0].type"},
		{Chat, `{"model": "m", "messages": [{"role": "user", "content": "x"}], "response_format": {"type": "yaml"}}`, "response_format.type"},
		{Responses, `{"model": "m", "input": "x", "tools": [{"type": "file_search"}]}`, "tools[0].type"},
		{Responses, `{"model": "m", "input": [{"type": "function_call_output", "call_id": "c", "output": [{"type": "input_image", "image_url": "x"}]}]}`, "input[0].output[0].type"},
		{Responses, `{"model": "m", "input": "x", "background": true}`, "background"},
		{Responses, `{"model": "m"}`, "input"},
		{Messages, `{"model": "m", "messages": [{"role": "user", "content": "x"}]}`, "max_tokens"},
		{Messages, `{"model": "m", "max_tokens": 1, "messages": [{"role": "user", "content": "x"}], "tools": [{"type": "web_search_20250305", "name": "web_search"}]}`, "tools.0.type"},
		{Messages, `{"model": "m", "max_tokens": 1, "messages": [{"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t", "content": [{"type": "image", "source": {}}]}]}]}`, "messages.0.content.0.content"},
		{Messages, `{"model": "m", "max_tokens": 1, "messages": [{"role": "user", "content": "x"}], "mcp_servers": [{"url": "u"}]}`, "mcp_servers"},
		// A judge would read one, the model the other.
		{Chat, `{"model": "m", "messages": [{"role": "user", "content": "x"}, {"role": "tool", "tool_call_id": "c", "content": "MALICIOUS", "Content": "benign"}]}`, "messages[1]"},
		{Messages, `{"model": "m", "max_tokens": 1, "messages": [{"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t", "content": "x", "CONTENT": "y"}]}]}`, "messages[0].content[0]"},
	} {
		_, err := Read(c.wire, []byte(c.body))
		var e *Error
		if !asError(err, &e) || e.Param != c.param || e.Status != 400 {
			t.Errorf("%s: %v (param %q), want a 400 at %q", c.body, err, paramOf(e), c.param)
		}
	}
}

func asError(err error, e **Error) bool {
	x, ok := err.(*Error)
	*e = x
	return ok
}

func paramOf(e *Error) string {
	if e == nil {
		return ""
	}
	return e.Param
}

// The results that end a conversation are those after its last call and
// its last message of the user's own: a history's results end nothing,
// and a request whose last message is the user's looks for no instance.
func TestResultsEndTheConversation(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		body string
		want int
	}{
		{`{"model": "m", "messages": [{"role": "user", "content": "a"}, {"role": "assistant", "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}]}, {"role": "tool", "tool_call_id": "c1", "content": "r"}, {"role": "user", "content": "b"}]}`, 0},
		{`{"model": "m", "messages": [{"role": "user", "content": "a"}, {"role": "assistant", "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}, {"id": "c2", "type": "function", "function": {"name": "f", "arguments": "{}"}}]}, {"role": "tool", "tool_call_id": "c1", "content": "r"}, {"role": "tool", "tool_call_id": "c2", "content": "r"}]}`, 2},
	} {
		if got := len(chatOf(t, c.body).Results()); got != c.want {
			t.Errorf("%s: %d results, want %d", c.body, got, c.want)
		}
	}
	m, err := Read(Messages, []byte(`{"model": "m", "max_tokens": 1, "messages": [{"role": "user", "content": "a"}, {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "f", "input": {}}]}, {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "r"}, {"type": "text", "text": "<reminder>"}]}]}`))
	if err != nil || len(m.Results()) != 1 {
		t.Errorf("a Messages result beside a note: %v %v", m.Results(), err)
	}
}

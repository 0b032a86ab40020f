package api_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"superego/agents"
	"superego/agents/agentstest"
	"superego/flow"
	"superego/memstore"
)

// Markers in drafts: an assistant's response and its tool call's input.
// Where a superego withholds the draft, no client path may carry them.
const (
	draftMarker = "DRAFT-5e1f"
	toolMarker  = "TOOLDRAFT-9c2d"
)

var gatedFlows = map[string]string{
	// BLOCK ends the run; HOLD is a decision of the node's own that
	// withholds.
	"gated": `{"name": "Gated", "graph": {"start": "input_superego", "nodes": {
	  "input_superego": {"type": "superego", "agent_id": "input_superego", "constitution": "Screen.",
	    "transitions": {"BLOCK": null, "ACCEPT": "assistant", "CAUTION": "assistant"}},
	  "assistant": {"type": "inner_agent", "agent_id": "assistant", "system_prompt": "Answer.", "tools": ["calculator"], "max_iterations": 6,
	    "transitions": {"COMPLETE": "output_superego", "NEEDS_TOOL": "self"}},
	  "output_superego": {"type": "superego", "agent_id": "output_superego", "constitution": "Review.", "max_iterations": 2,
	    "withhold": ["HOLD"],
	    "transitions": {"ACCEPT": null, "BLOCK": null, "HOLD": null}}}}}`,
	// BLOCK sends the draft back to the assistant, as multi_agent_flow does.
	"revising": `{"name": "Revising", "graph": {"start": "assistant", "nodes": {
	  "assistant": {"type": "inner_agent", "agent_id": "assistant", "system_prompt": "Answer.", "tools": ["calculator"], "max_iterations": 6,
	    "transitions": {"COMPLETE": "output_superego", "NEEDS_TOOL": "self"}},
	  "output_superego": {"type": "superego", "agent_id": "output_superego", "constitution": "Review.", "max_iterations": 2,
	    "transitions": {"ACCEPT": null, "BLOCK": "assistant"}}}}}`,
	// The same with the reviewer judging the draft as it streams.
	"chunked": `{"name": "Chunked", "graph": {"start": "assistant", "nodes": {
	  "assistant": {"type": "inner_agent", "agent_id": "assistant", "system_prompt": "Answer.",
	    "transitions": {"COMPLETE": "output_superego"}},
	  "output_superego": {"type": "superego", "agent_id": "output_superego", "constitution": "Review.",
	    "judge_stream": {"chunk_chars": 30, "context_chars": 20},
	    "transitions": {"ACCEPT": null, "BLOCK": null}}}}}`,
	// No superego after the assistant: it streams as it always did.
	"open": `{"name": "Open", "graph": {"start": "input_superego", "nodes": {
	  "input_superego": {"type": "superego", "agent_id": "input_superego", "constitution": "Screen.",
	    "transitions": {"BLOCK": null, "ACCEPT": "assistant"}},
	  "assistant": {"type": "inner_agent", "agent_id": "assistant", "system_prompt": "Answer.", "transitions": {"COMPLETE": null}}}}}`,
}

// gateModel plays the gated flows; the user's message says what the
// reviewer does. pause, when set, holds the open assistant's stream after
// its first chunk.
type gateModel struct {
	mu      sync.Mutex
	reviews int
	pause   chan struct{}
	hang    chan struct{} // a call the test is waiting on arrived
}

func (g *gateModel) script(r agentstest.Request) agentstest.Answer {
	user := r.LastUser()
	switch r.Node() {
	case "input_superego":
		return agentstest.Reply(thinkingMarker, "ACCEPT", "", "")
	case "assistant":
		if strings.Contains(user, "stream") {
			return agentstest.Answer{Text: agentstest.JSON(thinkingMarker, "COMPLETE", guidanceMarker, "First words, then more."), Chunk: 4, Pause: g.pause}
		}
		if strings.Contains(user, "long draft") {
			// After part three, enough text that a call nobody stopped takes
			// a while to send it all: the judge's verdict comes first.
			text := "Part one is fine and plain. Part two is fine as well. " + draftMarker + " part three must not go out. Part four is after it, " +
				"and it goes on for a good while longer, six characters every five milliseconds, so that only a call " +
				"nobody stopped ever gets as far as its last words, which are THE-END."
			return agentstest.Answer{Text: agentstest.JSON(thinkingMarker, "COMPLETE", guidanceMarker, text), Chunk: 6, Pace: 5 * time.Millisecond}
		}
		if len(r.ToolResults()) == 0 {
			return agentstest.Answer{ToolCalls: []agentstest.Call{{ID: "call_1", Name: "calculator", Args: `{"expression":"6*7","note":"` + toolMarker + `"}`}}}
		}
		n := strings.Count(user, "The draft from assistant") // a revision sees its first draft
		return agentstest.Reply(thinkingMarker, "COMPLETE", guidanceMarker, fmt.Sprintf("%s-%d the answer is 42.", draftMarker, n))
	case "output_superego":
		if strings.Contains(user, "Judge this part") {
			if strings.Contains(user, "part three") {
				return agentstest.Reply(thinkingMarker, "BLOCK", guidanceMarker, "That part is not for sharing.")
			}
			return agentstest.Reply(thinkingMarker, "ACCEPT", "", "")
		}
		g.mu.Lock()
		g.reviews++
		n := g.reviews
		g.mu.Unlock()
		switch {
		case strings.Contains(user, "block me"):
			return agentstest.Reply(thinkingMarker, "BLOCK", guidanceMarker, "The draft was not fit to send.")
		case strings.Contains(user, "hold me"):
			return agentstest.Reply(thinkingMarker, "HOLD", guidanceMarker, "Held back for review.")
		case strings.Contains(user, "revise me") && n == 1:
			return agentstest.Reply(thinkingMarker, "BLOCK", guidanceMarker+" try again", "Not yet: revising.")
		case strings.Contains(user, "judge fails"):
			return agentstest.Answer{Status: 400, Text: "invalid request: " + user}
		case strings.Contains(user, "judge hangs"):
			g.hang <- struct{}{}
			return agentstest.Answer{Hang: true}
		}
		return agentstest.Reply(thinkingMarker, "ACCEPT", "", "")
	}
	return agentstest.Answer{Status: 400, Text: "unknown node"}
}

func newGateFixture(t *testing.T, store flow.Store) (*fixture, *gateModel) {
	t.Helper()
	g := &gateModel{hang: make(chan struct{}, 1)}
	model := agentstest.OpenAI(t, g.script)
	p := &agents.Providers{Default: "openai:gpt-test", OpenAIKey: "k", OpenAIBaseURL: model.URL + "/v1"}
	f := serveFlows(t, gatedFlows, store, p.Model, 0)
	f.model = model
	return f, g
}

// noDraft fails if client-visible bytes hold a withheld draft, or a hidden field.
func noDraft(t *testing.T, where, s string) {
	t.Helper()
	noLeak(t, where, s)
	for _, m := range []string{draftMarker, toolMarker} {
		if strings.Contains(s, m) {
			t.Errorf("%s shows a withheld draft (%s):\n%s", where, m, s)
		}
	}
}

// everyClientPath reads an instance through every route a client has, and
// checks none shows a withheld draft; it returns what they showed.
func everyClientPath(t *testing.T, f *fixture, id string) string {
	t.Helper()
	var seen strings.Builder
	for _, path := range []string{"/flow/instances/" + id, "/flow/instances", "/flow/instances?flow_id=gated", "/flow/instances/" + id + "/stream?after=0",
		"/flow/instances/" + id + "?include_hidden=true"} {
		b := body(t, f.do(t, "GET", path, ""))
		noDraft(t, "GET "+path, b)
		seen.WriteString(b)
	}
	events := readSSE(t, f.do(t, "GET", "/flow/instances/"+id+"/stream?after=0", "").Body)
	for _, e := range events {
		b := body(t, f.do(t, "GET", "/flow/instances/"+id+"/stream", "", "Last-Event-ID", e.ID))
		noDraft(t, "replay after "+e.ID, b)
	}
	noDraft(t, "the server's log", f.logs.String())
	return seen.String()
}

// research is the research view of an instance.
func research(t *testing.T, f *fixture, id string) string {
	t.Helper()
	return body(t, f.do(t, "GET", "/flow/instances/"+id+"?include_hidden=true", "", "Authorization", "Bearer admin-secret"))
}

func TestWithheldDraftsReachNoClient(t *testing.T) {
	t.Parallel()
	for store, open := range stores {
		t.Run(store, func(t *testing.T) {
			for _, c := range []struct {
				name, input, status, judge, response string
			}{
				{"BLOCK", "block me", "blocked", "output_superego", "The draft was not fit to send."},
				{"the node's own withhold decision", "hold me", "completed", "output_superego", "Held back for review."},
				{"the judge's provider fails", "judge fails", "failed", "output_superego", ""},
			} {
				t.Run(c.name, func(t *testing.T) {
					f, _ := newGateFixture(t, open(t))
					in := `{"flow_id": "gated", "input": "` + c.input + `"}`
					stream := body(t, f.do(t, "POST", "/flow/execute", in))
					noDraft(t, "POST /flow/execute (SSE)", stream)
					answer := body(t, f.do(t, "POST", "/flow/execute", in, "Accept", "application/json"))
					noDraft(t, "POST /flow/execute (JSON)", answer)
					var res struct {
						InstanceID string      `json:"instance_id"`
						Status     string      `json:"status"`
						Response   string      `json:"response"`
						Steps      []flow.Step `json:"steps"`
					}
					json.Unmarshal([]byte(answer), &res)
					if res.Status != c.status || res.Response != c.response {
						t.Errorf("status %s, response %q; want %s, %q", res.Status, res.Response, c.status, c.response)
					}
					withheld := 0
					for _, s := range res.Steps {
						if s.AgentID == "assistant" {
							if s.Withheld != c.judge || s.Response != "" || s.ToolUsage != nil {
								t.Errorf("assistant step %s: withheld %q, response %q, tools %v", s.StepID, s.Withheld, s.Response, s.ToolUsage)
							}
							withheld++
						}
					}
					if withheld != 2 { // the tool round and the draft
						t.Errorf("%d withheld steps, want 2", withheld)
					}
					for _, e := range readSSE(t, strings.NewReader(stream)) {
						if strings.Contains(e.Data, `"node":"assistant"`) && e.Name != "node_start" && e.Name != "complete_step" {
							t.Errorf("a withheld turn's %s went out: %s", e.Name, e.Data)
						}
					}
					everyClientPath(t, f, res.InstanceID)
					if c.name == "the judge's provider fails" && !strings.Contains(stream, `invalid request: The user's message:\njudge fails\n\nThe draft from assistant:\n[hidden]`) {
						t.Errorf("the provider's error is not shown with the draft taken out:\n%s", stream)
					}
					// The draft is kept, where hidden fields are.
					view := research(t, f, res.InstanceID)
					if !strings.Contains(view, draftMarker) || !strings.Contains(view, toolMarker) || !strings.Contains(view, `"withheld_response"`) {
						t.Errorf("the research view lacks the withheld draft:\n%s", view)
					}
				})
			}
		})
	}
}

// A revision loop: the reviewer sends the first draft back; it is withheld,
// the second goes out.
func TestRevisionLoopWithholdsTheFirstDraftOnly(t *testing.T) {
	t.Parallel()
	f, _ := newGateFixture(t, &memstore.Store{})
	var res runResult
	json.Unmarshal([]byte(body(t, f.do(t, "POST", "/flow/execute", `{"flow_id": "revising", "input": "revise me"}`, "Accept", "application/json"))), &res)
	if res.Status != "completed" || res.Response != draftMarker+"-1 the answer is 42." {
		t.Fatalf("result %+v", res)
	}
	var trace []string
	for _, s := range res.Steps {
		trace = append(trace, s.AgentID+":"+s.Decision+":"+s.Withheld)
	}
	want := "user:: assistant:NEEDS_TOOL:output_superego assistant:COMPLETE:output_superego output_superego:BLOCK: " +
		"assistant:NEEDS_TOOL: assistant:COMPLETE: output_superego:ACCEPT:"
	if got := strings.Join(trace, " "); got != want {
		t.Errorf("steps\n %s\nwant\n %s", got, want)
	}
	history := everyClientPathRaw(t, f, res.InstanceID)
	if strings.Contains(history, draftMarker+"-0") {
		t.Error("the first draft reached a client")
	}
	if !strings.Contains(history, draftMarker+"-1") {
		t.Error("the second draft never went out")
	}
	if !strings.Contains(research(t, f, res.InstanceID), draftMarker+"-0") {
		t.Error("the research view lacks the first draft")
	}
}

// everyClientPathRaw is what every client path shows, without judging it.
func everyClientPathRaw(t *testing.T, f *fixture, id string) string {
	var b strings.Builder
	for _, path := range []string{"/flow/instances/" + id, "/flow/instances", "/flow/instances/" + id + "/stream?after=0"} {
		b.WriteString(body(t, f.do(t, "GET", path, "")))
	}
	return b.String()
}

// Cancelling a run while its draft is held withholds the draft.
func TestCancelWhileHeldWithholds(t *testing.T) {
	t.Parallel()
	f, g := newGateFixture(t, &memstore.Store{})
	resp := f.do(t, "POST", "/flow/execute", `{"flow_id": "gated", "input": "judge hangs"}`)
	<-g.hang
	list := body(t, f.do(t, "GET", "/flow/instances", ""))
	id := uuidRe.FindString(list)
	if c := f.do(t, "POST", "/flow/instances/"+id+"/cancel", ""); c.StatusCode != http.StatusAccepted {
		t.Fatalf("cancel: %d", c.StatusCode)
	}
	stream := body(t, resp)
	noDraft(t, "the cancelled run's stream", stream)
	if !strings.Contains(stream, `"status":"cancelled"`) || !strings.Contains(stream, `"withheld":"output_superego"`) {
		t.Errorf("stream:\n%s", stream)
	}
	everyClientPath(t, f, id)
}

// ACCEPT releases every held event, in order, before the judge's step; ids
// grow on the live stream and on a replay from every event id.
func TestAcceptReleasesHeldEventsInOrder(t *testing.T) {
	t.Parallel()
	f, _ := newGateFixture(t, &memstore.Store{})
	events := readSSE(t, f.do(t, "POST", "/flow/execute", `{"flow_id": "gated", "input": "What is 6*7?"}`).Body)
	var names []string
	for i, e := range events {
		node := ""
		var d struct {
			Node    string `json:"node"`
			AgentID string `json:"agent_id"`
		}
		json.Unmarshal([]byte(e.Data), &d)
		if node = d.Node; node == "" {
			node = d.AgentID
		}
		names = append(names, e.Name+":"+node)
		if i > 0 {
			prev, _ := strconv.Atoi(events[i-1].ID)
			cur, _ := strconv.Atoi(e.ID)
			if cur <= prev {
				t.Errorf("event %d after %d", cur, prev)
			}
		}
	}
	got := strings.Join(names, " ")
	// The assistant's turn goes out once the reviewer accepts: after the
	// reviewer's node_start, before its step.
	want := "run_start: complete_step:user node_start:input_superego complete_step:input_superego " +
		"node_start:assistant node_start:assistant node_start:output_superego " +
		"tool_call:assistant tool_result:assistant complete_step:assistant " +
		strings.Repeat("partial_output:assistant ", strings.Count(got, "partial_output:assistant")) +
		"complete_step:assistant complete_step:output_superego done:"
	if got != want {
		t.Errorf("events\n %s\nwant\n %s", got, want)
	}
	if !strings.Contains(got, "partial_output:assistant") {
		t.Error("no partials were released")
	}
	id := uuidRe.FindString(events[0].Data)
	stored := readSSE(t, f.do(t, "GET", "/flow/instances/"+id+"/stream?after=0", "").Body)
	for i, e := range stored {
		after := readSSE(t, f.do(t, "GET", "/flow/instances/"+id+"/stream", "", "Last-Event-ID", e.ID).Body)
		if len(after) != len(stored)-i-1 {
			t.Errorf("replay after %s: %d events, want %d", e.ID, len(after), len(stored)-i-1)
			continue
		}
		for j, a := range after {
			if a != stored[i+1+j] {
				t.Errorf("replay after %s: event %d is %+v, want %+v", e.ID, j, a, stored[i+1+j])
			}
		}
	}
}

// An inner agent no superego judges streams as it always did: its partials
// arrive while its call is still going.
func TestUngatedAgentStreamsLive(t *testing.T) {
	t.Parallel()
	f, g := newGateFixture(t, &memstore.Store{})
	g.pause = make(chan struct{})
	resp := f.do(t, "POST", "/flow/execute", `{"flow_id": "open", "input": "stream please"}`)
	defer resp.Body.Close()
	r := newSSEReader(resp.Body)
	for {
		e, ok := r.next()
		if !ok {
			t.Fatal("the stream ended before any partial output of the assistant")
		}
		if e.Name == "partial_output" && strings.Contains(e.Data, `"node":"assistant"`) {
			break // its call is paused at the model: the partial came live
		}
	}
	close(g.pause)
	var last sseEvent
	for e, ok := r.next(); ok; e, ok = r.next() {
		last = e
	}
	if last.Name != "done" || !strings.Contains(last.Data, `"response":"First words, then more."`) {
		t.Errorf("last event %+v", last)
	}
}

// The reviewer judges a long draft in chunks: the first two go out while
// the assistant writes, the third is withheld, which stops the assistant,
// and nothing after the second chunk reaches the client.
func TestChunkedJudgingWithholdsTheThirdChunk(t *testing.T) {
	t.Parallel()
	f, _ := newGateFixture(t, &memstore.Store{})
	stream := body(t, f.do(t, "POST", "/flow/execute", `{"flow_id": "chunked", "input": "write a long draft"}`))
	noDraft(t, "the stream", stream)
	var released strings.Builder
	var judge flow.Step
	var done flow.Done
	for _, e := range readSSE(t, strings.NewReader(stream)) {
		switch {
		case e.Name == "partial_output" && strings.Contains(e.Data, `"node":"assistant"`):
			var p flow.Partial
			json.Unmarshal([]byte(e.Data), &p)
			released.WriteString(p.Delta)
		case e.Name == "complete_step" && strings.Contains(e.Data, `"agent_id":"output_superego"`):
			json.Unmarshal([]byte(e.Data), &judge)
		case e.Name == "done":
			json.Unmarshal([]byte(e.Data), &done)
		}
	}
	if got := released.String(); got != "Part one is fine and plain. Part two is fine as well. " {
		t.Errorf("released %q, want the first two chunks", got)
	}
	var ends []string
	for _, c := range judge.Chunks {
		ends = append(ends, fmt.Sprint(c.End, c.Decision))
	}
	if got := strings.Join(ends, " "); got != "28ACCEPT 54ACCEPT 85BLOCK" || judge.Decision != "BLOCK" || done.Status != "blocked" {
		t.Errorf("chunks %s, decision %s, status %s", got, judge.Decision, done.Status)
	}
	// The assistant's call was stopped: it never sent its last part.
	id := done.InstanceID
	view := research(t, f, id)
	if !strings.Contains(view, draftMarker) || strings.Contains(view, "THE-END") {
		t.Errorf("the research view should hold the draft up to where it was stopped:\n%s", view)
	}
	everyClientPath(t, f, id)
	var calls int
	for _, r := range f.model.Requests() {
		if r.Node() == "output_superego" {
			calls++
		}
	}
	if calls != 3 {
		t.Errorf("%d judge calls, want 3 chunk judgements and no final one", calls)
	}
}

// sseReader reads an event stream one event at a time.
type sseReader struct {
	lines chan string
}

func newSSEReader(r io.Reader) *sseReader {
	s := &sseReader{lines: make(chan string)}
	go func() {
		defer close(s.lines)
		b := make([]byte, 0, 4096)
		buf := make([]byte, 4096)
		for {
			n, err := r.Read(buf)
			b = append(b, buf[:n]...)
			for {
				i := strings.IndexByte(string(b), '\n')
				if i < 0 {
					break
				}
				s.lines <- string(b[:i])
				b = b[i+1:]
			}
			if err != nil {
				return
			}
		}
	}()
	return s
}

func (s *sseReader) next() (sseEvent, bool) {
	var e sseEvent
	for line := range s.lines {
		switch {
		case line == "" && e.Name != "":
			return e, true
		case strings.HasPrefix(line, "id: "):
			e.ID = line[4:]
		case strings.HasPrefix(line, "event: "):
			e.Name = line[7:]
		case strings.HasPrefix(line, "data: "):
			e.Data = line[6:]
		}
	}
	return e, false
}
